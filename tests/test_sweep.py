"""Sweeps: spec parsing, expansion (product, names, types, errors), resumable runs of train.py."""

import importlib
import os
import shutil
import subprocess
import sys

import pytest
from test_training import TRAIN_SPLIT

from configs import default
from training import sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Every run of the end-to-end sweep: a tiny model, two steps, checkpoints at both.
TINY = {
  'model.num_layers': 1,
  'model.d_model': 16,
  'model.num_heads': 2,
  'model.d_ff': 16,
  'dataset.batch_size': 8,
  'dataset.eval_batch_size': 8,
  'dataset.bucket_step': 48,
  'dataset.max_input_length': 40,
  'dataset.max_target_length': 40,
  'dataset.train_split': TRAIN_SPLIT,  # enough for 2 steps
  'num_train_steps': 2,
  'checkpoint_every_steps': 1,
  'log_every_steps': 1,
  'num_eval_decode': 0,
}


def test_parse_spec():
  assert sweep.parse_spec('model.score=dot, scaled_dot') == ('model.score', ['dot', 'scaled_dot'])
  for bad in ('model.score', 'model.score=', '=dot', 'seed=0,,1'):
    with pytest.raises(ValueError, match='is not FIELD=VALUE,VALUE'):
      sweep.parse_spec(bad)


def test_expand_is_the_product_in_order_with_typed_values_and_names():
  runs = sweep.expand(
    default.get_config(),
    ['model.score=dot,cosine', 'seed=0,1', 'learning_rate=1e-3', 'model.tie_output=false'],
  )
  assert [run.name for run in runs] == [
    'model.score=dot,seed=0,learning_rate=0.001,model.tie_output=False',
    'model.score=dot,seed=1,learning_rate=0.001,model.tie_output=False',
    'model.score=cosine,seed=0,learning_rate=0.001,model.tie_output=False',
    'model.score=cosine,seed=1,learning_rate=0.001,model.tie_output=False',
  ]
  assert runs[1].overrides == {
    'model.score': 'dot',
    'seed': 1,
    'learning_rate': 1e-3,
    'model.tie_output': False,
  }
  assert type(runs[1].overrides['seed']) is int
  assert type(runs[1].overrides['learning_rate']) is float


def test_a_config_sweep_list_times_the_flags():
  config_sweep = [
    {'model.norm': 'post', 'warmup_steps': 0},
    {'model.norm': 'pre', 'warmup_steps': 100},
  ]
  runs = sweep.expand(default.get_config(), ['seed=3,4'], config_sweep)
  assert [run.name for run in runs] == [
    'model.norm=post,warmup_steps=0,seed=3',
    'model.norm=post,warmup_steps=0,seed=4',
    'model.norm=pre,warmup_steps=100,seed=3',
    'model.norm=pre,warmup_steps=100,seed=4',
  ]
  # An untyped (None) field takes a Python literal, else the string.
  [run] = sweep.expand(default.get_config(), ['model.d_k=16'])
  assert run.overrides == {'model.d_k': 16}


@pytest.mark.parametrize(
  'specs, config_sweep, match',
  [
    ([], None, 'Nothing to sweep'),
    (['model.scor=dot'], None, "'model.scor' is not a config field"),
    (['model=dot'], None, "'model' is not a config field"),
    (['seed=zero'], None, "'zero' for seed is not a int"),
    (['seed=0,0'], None, "has the run 'seed=0' twice"),
    (['num_train_steps=10,0'], None, 'Run num_train_steps=0: config.num_train_steps=0 must be'),
    ([], [{'model.nope': 1}], "'model.nope' is not a config field"),
  ],
)
def test_bad_sweeps_raise_one_sentence(specs, config_sweep, match):
  with pytest.raises(ValueError, match=match):
    sweep.expand(default.get_config(), specs, config_sweep)


def test_train_command_passes_every_override():
  command = sweep.train_command(
    'configs/transformer.py:pre', {'seed': 1, 'temperatures': (0.0, 1.0)}, 'runs/x/seed=1'
  )
  assert command[1:] == [
    os.path.join(ROOT, 'train.py'),
    '--config=configs/transformer.py:pre',
    '--config.seed=1',
    '--config.temperatures=(0.0, 1.0)',
    '--workdir=runs/x/seed=1',
  ]


@pytest.mark.slow
def test_sweep_trains_runs_side_by_side_reports_failures_resumes_and_skips_finished(
  tmp_path, tfds_dir
):
  base = {**TINY, 'dataset.data_dir': str(tfds_dir)}
  config = sweep.apply(default.get_config(), base)
  [run] = sweep.expand(config, ['seed=0'])
  sweep.prepare_data(config, [run])
  # Beside it, a run that fails (its corpus does not exist) is reported with its log.
  bad = sweep.Run('bad', {'dataset.name': 'tsv_parallel', 'dataset.tsv_path': '/missing.tsv'})
  study = str(tmp_path / 'study')
  failed = sweep.run_sweep(
    config, 'configs/default.py', [run, bad], study, base_overrides=base, parallel=2
  )
  assert failed == ['[2/2] bad']
  assert 'train.py:' in open(os.path.join(study, 'bad', 'train.log')).read()
  workdir = os.path.join(study, run.name)
  assert sweep.is_finished(workdir, 2)
  # Interrupted after its first step: the final checkpoint is gone, step 1's is left.
  shutil.rmtree(os.path.join(workdir, 'checkpoints', '2'))
  assert sweep.run_sweep(config, 'configs/default.py', [run], study, base_overrides=base) == []
  log = open(os.path.join(workdir, 'train.log')).read()
  assert 'Resumed from step 1' in log and sweep.is_finished(workdir, 2)
  # Finished: the same sweep again starts no process.
  assert sweep.run_sweep(config, 'configs/default.py', [run], study, base_overrides=base) == []
  assert open(os.path.join(workdir, 'train.log')).read() == log


def test_sweep_py_refuses_a_bad_field_before_anything_runs(tmp_path):
  result = subprocess.run(
    [
      sys.executable,
      'sweep.py',
      '--config=configs/default.py',
      f'--workdir={tmp_path}/study',
      '--sweep=model.heads=2,4',
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert result.returncode != 0
  assert "sweep.py: --sweep field 'model.heads' is not a config field" in result.stderr
  assert not os.path.exists(tmp_path / 'study')


@pytest.mark.parametrize(
  'study, count',
  [
    ('study_scaling', 10),
    ('study_warmup', 8),
    ('study_scores', 5),
    ('study_positions', 2),
    ('study_length', 6),
    ('study_recall', 24),
    ('study_gqa', 3),
    ('study_sinks', 3),
  ],
)
def test_every_study_config_expands_into_valid_runs(study, count):
  module = importlib.import_module(f'configs.{study}')
  runs = sweep.expand(module.get_config(), [], module.get_sweep())
  assert len(runs) == count and all(run.overrides for run in runs)
