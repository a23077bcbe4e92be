"""Sweeps: every combination of some config overrides, one train.py run per combination.

A sweep is the cartesian product of `--sweep=FIELD=v1,v2,...` specs, and of the list a config
file's `get_sweep(arg)` returns (big_vision's `get_hyper` style: a list of {field: value} dicts).
Each run trains in its own sub-workdir of the study folder, named by its overrides
(`model.score=dot,seed=0`), through `python train.py` (a process per run, its log in the
sub-workdir's `train.log`). Runs are resumable: a run whose final checkpoint exists is skipped, an
interrupted one resumes from its newest checkpoint (train.py does that).

Everything is checked before the first run starts: the spec syntax, that every field exists, that
every value parses as the field's type, and each run's training fields (`training.config.validate`).
"""

import ast
import dataclasses
import itertools
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Sequence

from absl import flags, logging
import ml_collections
from ml_collections.config_flags import config_path, tuple_parser

import tasks
from training import layout
from training.config import validate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN_PY = os.path.join(ROOT, 'train.py')

# The parsers train.py's --config.FIELD=value flags use, so a value means the same in both.
_PARSERS = {
  bool: flags.BooleanParser(),
  int: flags.IntegerParser(),
  float: flags.FloatParser(),
  tuple: tuple_parser.TupleParser(),
  str: flags.ArgumentParser(),
}
_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Run:
  """One combination of a sweep: its sub-workdir name and its {dotted field: value} overrides."""

  name: str
  overrides: dict[str, Any]


def parse_spec(spec: str) -> tuple[str, list[str]]:
  """'model.score=dot,scaled_dot' -> ('model.score', ['dot', 'scaled_dot'])."""
  field, sep, values = spec.partition('=')
  items = [v.strip() for v in values.split(',')]
  if not sep or not field.strip() or not all(items):
    raise ValueError(
      f'--sweep={spec!r} is not FIELD=VALUE,VALUE,... (e.g. --sweep=model.score=dot,scaled_dot).'
    )
  return field.strip(), items


def parse_value(config: ml_collections.ConfigDict, field: str, value: Any) -> Any:
  """`value` (a string from the command line, or a Python value) as the type of config.`field`."""
  try:
    current = config_path.get_value(field, config)
  except (AttributeError, KeyError, IndexError, TypeError):
    current = _MISSING
  if current is _MISSING or isinstance(current, ml_collections.ConfigDict):
    raise ValueError(
      f'--sweep field {field!r} is not a config field (fields look like seed or model.num_heads).'
    )
  if not isinstance(value, str):
    return value
  if current is None:  # a field without a type yet: a Python literal, else the string
    try:
      return ast.literal_eval(value)
    except (ValueError, SyntaxError):
      return value
  try:
    return _PARSERS[type(current)].parse(value)
  except (ValueError, KeyError) as error:
    raise ValueError(
      f'--sweep value {value!r} for {field} is not a {type(current).__name__} '
      f'like its default {current!r}.'
    ) from error


def expand(
  config: ml_collections.ConfigDict,
  specs: Sequence[str] = (),
  config_sweep: Sequence[dict[str, Any]] | None = None,
) -> list[Run]:
  """The runs of a sweep: `config_sweep` (or one empty combination) × the product of `specs`.

  Args:
    config: the base config (its fields and their types define what may be swept).
    specs: `--sweep` strings, 'FIELD=v1,v2,...'.
    config_sweep: the config file's `get_sweep()` list, if any.

  Returns:
    One `Run` per combination, in order: the first spec varies slowest.

  Raises:
    ValueError: bad syntax, an unknown field, a value of the wrong type, nothing to sweep, two
      runs with the same name, or a run whose config `training.config.validate` rejects.
  """
  if not specs and not config_sweep:
    raise ValueError(
      'Nothing to sweep: give --sweep=FIELD=v1,v2,... or define get_sweep() in the config file.'
    )
  axes = []
  for spec in specs:
    field, values = parse_spec(spec)
    axes.append([(field, parse_value(config, field, v)) for v in values])
  runs = []
  for base in config_sweep or [{}]:
    base = {field: parse_value(config, field, value) for field, value in base.items()}
    for combination in itertools.product(*axes):
      overrides = {**base, **dict(combination)}
      runs.append(Run(run_name(overrides), overrides))
  names = [run.name for run in runs]
  duplicate = next((name for name in names if names.count(name) > 1), None)
  if duplicate is not None:
    raise ValueError(f'The sweep has the run {duplicate!r} twice; every combination must differ.')
  for run in runs:
    try:
      validate(apply(config, run.overrides))
    except ValueError as error:
      raise ValueError(f'Run {run.name}: {error}') from error
  return runs


def run_name(overrides: dict[str, Any]) -> str:
  """The sub-workdir name: 'field=value' joined by commas, in the order given ('base' if none)."""
  if not overrides:
    return 'base'
  return ','.join(f'{field}={_text(value)}' for field, value in overrides.items()).replace('/', '_')


def apply(
  config: ml_collections.ConfigDict, overrides: dict[str, Any]
) -> ml_collections.ConfigDict:
  """A copy of `config` with the dotted-field `overrides` set."""
  config = ml_collections.ConfigDict(config.to_dict())
  for field, value in overrides.items():
    config_path.set_value(field, config, value)
  return config


def prepare_data(config: ml_collections.ConfigDict, runs: Sequence[Run]) -> None:
  """Builds each distinct dataset of the runs once, before any run starts.

  Runs started side by side would otherwise all try to generate the same TFDS dataset and collide;
  this also reports a bad dataset field or a model that does not fit the task before any run.
  """
  prepared = set()
  for run in runs:
    run_config = apply(config, run.overrides)
    key = (run_config.task, run_config.model.name, run_config.dataset.to_json(sort_keys=True))
    if key not in prepared:
      prepared.add(key)
      with tempfile.TemporaryDirectory() as workdir:  # the vocabulary built here is thrown away
        tasks.build(run_config, workdir)


def is_finished(workdir: str, num_train_steps: int) -> bool:
  """True once the run saved its final checkpoint (Orbax renames a step's folder when complete)."""
  return layout.has_step(workdir, num_train_steps)


def train_command(config_file: str, overrides: dict[str, Any], workdir: str) -> list[str]:
  """The train.py command line of one run; `config_file` may carry ':arg'."""
  return [
    sys.executable,
    TRAIN_PY,
    f'--config={config_file}',
    *(f'--config.{field}={_text(value)}' for field, value in overrides.items()),
    f'--workdir={workdir}',
  ]


def _text(value: Any) -> str:
  """A value as train.py's --config flags parse it back (tuples as '(a, b)')."""
  return repr(value) if isinstance(value, tuple) else str(value)


def run_sweep(
  config: ml_collections.ConfigDict,
  config_file: str,
  runs: Sequence[Run],
  study_dir: str,
  *,
  base_overrides: dict[str, Any] | None = None,
  parallel: int = 1,
) -> list[str]:
  """Trains every unfinished run, `parallel` at a time; returns the names of runs that failed.

  Args:
    config: the base config (with `base_overrides` applied), to know each run's length.
    config_file: the config file as given to train.py, with its ':arg' if any.
    runs: from `expand`.
    study_dir: the sub-workdirs go here.
    base_overrides: --config.FIELD=value overrides every run gets.
    parallel: how many runs train at once.
  """
  base_overrides = base_overrides or {}
  queue, active, failed = list(enumerate(runs, 1)), [], []
  while queue or active:
    while queue and len(active) < parallel:
      index, run = queue.pop(0)
      workdir = os.path.join(study_dir, run.name)
      steps = apply(config, run.overrides).num_train_steps
      label = f'[{index}/{len(runs)}] {run.name}'
      if is_finished(workdir, steps):
        logging.info('%s: finished earlier, skipped.', label)
        continue
      os.makedirs(workdir, exist_ok=True)
      command = train_command(config_file, {**base_overrides, **run.overrides}, workdir)
      log = open(os.path.join(workdir, layout.LOG_FILE), 'a', encoding='utf-8')
      log.write(' '.join(command) + '\n')
      log.flush()
      logging.info('%s: training (log: %s).', label, log.name)
      process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
      active.append((label, process, log, time.perf_counter()))
    time.sleep(0.2)
    for entry in [e for e in active if e[1].poll() is not None]:
      active.remove(entry)
      label, process, log, start = entry
      log.close()
      minutes, seconds = divmod(int(time.perf_counter() - start), 60)
      if process.returncode:
        failed.append(label)
        logging.error(
          '%s: failed (exit %d) after %dm%02ds; the end of %s:\n%s',
          label,
          process.returncode,
          minutes,
          seconds,
          log.name,
          _tail(log.name),
        )
      else:
        logging.info('%s: done in %dm%02ds.', label, minutes, seconds)
  return failed


def _tail(path: str, lines: int = 8) -> str:
  with open(path, encoding='utf-8', errors='replace') as f:
    return ''.join(f.readlines()[-lines:])
