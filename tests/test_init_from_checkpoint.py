"""`config.init_from` naming a pretrained checkpoint: a run starts from its weights and tokenizer
with no convert.py step, and fewer key/value heads are merged by `config.init_kv_pooling`
(Ainslie et al.'s grouped-query conversion), or refused in one sentence before anything is
written."""

import os

from fine_tunes import train
import jax
import numpy as np
import pytest
from tiny_decoders import VOCAB, write_checkpoint

from configs import pretrained_lm
from models import pretrained
import sources
import tasks
from training import init_from, loop, sharding
from training.checkpoints import CheckpointMismatchError
from training.setup import build_state


@pytest.fixture(scope='module')
def llama(tmp_path_factory):
  """A tiny random Llama checkpoint (4 query heads, 2 key/value heads of 8) and a text."""
  base = tmp_path_factory.mktemp('init_from_checkpoint')
  folder = write_checkpoint('llama', str(base / 'llama'))
  text = base / 'text.txt'
  words = np.random.default_rng(0).integers(1, VOCAB, (300, 9))
  text.write_text('\n'.join(' '.join(f'w{i}' for i in row) for row in words))
  return folder, str(text)


def _config(llama, **model):
  folder, text = llama
  config = pretrained_lm.get_config(folder)
  config.dataset.update(text_path=text, seq_length=16, batch_size=4, eval_batch_size=8)
  config.update(num_train_steps=1, eval_every_steps=0, num_eval_decode=0, warmup_steps=1)
  config.model.update(model)
  return config


def _started(config) -> tuple[dict[str, np.ndarray], list[str]]:
  """The parameters a run of `config` starts from, and those it initialises."""
  source = sources.resolve_init_from(config)
  with source.vocabulary() as vocabulary:
    task = tasks.build(config, vocabulary)
    state, _, initialised = init_from.load_matching_params(
      build_state(config, task), config, source
    )
  leaves = jax.tree_util.tree_flatten_with_path(state.params)[0]
  params = {jax.tree_util.keystr(p, simple=True, separator='.'): np.asarray(v) for p, v in leaves}
  return params, initialised


def _heads(kernel: np.ndarray, heads: int) -> np.ndarray:
  return kernel.reshape(kernel.shape[0], heads, -1)  # [D, K, H]


def test_train_py_starts_from_the_checkpoint_itself(llama, tmp_path):
  """The config's init_from is the checkpoint: every parameter is its own, and a run trains
  from there with its tokenizer, as from the workdir convert.py would have written."""
  config = _config(llama)
  assert config.init_from == llama[0]
  ours, initialised = _started(config)
  model, _ = pretrained.load_decoder(pretrained.read(llama[0]))
  assert initialised == []
  np.testing.assert_array_equal(
    ours['layers.1.self_attn.w_k.kernel'], np.asarray(model.layers[1].self_attn.w_k.kernel[...])
  )
  metrics = train(config, str(tmp_path / 'run'))
  assert 4 < metrics['bits_per_token'] < 9  # a random model: about log2(97) = 6.6 bits
  assert os.path.isfile(tmp_path / 'run' / 'vocab' / 'shared.tokenizer.json')  # its own


@pytest.mark.parametrize('pooling', ['mean', 'first', 'random'])
def test_fewer_key_value_heads_are_merged_by_the_pooling_asked_for(llama, pooling):
  config = _config(llama, num_kv_heads=1)
  config.init_kv_pooling = pooling
  ours, initialised = _started(config)
  assert initialised == []
  model, _ = pretrained.load_decoder(pretrained.read(llama[0]))
  for name in ('w_k', 'w_v'):
    theirs = _heads(np.asarray(getattr(model.layers[0].self_attn, name).kernel[...]), 2)
    merged = _heads(ours[f'layers.0.self_attn.{name}.kernel'], 1)[:, 0]
    if pooling == 'mean':
      np.testing.assert_allclose(merged, theirs.mean(axis=1), rtol=1e-6)
    elif pooling == 'first':
      np.testing.assert_array_equal(merged, theirs[:, 0])
    else:  # a fresh head, neither of the trained ones nor their mean
      assert not np.allclose(merged, theirs[:, 0]) and not np.allclose(merged, theirs[:, 1])
  np.testing.assert_array_equal(  # the queries are the checkpoint's
    ours['layers.0.self_attn.w_q.kernel'], np.asarray(model.layers[0].self_attn.w_q.kernel[...])
  )


@pytest.mark.parametrize(
  'changes, message',
  [
    (dict(num_kv_heads=1), r'has 2 key/value heads where config.model has 1: set config.init_kv'),
    (dict(num_kv_heads=4), r'num_kv_heads=4 does not divide its 2 key/value heads \(any of \[1, 2'),
    (dict(d_ff=32), r'other shapes .*w_1.*another model size'),
  ],
)
def test_a_change_the_checkpoint_cannot_fill_is_one_sentence_and_writes_nothing(
  llama, tmp_path, changes, message
):
  workdir = tmp_path / 'refused'
  with pytest.raises(CheckpointMismatchError, match=message):
    train(_config(llama, **changes), str(workdir))
  assert not workdir.exists() or sorted(os.listdir(workdir)) == []


def test_a_name_that_is_neither_a_workdir_nor_a_checkpoint_is_one_sentence(llama, tmp_path):
  config = _config(llama)
  config.init_from = str(tmp_path / 'nowhere')
  said = r'config.init_from=.*nowhere names nothing Attend reads: give a training workdir'
  with pytest.raises(FileNotFoundError, match=said):
    train(config, str(tmp_path / 'run'))
  assert not (tmp_path / 'run').exists() or os.listdir(tmp_path / 'run') == []


def test_a_swap_the_weights_were_not_trained_for_or_that_changes_nothing_says_so(
  llama, tmp_path, caplog
):
  config = _config(llama, attention='sigmoid', window=16, dropout_rate=0.1)
  with caplog.at_level('WARNING', logger='absl'):
    train(config, str(tmp_path / 'swapped'))
  notes = [r.getMessage() for r in caplog.records if r.getMessage().startswith('config.model.')]
  assert notes == [
    "config.model.attention='sigmoid', where the weights were trained with 'softmax': they "
    'compute something else until trained for it.',
    'config.model.window=16 covers every 16-token row (config.dataset.seq_length): the window '
    'changes nothing here.',
  ]  # dropout changes how it trains, not what the weights compute: no line


def test_a_fine_tune_compiles_its_train_step_once(llama):
  """The first state a fine-tune builds is placed as the steps' outputs are and owned by XLA:
  the train step is compiled once, not again at the second step, and every step writes the new
  parameters over the donated ones, the first included."""
  config = _config(llama)
  mesh = sharding.make_mesh(config.mesh)
  source = sources.resolve_init_from(config)
  with source.vocabulary() as vocabulary:
    task = tasks.build(config, vocabulary)
    state = init_from.initial_state(config, task, mesh, source)
  step_fn = loop.jit_train_step(config, task, state, mesh)
  batches = task.batches(config.dataset.train_split, batch_size=4, shuffle=True, seed=0)
  buffers = lambda state: [x.unsafe_buffer_pointer() for x in jax.tree.leaves(state.params)]
  for _ in range(2):
    before = buffers(state)
    state, _ = step_fn(state, sharding.shard_batch(next(batches), mesh), jax.random.key(1))
    assert buffers(state) == before  # donated: the new parameters written over the old
  assert int(state.step) == 2
  assert step_fn._cache_size() == 1
