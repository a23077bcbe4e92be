"""Finished runs read from their workdirs and grouped into settings, with their final metrics.

  runs = [load_run(path) for path in find_runs(['runs/study'])]
  fields, settings = group_settings(runs)

A run is a workdir written by train.py (config.json, metrics.jsonl). The config fields that differ
among the runs, the replicate fields aside (`REPLICATES`: the seed, and the cross-validation fold
`dataset.fold`), define a run's setting; runs of one setting are its seeds (or folds). It only
reads files: no model is built. The comparison (compare.py) and the figure against one field
(compare_against.py) both draw on it, and on the words their figures use (reports/figure_words.py).
"""

import dataclasses
import json
import os
import statistics
from typing import NamedTuple

from reports.figure_words import MISSING, legend, natural_key
from training import layout
from training.config import read_config
from training.config_fields import flatten

_NOT_METRICS = ('step', 'split')
# Fields whose runs repeat one setting: the table aggregates over them instead of splitting on them.
REPLICATES = ('seed', 'dataset.fold')


@dataclasses.dataclass(frozen=True)
class Run:
  """One training workdir: its flattened config and its metrics lines.

  Attributes:
    name: the workdir's directory name.
    config: config.json flattened to dotted keys ('model.score').
    lines: split -> that split's metrics lines sorted by step, one per step (the last written).
  """

  name: str
  config: dict
  lines: dict

  @property
  def eval_split(self) -> str:
    return self.config.get('dataset.eval_split', 'validation')

  def split_lines(self, split: str) -> list[dict]:
    return self.lines.get(split, [])


@dataclasses.dataclass(frozen=True)
class Setting:
  """Runs whose configs agree on every differing field: the seeds of one setting."""

  label: str
  values: dict  # differing field -> this setting's value (or MISSING)
  runs: list


class Stat(NamedTuple):
  """A value over a setting's seeds: the mean, the sample std (None for one value), the count."""

  mean: float
  std: float | None
  n: int


def find_runs(paths: list[str]) -> list[str]:
  """Workdirs among `paths`: each path is a run (has metrics.jsonl) or a folder of runs.

  Raises:
    FileNotFoundError: a path does not exist, or is neither a run nor a folder holding runs.
  """
  runs = []
  for path in paths:
    if not os.path.exists(path):
      raise FileNotFoundError(f'{path} does not exist.')
    if os.path.isfile(os.path.join(path, layout.METRICS_FILE)):
      runs.append(path)
      continue
    children = sorted(os.listdir(path)) if os.path.isdir(path) else []
    found = [
      os.path.join(path, child)
      for child in children
      if os.path.isfile(os.path.join(path, child, layout.METRICS_FILE))
    ]
    if not found:
      raise FileNotFoundError(
        f'{path} is neither a training workdir (no metrics.jsonl) nor a folder of them.'
      )
    runs.extend(found)
  return list(dict.fromkeys(os.path.normpath(run) for run in runs))  # A run given twice: once.


def parse_metrics(text: str, source: str = layout.METRICS_FILE) -> dict:
  """metrics.jsonl text -> split -> lines sorted by step; of repeated steps (a resume) the last.

  Raises:
    ValueError: a line is not a JSON object with a step and a split.
  """
  by_split = {}
  for number, line in enumerate(text.splitlines(), start=1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
      by_split.setdefault(record['split'], {})[record['step']] = record
    except (ValueError, TypeError, KeyError) as error:
      raise ValueError(
        f'{source} line {number} is not a JSON object with a step and a split ({error!r}).'
      ) from error
  return {split: [steps[step] for step in sorted(steps)] for split, steps in by_split.items()}


def load_run(path: str, from_eval: bool = False) -> Run:
  """Reads a workdir's config.json and metrics.jsonl; `from_eval`: its final evaluation is
  eval.py's instead (eval/metrics.json, with the config evaluated, eval/config.json). Fields
  added to the config since the run was written take their defaults (`training.config.read_config`).

  Raises:
    FileNotFoundError: the workdir has no config.json, or no eval/metrics.json with `from_eval`.
  """
  if not os.path.isfile(os.path.join(path, layout.CONFIG_FILE)):
    raise FileNotFoundError(
      f'{path} has {layout.METRICS_FILE} but no {layout.CONFIG_FILE}, so its setting is unknown.'
    )
  metrics_path = os.path.join(path, layout.METRICS_FILE)
  with open(metrics_path, encoding='utf-8') as f:
    lines = parse_metrics(f.read(), metrics_path)
  evaluated = ''
  if from_eval:
    evaluation = layout.eval_file(path, layout.EVAL_METRICS_FILE)
    if not os.path.isfile(evaluation):
      raise FileNotFoundError(
        f'{path} has no {layout.EVAL_DIR}/{layout.EVAL_METRICS_FILE}; run python eval.py '
        f'--workdir={path} first, or compare without --eval.'
      )
    with open(evaluation, encoding='utf-8') as f:
      record = json.load(f)
    if os.path.isfile(layout.eval_file(path, layout.CONFIG_FILE)):
      evaluated = layout.EVAL_DIR
  config = flatten(read_config(path, evaluated).to_dict())
  if from_eval:
    numbers = {
      key: value
      for key, value in record.items()
      if isinstance(value, (int, float)) and not isinstance(value, bool)
    }
    split = config.get('dataset.eval_split', 'validation')
    lines[split] = [{**numbers, 'step': record.get('step', 0), 'split': split}]
  return Run(os.path.basename(os.path.normpath(path)), config, lines)


def setting_fields(configs: list[dict]) -> list[str]:
  """The sorted dotted keys whose values differ among the flattened `configs`, except the
  `REPLICATES`."""
  keys = sorted(set().union(*configs) - set(REPLICATES))
  return [
    key
    for key in keys
    if len({json.dumps(config.get(key, MISSING), default=repr) for config in configs}) > 1
  ]


def config_keys(settings: list[Setting]) -> set:
  """Every config key of the settings' runs (what `short_names` keeps names unambiguous among)."""
  return set().union(*(run.config for setting in settings for run in setting.runs))


def group_settings(runs: list[Run]) -> tuple[list[str], list[Setting]]:
  """(differing fields, settings in natural order of their values); a setting holds its seeds.

  A setting's label is its `legend` label ('positions=alibi'), or its first run's directory name
  where no field differs.
  """
  fields = setting_fields([run.config for run in runs])
  groups = {}
  for run in runs:
    values = tuple(run.config.get(field, MISSING) for field in fields)
    groups.setdefault(json.dumps(values, default=repr), (values, []))[1].append(run)
  keys = set().union(*(run.config for run in runs))
  _, labels = legend([dict(zip(fields, values)) for values, _ in groups.values()], keys)
  settings = []
  for (values, members), label in zip(groups.values(), labels):
    settings.append(Setting(label or members[0].name, dict(zip(fields, values)), members))
  settings.sort(key=lambda setting: [natural_key(value) for value in setting.values.values()])
  return fields, settings


def select_metrics(runs: list[Run], metrics: list[str] | None = None) -> list[str]:
  """`metrics`, checked; by default every metric in the final eval line of every evaluated run.

  Raises:
    ValueError: a requested metric is in no run's final eval line.
  """
  finals = [
    [key for key in run.split_lines(run.eval_split)[-1] if key not in _NOT_METRICS]
    for run in runs
    if run.split_lines(run.eval_split)
  ]
  available = list(dict.fromkeys(key for final in finals for key in final))
  if metrics is None:
    return [key for key in available if all(key in final for final in finals)]
  for metric in metrics:
    if metric not in available:
      raise ValueError(
        f"No run has the metric '{metric}' in its final evaluation; available: "
        f'{", ".join(available) or "none"}.'
      )
  return list(metrics)


def train_time_s(train_lines: list[dict]) -> float | None:
  """Seconds of training: each logged interval's steps over its steps_per_s (None if not logged)."""
  total, previous, timed = 0.0, 0, False
  for line in train_lines:
    if line.get('steps_per_s'):
      total += (line['step'] - previous) / line['steps_per_s']
      timed = True
    previous = line['step']
  return total if timed else None


def ms_per_step(train_lines: list[dict]) -> float | None:
  """Median milliseconds per step; the first interval is left out (it includes compilation)."""
  times = [1000 / line['steps_per_s'] for line in train_lines if line.get('steps_per_s')]
  return statistics.median(times[1:] if len(times) > 1 else times) if times else None


def summarize_run(run: Run, metrics: list[str]) -> dict:
  """One run's table values: final metrics, METRIC@init, grad_norm@init, time, parameters.

  Values a run lacks (no eval at step 0, no 'model' line, ...) are left out of the dict.
  """
  summary = {}
  evals = run.split_lines(run.eval_split)
  final = evals[-1] if evals else {}
  summary.update({metric: final[metric] for metric in metrics if metric in final})
  initial = evals[0] if evals and evals[0]['step'] == 0 else {}
  summary.update({f'{metric}@init': initial[metric] for metric in metrics if metric in initial})
  train = run.split_lines('train')
  if train and train[0]['step'] == 1 and 'grad_norm' in train[0]:
    summary['grad_norm@init'] = train[0]['grad_norm']  # Step 1's gradient is at the initial params.
  columns = {'train time (s)': train_time_s(train), 'ms/step': ms_per_step(train)}
  if run.split_lines('model'):
    columns['parameters'] = run.split_lines('model')[-1].get('parameters')
  summary.update({key: value for key, value in columns.items() if value is not None})
  return summary


def aggregate(summaries: list[dict]) -> dict:
  """Column -> Stat over the runs' summaries that have the column."""
  columns = dict.fromkeys(key for summary in summaries for key in summary)
  stats = {}
  for column in columns:
    values = [summary[column] for summary in summaries if column in summary]
    std = statistics.stdev(values) if len(values) > 1 else None
    stats[column] = Stat(statistics.mean(values), std, len(values))
  return stats
