"""The classification task: metrics by hand, every classification config trains, and training then
evaluation write predictions, the confusion matrix and the HAN attention figure (PNG and HTML)."""

import functools
import importlib
import json
import os

import jax
import numpy as np
import pytest

import models
from reports import run_eval
import tasks
from tasks.classification import class_metrics, confusion_matrix, hit_rate
import training
from training.config import validate
from training.setup import build_state
from training.steps import merge_model, train_step

CONFIGS = ('han', 'transformer_classifier', 'classification_tsv')
TINY = {
  'han': dict(embed_dim=8, hidden_dim=8),
  'transformer_classifier': dict(num_layers=1, d_model=16, num_heads=2, d_ff=32),
}


def test_confusion_matrix_and_metrics_by_hand():
  # labels    0 0 0 1 1 2      predictions 0 1 0 1 1 0
  matrix = confusion_matrix([0, 0, 0, 1, 1, 2], [0, 1, 0, 1, 1, 0], 3)
  np.testing.assert_array_equal(matrix, [[2, 1, 0], [0, 2, 0], [1, 0, 0]])
  metrics = class_metrics(matrix, ['a', 'b', 'c'])
  # a: precision 2/3, recall 2/3, F1 2/3; b: precision 2/3, recall 1, F1 0.8; c: all 0.
  assert metrics['accuracy'] == pytest.approx(4 / 6)
  assert metrics['precision/a'] == pytest.approx(2 / 3)
  assert metrics['recall/b'] == pytest.approx(1.0)
  assert metrics['precision/c'] == 0 and metrics['recall/c'] == 0
  assert metrics['macro_f1'] == pytest.approx((2 / 3 + 0.8 + 0) / 3)


def test_hit_rate_counts_only_examples_with_key_sentences_and_weights():
  samples = [
    dict(key_sentences=[2], sentence_weights=[0.1, 0.2, 0.7]),  # hit
    dict(key_sentences=[0, 1], sentence_weights=[0.1, 0.2, 0.7]),  # miss
    dict(key_sentences=[], sentence_weights=[1.0]),  # no key: ignored
    dict(key_sentences=[1]),
  ]  # no weights
  assert hit_rate(samples) == 0.5
  assert hit_rate(samples[2:]) is None


def tiny_config(name, data_dir, tmp_path):
  config = importlib.import_module(f'configs.{name}').get_config()
  config.model.update(TINY[config.model.name])
  config.dataset.update(data_dir=str(data_dir), batch_size=8, eval_batch_size=8)
  if config.dataset.name == 'key_sentence_docs':
    config.dataset.builder_config = 'default'  # 10,000 training documents, not 50,000
  if config.dataset.name == 'tsv_classification':
    lines = [
      f'the {w} was {adj}\t{label}'
      for w in ('film', 'meal', 'show', 'song', 'game')
      for adj, label in (('great', 'pos'), ('awful', 'neg'), ('fine', 'pos'), ('dull', 'neg'))
    ] * 3
    path = tmp_path / 'reviews.tsv'
    path.write_text('\n'.join(lines) + '\n')
    config.dataset.tsv_path = str(path)
  return config


@pytest.fixture(scope='module')
def data_dir(tfds_dir):
  return tfds_dir


@pytest.mark.parametrize('name', CONFIGS)
def test_every_classification_config_takes_a_training_step(name, data_dir, tmp_path):
  config = tiny_config(name, data_dir, tmp_path)
  validate(config)
  task = tasks.build(config, str(tmp_path))
  batch = next(task.batches('train', batch_size=8, shuffle=True, seed=0))
  assert batch['labels'].shape == (8,) and batch['inputs'].ndim == 3
  state = build_state(config, task)
  new_state, metrics = jax.jit(functools.partial(train_step, loss_fn=task.loss))(
    state, batch, jax.random.key(0)
  )
  assert bool(metrics['finite']) and int(metrics['examples']) == 8
  assert any(
    not np.allclose(a, b)
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(new_state.params))
  )


@pytest.mark.slow
@pytest.mark.parametrize('model', ['han', 'transformer_classifier'])
def test_train_then_eval_writes_predictions_confusion_and_attention(model, data_dir, tmp_path):
  """In-process (train.py and eval.py are these two calls; tests/test_training.py runs them)."""
  workdir = str(tmp_path / 'run')
  config = tiny_config(model, data_dir, tmp_path)
  # One padded shape (the longest document and sentence) instead of one per bucket: each step
  # compiles once. Validation's first 64 documents: what is checked needs no more.
  config.dataset.update(eval_batch_size=64, bucket_step=32, eval_split='validation[:64]')
  config.update(num_train_steps=3, eval_every_steps=0, num_eval_decode=0, log_every_steps=1)
  training.train_and_evaluate(config, workdir)
  run_eval.evaluate(
    run_eval.Request(workdir, split='validation[:64]', max_examples=50, num_heatmaps=2)
  )
  out = os.path.join(workdir, 'eval')
  metrics = json.load(open(os.path.join(out, 'metrics.json')))
  assert metrics['examples'] == 50
  for key in ('accuracy', 'macro_f1', 'attention_hit_rate', 'precision/sports', 'recall/food'):
    assert 0 <= metrics[key] <= 1, key
  lines = open(os.path.join(out, 'predictions.txt')).read().splitlines()
  assert lines[0] == 'text | label | prediction | confidence' and len(lines) == 51
  confusion = json.load(open(os.path.join(out, 'confusion_matrix.json')))
  assert np.sum(confusion['matrix']) == 50 and len(confusion['labels']) == 4
  pngs = sorted(f for f in os.listdir(out) if f.endswith('.png'))
  assert pngs == ['attention_0000.png', 'attention_0001.png', 'confusion_matrix.png']
  for png in pngs:
    with open(os.path.join(out, png), 'rb') as f:
      assert f.read(8) == b'\x89PNG\r\n\x1a\n'
  page = open(os.path.join(out, 'attention_0001.html')).read()
  assert page.startswith('<!doctype html>') and 'rgba(214,39,40,' in page and '<script' not in page


@pytest.mark.parametrize('model', ['han', 'transformer_classifier'])
def test_sentence_layout_trains_and_predicts_word_weights(model, data_dir, tmp_path):
  """layout='sentence': one token sequence per text [B, T]; both models take it."""
  config = tiny_config('han', data_dir, tmp_path)
  config.model = models.default_config(model, **TINY[model])
  config.dataset.layout = 'sentence'
  task = tasks.build(config, str(tmp_path))
  batch = next(task.batches('validation', batch_size=8, shuffle=False, seed=0))
  assert batch['inputs'].ndim == 2
  state = build_state(config, task)
  _, metrics = jax.jit(functools.partial(train_step, loss_fn=task.loss))(
    state, batch, jax.random.key(0)
  )
  assert bool(metrics['finite'])
  predictions = task.predict(merge_model(state), batch, tasks.EvalOptions())
  weights = np.asarray(predictions['word_weights'])
  assert weights.shape == batch['inputs'].shape
  np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)  # attention pooling over words
  assert np.all(weights[batch['inputs'] == 0] == 0)


@pytest.mark.parametrize('kind', ['generated', 'tsv', 'tfds'])
@pytest.mark.parametrize('model', ['han', 'transformer_classifier'])
def test_each_model_trains_on_each_dataset_kind(model, kind, data_dir, tmp_path):
  """key_sentence_docs, a text<TAB>label file, and a TFDS dataset by name (mocked offline)."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

  config = tiny_config('classification_tsv' if kind == 'tsv' else 'han', data_dir, tmp_path)
  config.model = models.default_config(model, **TINY[model])
  if kind == 'tfds':
    config.dataset.update(name='imdb_reviews', builder_config='', key_sentences_key='')
    with tfds.testing.mock_data(num_examples=16):
      task = tasks.build(config, str(tmp_path))
      batch = next(task.batches('train', batch_size=8, shuffle=True, seed=0))
  else:
    task = tasks.build(config, str(tmp_path))
    batch = next(task.batches('train', batch_size=8, shuffle=True, seed=0))
  state = build_state(config, task)
  new_state, metrics = jax.jit(functools.partial(train_step, loss_fn=task.loss))(
    state, batch, jax.random.key(0)
  )
  assert bool(metrics['finite']) and int(metrics['examples']) == 8
  assert int(new_state.step) == 1
