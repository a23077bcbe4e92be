"""Attention pictures come from one jitted forward over padded batches: hundreds of examples
compile once, and the padding leaves each example's weights as the model gives it alone."""

import os

from flax import nnx
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from PIL import Image
import pytest

from configs import seq2seq_bahdanau
import tasks
from tasks import picture_weights, translation

EXAMPLES = 300  # ten batches of the helper's 32 rows, the last one partly filled


@pytest.fixture(scope='module')
def bahdanau(tmp_path_factory):
  """A tiny untrained Bahdanau Seq2Seq (the issue's model), its task, and `EXAMPLES` samples
  whose outputs are prefixes of their references, so both lengths vary from sample to sample."""
  config = seq2seq_bahdanau.get_config()
  config.model.update(embed_dim=8, hidden_dim=16)
  config.dataset.data_dir = str(tmp_path_factory.getbasetemp() / 'tfds')
  task = tasks.build(config, str(tmp_path_factory.mktemp('run')))
  model = task.build_model(config.model, nnx.Rngs(0))
  samples = []
  for batch in task.batches('test', batch_size=100, shuffle=False, seed=0, num_epochs=1):
    for row in ({key: values[i] for key, values in batch.items()} for i in range(100)):
      targets = row['targets'][: 1 + len(samples) % row['targets'].shape[0]]
      samples.append(task.sample('test', dict(row, output_ids=targets)))
    if len(samples) >= EXAMPLES:
      break
  return task, model, samples[:EXAMPLES]


def _examples(task, samples):
  """(source ids, decoder inputs) per sample, as `Translation.draw` gives them to the helper."""
  return [(s['inputs'], [task.target_tokenizer.bos_id, *s['output_ids'][:-1]]) for s in samples]


def test_padded_batches_give_each_example_its_own_weights_from_one_trace(bahdanau):
  task, model, samples = bahdanau
  traces = []

  def counted(model, inputs, decoder_inputs):
    traces.append((inputs.shape, decoder_inputs.shape))
    return translation._FORWARDS['cross'](model, inputs, decoder_inputs)

  examples = _examples(task, samples)
  pads = (task.source_tokenizer.pad_id, task.target_tokenizer.pad_id)
  weights = list(
    picture_weights.batched_weights(counted, model, examples, pad_ids=pads, crop=(1, 0))
  )
  longest = (max(len(s) for s, _ in examples), max(len(t) for _, t in examples))
  assert traces == [((32, longest[0]), (32, longest[1]))]  # one trace for ten batches
  assert len(weights) == EXAMPLES
  assert [w.shape for w in weights] == [(1, 1, len(t), len(s)) for s, t in examples]
  sizes = [len(s) * len(t) for s, t in examples]
  shortest = int(np.argmin(sizes))
  assert len(examples[shortest][0]) < longest[0] and len(examples[shortest][1]) < longest[1]
  # The most padded example, the longest one, and the last (beside the rows that fill its batch).
  for i in (shortest, int(np.argmax(sizes)), EXAMPLES - 1):
    source, decoder_inputs = examples[i]
    _, alone = translation.read_attention(
      model, 'cross', jnp.asarray([source]), jnp.asarray([decoder_inputs])
    )  # [1, L, N, T, S]
    np.testing.assert_allclose(weights[i], alone[0], atol=1e-5)


def test_draw_writes_its_pictures_from_one_compilation_and_leaves_no_figure_open(
  bahdanau, tmp_path
):
  task, model, samples = bahdanau
  count = 40  # rendering takes ~0.1 s a picture; two batches, the second padded
  picture_weights._forward.clear_cache()
  paths = task.draw(model, samples, str(tmp_path), tasks.EvalOptions(num_pictures=count))
  assert picture_weights._forward._cache_size() == 1
  assert paths == [
    os.path.join(tmp_path, f'attention_{s["index"]:04d}.png') for s in samples[:count]
  ]
  assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in paths)
  for path in paths:
    with Image.open(path) as image:
      image.verify()
      assert image.format == 'PNG'
  assert not plt.get_fignums()
