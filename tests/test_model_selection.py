"""Model selection: the best checkpoint by a validation metric, kept beside the newest ones,
evaluated by eval.py by default, kept across a kill -9 and resume; early stopping."""

import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from reports import run_eval
import training
from training.checkpoints import Checkpointer
from training.layout import BEST_DIR
from training.selection import Best, lower_is_better

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 40
TINY = {
  'model.num_layers': 1,
  'model.d_model': 16,
  'model.num_heads': 2,
  'model.d_ff': 32,
  'model.max_length': 64,
  'dataset.batch_size': 8,
  'dataset.eval_batch_size': 8,
  'dataset.max_input_length': 40,
  'dataset.max_target_length': 40,
  'dataset.bucket_step': 48,
  'num_train_steps': STEPS,
  'eval_every_steps': 10,
  'checkpoint_every_steps': 20,
  'log_every_steps': 1,
  'num_eval_decode': 0,
  'warmup_steps': 2,
  'learning_rate': 0.01,
  'selection_metric': 'loss',
}


def _flags(data_dir):
  """The tiny run's fields: a parallel corpus of 200 pairs, prepared in a second."""
  corpus = os.path.join(data_dir, 'pairs.txt')
  if not os.path.exists(corpus):
    with open(corpus, 'w', encoding='utf-8') as f:
      f.writelines(f'He is {n} years old.\tIl a {n} ans.\n' for n in range(200))
  return {**TINY, 'dataset.data_dir': str(data_dir), 'dataset.tsv_path': corpus}


def _config(data_dir, **overrides):
  from configs import tsv  # pylint: disable=import-outside-toplevel

  config = tsv.get_config()
  for key, value in {**_flags(data_dir), **overrides}.items():
    *parents, leaf = key.split('.')
    node = config
    for parent in parents:
      node = node[parent]
    node[leaf] = value
  return config


def _validation(workdir):
  lines = [json.loads(line) for line in open(os.path.join(workdir, 'metrics.jsonl'))]
  return [line for line in lines if line['split'] == 'validation']


@pytest.fixture(scope='module')
def data_dir(tfds_dir):
  return tfds_dir


@pytest.fixture(scope='module')
def straight(data_dir, tmp_path_factory) -> str:
  """A run of STEPS steps evaluated every 10, selecting on the validation loss."""
  workdir = str(tmp_path_factory.mktemp('straight'))
  training.train_and_evaluate(_config(data_dir), workdir)
  return workdir


def test_direction_comes_from_the_name():
  assert all(map(lower_is_better, ('loss', 'loss@512', 'bits_per_char', 'perplexity')))
  assert not any(map(lower_is_better, ('accuracy', 'macro_f1', 'exact_match', 'bleu')))
  best, improved = Best('accuracy').update(10, {'accuracy': 0.5})
  assert improved and (best.step, best.value) == (10, 0.5)
  best, improved = best.update(20, {'accuracy': 0.5})  # a tie is no improvement
  assert not improved and best.stale == 1 and best.exhausted(1) and not best.exhausted(0)
  with pytest.raises(ValueError, match="selection_metric='accuracy' is not a validation metric"):
    Best('accuracy').update(10, {'loss': 1.0})


def test_a_decoded_metric_needs_decoding_before_training_starts(data_dir, tmp_path):
  """configs/tsv.py selects on chrF, computed from decoded outputs: with no validation example
  decoded the run is refused before anything is written."""
  workdir = tmp_path / 'refused'
  with pytest.raises(
    ValueError,
    match=r"selection_metric='chrf' is computed from decoded.*"
    r'num_eval_decode > 0',
  ):
    training.train_and_evaluate(_config(data_dir, selection_metric='chrf'), str(workdir))
  assert not workdir.exists()


def test_best_is_the_lowest_validation_loss(straight):
  """The best step is the evaluation with the lowest loss; best/ holds it, checkpoints/ the
  newest; every validation line carries the best so far."""
  lines = _validation(straight)
  losses = [line['loss'] for line in lines]
  best = lines[int(np.argmin(losses))]
  assert lines[-1]['best_step'] == best['step'] and lines[-1]['best_loss'] == min(losses)
  running = np.minimum.accumulate(losses)
  assert [line['best_loss'] for line in lines] == list(running)
  assert Checkpointer(os.path.join(straight, BEST_DIR), max_to_keep=None).steps() == [
    int(best['step'])
  ]
  assert Checkpointer(os.path.join(straight, 'checkpoints'), max_to_keep=None).steps()[-1] == STEPS


def test_eval_reads_the_best_by_default(straight):
  """eval.py's default is the best checkpoint: its validation loss is the best one logged."""
  metrics = run_eval.evaluate(
    run_eval.Request(
      straight, split='validation', num_heatmaps=0, explorer_examples=0, max_examples=2
    )
  )
  assert (
    metrics['checkpoint'] == 'best' and metrics['step'] == _validation(straight)[-1]['best_step']
  )
  np.testing.assert_allclose(metrics['loss'], _validation(straight)[-1]['best_loss'], rtol=1e-5)
  latest = run_eval.evaluate(
    run_eval.Request(
      straight,
      checkpoint='latest',
      split='validation',
      num_heatmaps=0,
      explorer_examples=0,
      max_examples=2,
    )
  )
  assert (latest['checkpoint'], latest['step']) == ('latest', STEPS)
  with pytest.raises(ValueError, match="--checkpoint='top' must be 'best', 'latest' or a step"):
    run_eval.evaluate(run_eval.Request(straight, checkpoint='top'))


def test_eval_reads_a_best_without_regular_checkpoints(straight, tmp_path):
  """A run stopped before its first regular checkpoint may hold a best one only: eval.py reads
  it (and says there is nothing to read for --checkpoint=latest)."""
  workdir = str(tmp_path / 'copy')
  shutil.copytree(straight, workdir, ignore=shutil.ignore_patterns('checkpoints', 'eval'))
  metrics = run_eval.evaluate(
    run_eval.Request(
      workdir, split='validation', num_heatmaps=0, explorer_examples=0, max_examples=2
    )
  )
  assert metrics['checkpoint'] == 'best'
  assert metrics['step'] == _validation(straight)[-1]['best_step']
  with pytest.raises(FileNotFoundError, match='No checkpoint in'):
    run_eval.evaluate(run_eval.Request(workdir, checkpoint='latest'))


@pytest.mark.slow
def test_kill_9_and_resume_keeps_the_best(straight, data_dir, tmp_path):
  """Killed mid-run (after a best was saved, before the checkpoint recording it), then resumed:
  the same best step, value and parameters as the run that was never interrupted."""
  workdir = str(tmp_path / 'run')
  process = subprocess.Popen(
    [
      sys.executable,
      'train.py',
      '--config=configs/tsv.py',
      f'--workdir={workdir}',
      *[f'--config.{k}={v}' for k, v in _flags(data_dir).items()],
    ],
    cwd=ROOT,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
  )
  for line in process.stdout:
    if f'step 35/{STEPS}' in line:
      process.send_signal(signal.SIGKILL)
      break
  process.communicate(timeout=120)
  assert process.returncode == -signal.SIGKILL
  # Killed before the last checkpoint. On a fast GPU the asynchronous save of step 20 may not be
  # committed yet at step 35: then no checkpoint records best/30 either, and the resume forgets it
  # and trains again from step 0, the same property from another point.
  saved = Checkpointer(os.path.join(workdir, 'checkpoints'), max_to_keep=None).steps()
  assert all(step < STEPS for step in saved), saved
  training.train_and_evaluate(_config(data_dir), workdir)
  assert _validation(workdir)[-1]['best_step'] == _validation(straight)[-1]['best_step']
  assert _validation(workdir)[-1]['best_loss'] == _validation(straight)[-1]['best_loss']
  step = int(_validation(straight)[-1]['best_step'])
  arrays = [
    Checkpointer(os.path.join(w, BEST_DIR), max_to_keep=None).read_arrays(step)
    for w in (workdir, straight)
  ]
  for key in arrays[1]:
    np.testing.assert_array_equal(arrays[0][key], arrays[1][key])


def test_patience_stops_and_stays_stopped(data_dir, tmp_path):
  """Teacher-forced exact match stays 0 for a model this small: the first evaluation is the best,
  and with patience 2 the run stops two evaluations later; rerun, it does not train on."""
  config = _config(data_dir, selection_metric='teacher_forced_exact_match', patience=2)
  training.train_and_evaluate(config, str(tmp_path))
  lines = _validation(str(tmp_path))
  assert [line['teacher_forced_exact_match'] for line in lines] == [0.0, 0.0, 0.0]
  assert [line['step'] for line in lines] == [10, 20, 30]
  assert lines[-1]['best_step'] == 10
  assert Checkpointer(str(tmp_path / 'checkpoints'), max_to_keep=None).steps()[-1] == 30
  training.train_and_evaluate(config, str(tmp_path))
  assert len(_validation(str(tmp_path))) == 3
