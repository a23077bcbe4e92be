"""config.profile_steps: a jax.profiler trace of the chosen train steps lands in WORKDIR/profile/,
and a bad range is refused before anything is written."""

import glob
import gzip
import json
import os

from jax.profiler import ProfileData
import pytest
from test_training import get_config, tiny

from reports import run_eval
import training
from training import layout, profiling


def test_a_step_range_is_parsed_and_a_bad_one_refused():
  assert profiling.parse_steps('') is None
  assert profiling.parse_steps('10:13') == (10, 13)
  assert profiling.parse_steps(' 0 : 1 ') == (0, 1)
  for bad in ('13:10', '3:3', '5', '-1:2', 'a:b', '1:2:3'):
    with pytest.raises(ValueError, match=r"config.profile_steps=.* must be '' \(off\) or a step"):
      profiling.parse_steps(bad)


def test_a_bad_range_is_refused_before_the_workdir_is_written(tfds_dir, tmp_path):
  config = tiny(get_config('default'), tfds_dir, profile_steps='3:1')
  with pytest.raises(ValueError, match='config.profile_steps'):
    training.train_and_evaluate(config, str(tmp_path / 'run'))
  assert not (tmp_path / 'run').exists()


def test_the_chosen_steps_are_traced_into_the_workdir(tfds_dir, tmp_path):
  """Steps 2 and 3 of 4: the trace holds two calls of the train step (each recorded twice,
  nested: its Python call and its dispatch) and the XLA ops of two runs of it (not of step 1,
  still running when the loop reaches step 2), and none of the evaluation after the last."""
  config = tiny(get_config('default'), tfds_dir, profile_steps='2:4')
  training.train_and_evaluate(config, str(tmp_path))
  profile = os.path.join(str(tmp_path), layout.PROFILE_DIR, 'plugins', 'profile')
  [xplane] = glob.glob(os.path.join(profile, '*', '*.xplane.pb'))
  runs = {
    dict(event.stats).get('run_id')
    for line in ProfileData.from_file(xplane).find_plane_with_name('/host:CPU').lines
    for event in line.events
    if dict(event.stats).get('hlo_module') == 'jit_train_step'
  }
  assert len(runs) == 2
  [chrome] = glob.glob(os.path.join(profile, '*', '*.trace.json.gz'))
  with gzip.open(chrome, 'rt') as f:
    events = json.load(f)['traceEvents']
  assert not any('eval_step' in event.get('name', '') for event in events)
  spans = sorted(
    (e['ts'], e['ts'] + e['dur']) for e in events if e.get('name') == 'PjitFunction(train_step)'
  )
  calls, end = 0, float('-inf')
  for start, stop in spans:
    calls, end = calls + (start >= end), max(end, stop)
  assert calls == 2


def test_eval_profile_traces_the_evaluation_into_its_folder(tfds_dir, tmp_path):
  """eval.py --profile: the evaluation's trace in eval/profile/, with the eval step's ops."""
  training.train_and_evaluate(tiny(get_config('default'), tfds_dir), str(tmp_path))
  assert not os.path.exists(layout.profile_dir(str(tmp_path)))  # no train steps chosen
  run_eval.evaluate(run_eval.Request(str(tmp_path), profile=True, max_examples=2, num_heatmaps=0))
  traces = os.path.join(layout.profile_dir(str(tmp_path / layout.EVAL_DIR)), 'plugins', 'profile')
  [xplane] = glob.glob(os.path.join(traces, '*', '*.xplane.pb'))
  modules = {
    dict(event.stats).get('hlo_module')
    for line in ProfileData.from_file(xplane).find_plane_with_name('/host:CPU').lines
    for event in line.events
  }
  assert 'jit_eval_step' in modules and 'jit_train_step' not in modules
