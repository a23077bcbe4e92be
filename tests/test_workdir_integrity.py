"""Workdir integrity: a refused run changes nothing, one train.py per workdir, damaged newest
checkpoints are skipped, failures are one sentence, and eval metrics name their examples."""

import errno
import hashlib
import json
import logging as std_logging
import os
import shutil
import subprocess
import sys
import threading

from absl import flags
from absl import logging as absl_logging
from fine_tunes import matching_params, train
import ml_collections
from ml_collections import config_flags
import numpy as np
from PIL import Image
import pytest
from test_training import ROOT, _final_params, get_config, tiny
from workdir_faults import truncate_checkpoint

from data import language_sources
from data.readers import image_folder
from reports import run_eval
import tasks
from training import failures, layout, loop, metrics, run_phases
from training import workdir as workdir_lib
from training.checkpoints import Checkpointer, CheckpointMismatchError
from training.setup import build_state


def _snapshot(path) -> dict:
  """{relative path: sha256} of every file under `path` (folders as 'dir')."""
  found = {}
  for root, dirs, files in os.walk(path):
    for name in dirs:
      found[os.path.relpath(os.path.join(root, name), path)] = 'dir'
    for name in files:
      with open(os.path.join(root, name), 'rb') as f:
        found[os.path.relpath(os.path.join(root, name), path)] = hashlib.sha256(
          f.read()
        ).hexdigest()
  return found


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """A tiny translation Transformer trained 4 steps on 40 sentence pairs, checkpoints at steps 2
  and 4 (a small corpus of one's own: nothing to generate)."""
  data_dir = tmp_path_factory.mktemp('tfds')
  corpus = data_dir / 'pairs.txt'
  corpus.write_text(''.join(f'He is {n} years old.\tIl a {n} ans.\tCC-BY\n' for n in range(40)))
  config = tiny(get_config('tsv'), data_dir, checkpoint_every_steps=2)
  config.dataset.tsv_path = str(corpus)
  workdir = str(tmp_path_factory.mktemp('trained'))
  train(config, workdir)
  return workdir, config


def _copy(trained, tmp_path) -> str:
  copy = str(tmp_path / 'copy')
  shutil.copytree(trained[0], copy)
  return copy


def _changed(config, **fields):
  config = config.copy_and_resolve_references()
  for key, value in fields.items():
    target = config
    *parents, name = key.split('.')
    for parent in parents:
      target = target[parent]
    target[name] = value
  return config


def test_item1_a_refused_run_leaves_the_workdir_byte_for_byte(trained):
  workdir, config = trained
  before = _snapshot(workdir)
  with pytest.raises(ValueError, match="score must be one of .* got 'dott'"):
    train(_changed(config, **{'model.score': 'dott'}), workdir)
  with pytest.raises(CheckpointMismatchError, match='checkpoint at step 4 does not match'):
    train(_changed(config, **{'model.d_model': 32}), workdir)
  assert _snapshot(workdir) == before


def test_item1_an_accepted_change_keeps_the_previous_config(trained, tmp_path, caplog):
  workdir = _copy(trained, tmp_path)
  old = open(os.path.join(workdir, 'config.json'), encoding='utf-8').read()
  with caplog.at_level('INFO', logger='absl'):  # what train.py logs
    train(_changed(trained[1], num_train_steps=6), workdir)
  assert (
    open(os.path.join(workdir, 'config_history', 'config.4.json'), encoding='utf-8').read() == old
  )
  assert (
    json.load(open(os.path.join(workdir, 'config.json'), encoding='utf-8'))['num_train_steps'] == 6
  )
  log = open(os.path.join(workdir, layout.LOG_FILE), encoding='utf-8').read()
  resumed = log[log.index('Resumed from step 4') :]  # the fixture's own run may be logged above
  # Once for the 2 steps resumed, not once a step: the steps after the first are timed.
  assert resumed.count('Compiled the train step in') == 1


def test_item2_a_refused_init_from_leaves_no_vocabulary(trained, tmp_path):
  pretrained, config = trained
  tuned = _changed(config, init_from=pretrained, **{'model.d_ff': 64})
  with pytest.raises(CheckpointMismatchError, match='init_from=.*other shapes'):
    train(tuned, str(tmp_path / 'tuned'))
  assert not os.path.exists(tmp_path / 'tuned')


def test_item3_eval_and_init_from_skip_a_truncated_newest_checkpoint(trained, tmp_path, caplog):
  workdir = _copy(trained, tmp_path)
  truncate_checkpoint(workdir, 4)
  with caplog.at_level('WARNING'):
    metrics = run_eval.evaluate(
      run_eval.Request(
        workdir, checkpoint='latest', split='validation', max_examples=1, num_heatmaps=0
      )
    )
  assert metrics['step'] == 2
  skipped = [r.getMessage() for r in caplog.records if 'Skipping checkpoint 4' in r.getMessage()]
  assert len(skipped) == 1 and len(skipped[0].splitlines()) == 1
  config = trained[1]
  with caplog.at_level('INFO', logger='absl'):
    tuned = config.copy_and_resolve_references()
    tuned.init_from = workdir
    state, loaded, _ = matching_params(build_state(config, tasks.build(config, workdir)), tuned)
  assert loaded and int(state.step) == 0
  assert 'init_from' in caplog.text and '(step 2): loaded' in caplog.text
  # item 6: each metric names its examples
  assert metrics['population']['loss'] == 'all of validation'
  assert metrics['population']['exact_match'] == 'the first 1 examples of validation'


def test_item3_training_skips_a_truncated_checkpoint_and_resumes_bit_for_bit(
  trained, tmp_path, caplog
):
  """Resumed from step 2 (the truncated step 4 skipped), the tsv run (length buckets, the copy
  pointer, a shuffled epoch cut mid-way) ends on the very parameters of the straight run."""
  workdir = _copy(trained, tmp_path)
  truncate_checkpoint(workdir, 4)
  with caplog.at_level('INFO', logger='absl'):  # what train.py logs
    train(trained[1], workdir)
  assert 'Resumed from step 2' in caplog.text
  resumed_step, resumed = _final_params(workdir, trained[1])
  straight_step, straight = _final_params(trained[0], trained[1])
  assert resumed_step == straight_step == 4
  for a, b in zip(resumed, straight, strict=True):
    np.testing.assert_array_equal(a, b)


def test_item4_one_train_py_per_workdir(trained, tmp_path):
  workdir, config = trained
  before = _snapshot(workdir)
  holder = workdir_lib.Lock(workdir)
  holder.acquire()
  try:
    with pytest.raises(
      workdir_lib.WorkdirBusyError, match=f'in use by train.py \\(pid {os.getpid()}'
    ):
      train(config, workdir)
  finally:
    holder.release()
  assert _snapshot(workdir) == before
  # Eight contenders at once: exactly one gets the lock.
  race = str(tmp_path / 'race')
  os.makedirs(race)
  locks, won = [workdir_lib.Lock(race) for _ in range(8)], []

  def contend(lock):
    try:
      lock.acquire()
      won.append(lock)
    except workdir_lib.WorkdirBusyError:
      pass

  threads = [threading.Thread(target=contend, args=(lock,)) for lock in locks]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert len(won) == 1
  won[0].release()
  assert os.listdir(race) == []


def test_item4_a_stale_lock_is_taken_over_and_another_hosts_is_not(tmp_path, caplog):
  dead = subprocess.Popen(['true'])
  dead.wait()
  (tmp_path / workdir_lib.LOCK_FILE).write_text(
    json.dumps(dict(host=os.uname().nodename, pid=dead.pid))
  )
  lock = workdir_lib.Lock(str(tmp_path))
  with caplog.at_level('WARNING'):
    lock.acquire()
  assert f'from pid {dead.pid}, which is no longer running' in caplog.text
  lock.release()
  (tmp_path / workdir_lib.LOCK_FILE).write_text(json.dumps(dict(host='elsewhere', pid=1)))
  with pytest.raises(workdir_lib.WorkdirBusyError, match='on elsewhere.*If no run is left there'):
    workdir_lib.Lock(str(tmp_path)).acquire()


def _terminal(*args):
  result = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True)
  return result.returncode, result.stdout, result.stderr


def test_item5_command_line_mistakes_are_one_sentence_and_help_exits_0(tmp_path):
  workdir = str(tmp_path / 'run')
  status, _, stderr = _terminal('train.py', f'--workdir={workdir}', '--config.model.scroe=dot')
  assert status == 1 and 'Traceback' not in stderr
  assert stderr.strip().splitlines()[-1] == (
    "train.py: --config.model.scroe: config.model has no field 'scroe'; did you mean "
    'config.model.score?'
  )
  status, stdout, _ = _terminal('train.py', '--help')
  assert status == 0 and 'training/config.py' in stdout
  assert not os.path.exists(workdir)


@pytest.mark.parametrize(
  'arg, sentence',
  [
    ('--config=configs/nope.py', '--config=configs/nope.py: no such config file.'),
    (
      '--config=configs/memn2n_babi.py:qa99',
      "configs/memn2n_babi.py:qa99 is not a task; valid: ['qa1', 'qa2', 'qa16'].",
    ),
    ('--config.nosuch.x=1', "--config.nosuch.x: config has no field 'nosuch'."),
  ],
)
def test_item5_config_flag_mistakes_are_one_sentence(arg, sentence, monkeypatch, capsys):
  """As train.py defines and parses its flags (ml_collections reads sys.argv at definition)."""
  argv = ['train.py', arg]
  monkeypatch.setattr(sys, 'argv', argv)
  flag_values = flags.FlagValues()
  with pytest.raises(SystemExit) as exit_:
    with failures.flag_errors('train.py'):
      config_flags.DEFINE_config_file('config', 'configs/default.py', flag_values=flag_values)
    failures.parse_flags(argv, flag_values)
  assert exit_.value.code == f'train.py: {sentence}'


def test_item5_data_mistakes_name_the_file_and_field(tmp_path):
  png = tmp_path / 'a.png'
  Image.fromarray(np.random.default_rng(0).integers(0, 256, (16, 16, 3), np.uint8)).save(png)
  png.write_bytes(png.read_bytes()[:400])  # the header is whole, the pixels cut short
  with pytest.raises(ValueError, match=f"'{png}' cannot be decoded"):
    image_folder.read_image(png)
  binary = tmp_path / 'book.bin'
  binary.write_bytes(bytes(range(256)) * 4)
  config = ml_collections.FrozenConfigDict(dict(text_path=str(binary), held_out=0.1))
  with pytest.raises(ValueError, match=r"config.dataset.text_path='.*book.bin' is not UTF-8"):
    language_sources.split_text_file(config)


def _fake_train_step(monkeypatch, finite: bool):
  """A train step that only counts (no compilation): these tests are about the loop's reaction."""

  def step_fn(state, batch, rng):
    del batch, rng
    return state.replace(step=state.step + 1), dict(finite=np.bool_(finite))

  monkeypatch.setattr(loop, 'jit_train_step', lambda *args: step_fn)


def test_item5_non_finite_loss_names_the_newest_checkpoint_with_the_traceback_in_the_log(
  trained, tmp_path, monkeypatch
):
  workdir = _copy(trained, tmp_path)
  _fake_train_step(monkeypatch, finite=False)
  with pytest.raises(
    FloatingPointError,
    match='at step 5; .*the newest checkpoint is step 4; a rerun resumes from it',
  ):
    train(_changed(trained[1], num_train_steps=8, log_every_steps=1), workdir)
  log = open(os.path.join(workdir, layout.LOG_FILE), encoding='utf-8').read()
  assert 'Traceback' in log and 'FloatingPointError: Non-finite loss' in log


def test_item5_a_full_disk_is_one_sentence_and_keeps_the_checkpoints(
  trained, tmp_path, monkeypatch
):
  workdir = _copy(trained, tmp_path)
  _fake_train_step(monkeypatch, finite=True)

  def full(self, state, meta):
    raise OSError(errno.ENOSPC, 'No space left on device', 'checkpoints/5')

  monkeypatch.setattr(Checkpointer, 'save', full)
  with pytest.raises(
    workdir_lib.DiskFullError, match='is full .* at step 5; .*newest checkpoint is step 4'
  ):
    train(_changed(trained[1], num_train_steps=6, checkpoint_every_steps=1), workdir)
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints'))) == ['2', '4']


def test_item5_an_unexpected_error_after_acceptance_points_to_the_log(tmp_path, capsys):
  def body():
    with workdir_lib.run_log() as log:
      log.to_file(str(tmp_path / 'train.log'))
      raise KeyError('boom')

  with pytest.raises(
    SystemExit,
    match=r"train.py: stopped by an unexpected KeyError: 'boom' "
    r'\(the traceback is in .*train.log\)',
  ):
    failures.run('train.py', body)
  assert 'Traceback' in (tmp_path / 'train.log').read_text()


def test_item6_eval_flags_and_populations(trained, tmp_path):
  workdir, _ = trained
  for flag, message in [
    (dict(num_heatmaps=-1), '--num_heatmaps=-1 must be >= 0'),
    (dict(max_examples=-3), '--max_examples=-3 must be >= 0'),
    (dict(average_last=5), r'--average_last=5, but .* 2 checkpoint\(s\)'),
  ]:
    with pytest.raises(ValueError, match=message):
      run_eval.evaluate(run_eval.Request(workdir, **flag))
  empty = tmp_path / 'empty'
  empty.mkdir()
  (empty / 'config.json').write_text(open(os.path.join(workdir, 'config.json')).read())
  before = _snapshot(empty)
  with pytest.raises(FileNotFoundError, match='No checkpoint in'):
    run_eval.evaluate(run_eval.Request(str(empty)))
  assert _snapshot(empty) == before


def test_item6_a_batch_larger_than_the_split_warns(caplog):
  config = get_config('default')
  with caplog.at_level('WARNING'):
    run_phases._warn_if_batch_exceeds_split(config, dict(index=np.array([0, 1, 2, 0, 1, 2])))
  assert 'larger than the 3 example(s) of the train split' in caplog.text


def test_item5_library_tracebacks_stay_off_the_terminal_and_go_to_the_log(tmp_path):
  try:
    raise ValueError('RESOURCE_EXHAUSTED: no space left on device')
  except ValueError:
    record = std_logging.LogRecord(
      'absl', std_logging.ERROR, '/x/orbax/future.py', 1, 'Save failed.', None, sys.exc_info()
    )
  terminal = metrics._WithoutTraceback(absl_logging.PythonFormatter()).format(record)
  assert 'Save failed.' in terminal and 'Traceback' not in terminal
  assert record.exc_info is not None  # the log file's handler still formats it
  with workdir_lib.run_log() as log:
    log.to_file(str(tmp_path / 'train.log'))
    sys.excepthook(*record.exc_info)  # what a library's thread prints (PyErr_Print)
  assert 'RESOURCE_EXHAUSTED' in (tmp_path / 'train.log').read_text()
  assert sys.excepthook is sys.__excepthook__
