"""The task layer: every task trains with every model that fits it; misfits and bad configs fail
before anything is built; special ids come from the tokenizers, never from literals."""

import functools
import importlib
import os
import subprocess
import sys

from flax import nnx
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from test_training import TRAIN_SPLIT

import models
import tasks
from tasks.translation import teacher_forced_counts, teacher_forced_loss
from training import config as schema
from training.setup import build_state
from training.steps import train_step

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A config file per task, and tiny sizes per model, so one step takes a second.
TASK_CONFIGS = {
  'captioning': 'caption_digits',
  'classification': 'han',
  'copy': 'ntm_copy',
  'image_classification': 'vit_digits',
  'language_modeling': 'gpt_mqar',
  'question_answering': 'memn2n_babi',
  'translation': 'default',
}
# Smaller data than the configs train on, where a task's config asks for more.
TASK_DATASETS = {
  'captioning': dict(builder_config='small'),
  'classification': dict(builder_config='default'),
  'copy': dict(max_length=4, train_size=64, eval_size=16),
  'question_answering': dict(builder_config='qa1_1k'),
  'translation': dict(train_split=TRAIN_SPLIT),  # the vocabulary and one step
}
TINY_MODELS = {
  'decoder_lm': dict(num_layers=1, d_model=16, num_heads=2, d_ff=32, max_length=64),
  'encoder_mlm': dict(num_layers=1, d_model=16, num_heads=2, d_ff=32),
  'transformer': dict(num_layers=1, d_model=16, num_heads=2, d_ff=32, max_length=64),
  'seq2seq': dict(embed_dim=8, hidden_dim=16),
  'han': dict(embed_dim=8, hidden_dim=8),
  'transformer_classifier': dict(num_layers=1, d_model=16, num_heads=2, d_ff=32),
  'vit': dict(num_layers=1, d_model=16, num_heads=2, d_ff=32),
  'captioner': dict(d_model=16, cnn_channels=(8, 8), embed_dim=8, num_heads=2, d_ff=32),
  'memn2n': dict(embed_dim=8),
  'ntm': dict(memory_slots=8, memory_width=4, controller_size=8),
  'lstm': dict(hidden_size=8),
}
PAIRS = [
  (task, model)
  for task, cls in sorted(tasks.TASKS.items())
  for model in models.fitting(cls.interface)
]


def tiny_config(task: str, model: str, data_dir):
  config = importlib.import_module(f'configs.{TASK_CONFIGS[task]}').get_config()
  config.model = models.default_config(model, **TINY_MODELS[model])
  config.dataset.update(batch_size=8, eval_batch_size=8, **TASK_DATASETS.get(task, {}))
  if 'data_dir' in config.dataset:  # generated in memory otherwise (copy)
    config.dataset.data_dir = str(data_dir)
  return config


def test_every_task_has_a_config_and_every_registered_model_tiny_sizes():
  assert set(TASK_CONFIGS) == set(tasks.TASKS)
  assert set(TINY_MODELS) == set(models.MODELS)
  assert ('translation', 'seq2seq') in PAIRS and ('translation', 'transformer') in PAIRS


# A representative attention variant per Transformer-family model, which its one-step training
# test runs with; together they use every variant (the defaults train in the tests of each task).
VARIANTS = {
  'transformer': dict(num_kv_heads=1, positions='t5', sink=True),
  'decoder_lm': dict(window=4, positions='alibi', softcap=10.0, cache_dtype='bfloat16'),
  'encoder_mlm': dict(attention='linear', positions='rope'),
  'transformer_classifier': dict(num_kv_heads=1, qk_norm=True, positions='alibi'),
  'vit': dict(window=3, qk_norm=True, positions='t5'),
  'captioner': dict(decoder='transformer', attention='linear', num_kv_heads=1),
}


@pytest.mark.parametrize('task_name, model', PAIRS)
def test_every_task_trains_every_fitting_model_one_step(
  task_name, model, tfds_dir, tmp_path_factory
):
  config = tiny_config(task_name, model, tfds_dir)
  config.model.update(VARIANTS.get(model, {}))
  schema.validate(config)
  task = tasks.build(config, str(tmp_path_factory.mktemp('run')))
  batch = next(task.batches(config.dataset.train_split, batch_size=8, shuffle=True, seed=0))
  state = build_state(config, task)
  new_state, metrics = jax.jit(functools.partial(train_step, loss_fn=task.loss))(
    state, batch, jax.random.key(0)
  )
  assert bool(metrics['finite']) and np.isfinite(float(metrics['loss']))
  assert int(metrics[task.unit]) > 0
  summary = task.summarize(jax.device_get(metrics))
  accuracies = [value for key, value in summary.items() if 'accuracy' in key]
  assert accuracies and all(0 <= value <= 1 for value in accuracies)
  assert any(
    not np.allclose(a, b)
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(new_state.params))
  )


class _Pooler(nnx.Module):
  """A model with a forward pass only: it cannot decode, so it does not fit translation."""

  def __init__(self, *, width: int = 4, rngs: nnx.Rngs):
    self.width = width

  def __call__(self, x):
    return x


def test_a_model_that_does_not_fit_the_task_is_one_clear_error(monkeypatch, tmp_path):
  monkeypatch.setitem(models.MODELS, 'pooler', _Pooler)
  message = (
    "config.model.name='pooler' (_Pooler) does not fit config.task='translation', which "
    "needs a EncoderDecoder model; models that fit: ['seq2seq', 'transformer']."
  )
  with pytest.raises(ValueError) as error:
    tasks.check_fits('translation', 'pooler')
  assert str(error.value) == message
  config = tiny_config('translation', 'transformer', tmp_path)
  config.model = models.default_config('pooler')
  with pytest.raises(ValueError, match='does not fit'):
    tasks.build(config, str(tmp_path / 'never_prepared'))
  assert not (tmp_path / 'never_prepared').exists()  # no data prepared, no vocabulary written


def test_unknown_task_lists_the_valid_ones():
  valid = (
    r"\['captioning', 'classification', 'copy', 'image_classification', "
    r"'language_modeling', 'question_answering', 'translation'\]"
  )
  with pytest.raises(ValueError, match=rf"config.task='lm' is not one of {valid}"):
    tasks.task_class('lm')


@pytest.mark.parametrize(
  'change, message',
  [
    (dict(num_train_step=10), 'config.num_train_step is not a config field; valid fields: '),
    (dict(learning_rate='fast'), "config.learning_rate='fast' must be of type float"),
    (dict(num_train_steps=10.0), 'config.num_train_steps=10.0 must be of type int'),
    (dict(grad_clip=True), 'config.grad_clip=True must be of type float'),
    (dict(task='lm'), "config.task='lm' is not one of"),
  ],
)
def test_training_fields_are_checked_against_the_schema(change, message):
  """As eval.py reads a config back from config.json: plain values, no ConfigDict type locks."""
  values = importlib.import_module('configs.default').get_config().to_dict()
  with pytest.raises(ValueError, match=message.replace('(', r'\(')):
    schema.validate(ml_collections.ConfigDict({**values, **change}))


def test_configs_state_only_deltas_yet_every_model_field_can_be_overridden(tmp_path):
  """Fields the config file never mentions (an optional kernel, per-head sizes) still override."""
  flags = [
    '--config.model.attention_impl=chunked',
    '--config.model.d_k=8',
    '--config.model.attention_dropout_rate=0.1',
    '--config.num_train_steps=0',
  ]
  result = subprocess.run(
    [sys.executable, 'train.py', '--config=configs/default.py', f'--workdir={tmp_path}', *flags],
    cwd=ROOT,
    capture_output=True,
    text=True,
  )
  # The overrides parsed; validation then stops at the one bad field, in one sentence.
  assert result.stderr.strip().splitlines()[-1] == (
    'train.py: config.num_train_steps=0 must be a positive integer.'
  )
  config = importlib.import_module('configs.default').get_config()
  assert config.model.d_k is None and config.model.attention_impl is None


def _translation_batch(pad: int):
  """Two rows; the second is padded with `pad` in source and target."""
  inputs = np.array([[3, 4, 5, 6], [7, 8, pad, pad]], np.int32)
  targets = np.array([[4, 5, 9, 10], [6, 9, pad, pad]], np.int32)
  return dict(inputs=inputs, targets=targets)


@pytest.mark.parametrize('name', ['transformer', 'seq2seq'])
def test_a_tokenizer_with_other_special_ids_masks_and_counts_its_own_padding(name):
  """With PAD=11 and BOS=12, padding is skipped exactly as with PAD=0: same loss, same counts,
  and the logits of real positions do not depend on what fills the padded ones."""
  sizes = dict(input_vocab_size=13, output_vocab_size=13)
  model = models.build(
    models.default_config(name, **TINY_MODELS[name]), pad_id=11, **sizes, rngs=nnx.Rngs(0)
  )
  batch = _translation_batch(pad=11)
  counts = teacher_forced_counts(model, batch, bos_id=12, pad_id=11)
  assert int(counts['tokens']) == 6 and int(counts['rows']) == 2
  shorter = dict(inputs=batch['inputs'][1:, :2], targets=batch['targets'][1:, :2])
  alone = teacher_forced_counts(model, shorter, bos_id=12, pad_id=11)
  first = teacher_forced_counts(model, {k: v[:1] for k, v in batch.items()}, bos_id=12, pad_id=11)
  for key in ('loss_sum', 'entropy_sum'):
    np.testing.assert_allclose(counts[key], first[key] + alone[key], rtol=1e-5)
  # The entropy by NumPy: cross-attention rows of real target tokens, mean over layers and heads.
  cross = models.interventions.attention(
    model, 'cross', batch['inputs'], jnp.array([[12, 4, 5, 9], [12, 6, 9, 11]])
  )  # [B, L, N, T, S]; a Seq2Seq's one query a step: [B, 1, T, 1, S]
  cross = np.asarray(cross, np.float64).reshape(2, -1, 4, cross.shape[-1])  # [B, L * N, T, S]
  rows = -np.sum(np.where(cross > 0, cross * np.log(np.where(cross > 0, cross, 1)), 0), -1)
  real = batch['targets'] != 11
  np.testing.assert_allclose(counts['entropy_sum'], rows.mean(axis=1)[real].sum(), rtol=1e-5)
  loss, _ = teacher_forced_loss(model, batch, jax.random.key(0), bos_id=12, pad_id=11)
  assert np.isfinite(float(loss))
  decoder_inputs = jnp.array([[12, 6]], jnp.int32)
  np.testing.assert_allclose(
    model(batch['inputs'][1:], decoder_inputs),
    model(batch['inputs'][1:, :2], decoder_inputs),
    atol=1e-5,
  )
