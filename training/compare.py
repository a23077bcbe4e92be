"""Compares training workdirs: a table of final metrics per setting (mean ± std over seeds), curves.

  markdown = compare.write_report(['runs/study'], out_dir='runs/study')

A run is a workdir written by train.py (config.json, metrics.jsonl). The config fields that differ
among the runs, the replicate fields aside (`REPLICATES`: the seed, and the cross-validation fold
`dataset.fold`), define a run's setting; runs of one setting are its seeds (or folds), and the
table gives their mean ± std. It only reads files: no jax, no model is built.
"""

import dataclasses
import io
import json
import math
import os
import re
import statistics
from typing import NamedTuple

import matplotlib

matplotlib.use('Agg')  # files only; never needs a display
from matplotlib.lines import Line2D  # pylint: disable=g-import-not-at-top
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

_MISSING = object()  # A config field that one run has and another lacks.
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
  values: dict  # differing field -> this setting's value (or _MISSING)
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
    if os.path.isfile(os.path.join(path, 'metrics.jsonl')):
      runs.append(path)
      continue
    children = sorted(os.listdir(path)) if os.path.isdir(path) else []
    found = [os.path.join(path, child) for child in children
             if os.path.isfile(os.path.join(path, child, 'metrics.jsonl'))]
    if not found:
      raise FileNotFoundError(f'{path} is neither a training workdir (no metrics.jsonl) nor a '
                              'folder of them.')
    runs.extend(found)
  return list(dict.fromkeys(os.path.normpath(run) for run in runs))  # A run given twice: once.


def flatten(config: dict, prefix: str = '') -> dict:
  """{'model': {'score': 'dot'}} -> {'model.score': 'dot'}."""
  flat = {}
  for key, value in config.items():
    if isinstance(value, dict):
      flat.update(flatten(value, f'{prefix}{key}.'))
    else:
      flat[f'{prefix}{key}'] = value
  return flat


def parse_metrics(text: str, source: str = 'metrics.jsonl') -> dict:
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
      raise ValueError(f'{source} line {number} is not a JSON object with a step and a split '
                       f'({error!r}).') from error
  return {split: [steps[step] for step in sorted(steps)] for split, steps in by_split.items()}


def load_run(path: str, from_eval: bool = False) -> Run:
  """Reads a workdir's config.json and metrics.jsonl; `from_eval`: its final evaluation is
  eval.py's instead (eval/metrics.json, with the config evaluated, eval/config.json).

  Raises:
    FileNotFoundError: the workdir has no config.json, or no eval/metrics.json with `from_eval`.
  """
  config_path = os.path.join(path, 'config.json')
  if not os.path.isfile(config_path):
    raise FileNotFoundError(f'{path} has metrics.jsonl but no config.json, so its setting is '
                            'unknown.')
  metrics_path = os.path.join(path, 'metrics.jsonl')
  with open(metrics_path, encoding='utf-8') as f:
    lines = parse_metrics(f.read(), metrics_path)
  if from_eval:
    evaluated = os.path.join(path, 'eval', 'metrics.json')
    if not os.path.isfile(evaluated):
      raise FileNotFoundError(f'{path} has no eval/metrics.json; run python eval.py '
                              f'--workdir={path} first, or compare without --eval.')
    with open(evaluated, encoding='utf-8') as f:
      record = json.load(f)
    if os.path.isfile(os.path.join(path, 'eval', 'config.json')):
      config_path = os.path.join(path, 'eval', 'config.json')
  with open(config_path, encoding='utf-8') as f:
    config = flatten(json.load(f))
  if from_eval:
    numbers = {key: value for key, value in record.items()
               if isinstance(value, (int, float)) and not isinstance(value, bool)}
    split = config.get('dataset.eval_split', 'validation')
    lines[split] = [{**numbers, 'step': record.get('step', 0), 'split': split}]
  return Run(os.path.basename(os.path.normpath(path)), config, lines)


def setting_fields(configs: list[dict]) -> list[str]:
  """The sorted dotted keys whose values differ among the flattened `configs`, except the
  `REPLICATES`."""
  keys = sorted(set().union(*configs) - set(REPLICATES))
  return [key for key in keys
          if len({json.dumps(config.get(key, _MISSING), default=repr) for config in configs}) > 1]


def format_value(value) -> str:
  """A config value as written in config.json ('dot', 16, true, [1, 2]); '—' when absent."""
  if value is _MISSING:
    return '—'
  return value if isinstance(value, str) else json.dumps(value)


def natural_key(value) -> tuple:
  """Numbers numerically, then strings with their digit runs as numbers, then anything else."""
  if isinstance(value, (int, float)):
    return (0, value)
  if isinstance(value, str):
    return (1, tuple(int(part) if i % 2 else part
                     for i, part in enumerate(re.split(r'(\d+)', value))))
  return (2, format_value(value))


def group_settings(runs: list[Run]) -> tuple[list[str], list[Setting]]:
  """(differing fields, settings in natural order of their values); a setting holds its seeds."""
  fields = setting_fields([run.config for run in runs])
  groups = {}
  for run in runs:
    values = tuple(run.config.get(field, _MISSING) for field in fields)
    groups.setdefault(json.dumps(values, default=repr), (values, []))[1].append(run)
  settings = []
  for values, members in groups.values():
    label = ', '.join(f'{field}={format_value(value)}' for field, value in zip(fields, values))
    settings.append(Setting(label or members[0].name, dict(zip(fields, values)), members))
  settings.sort(key=lambda setting: [natural_key(value) for value in setting.values.values()])
  return fields, settings


def select_metrics(runs: list[Run], metrics: list[str] | None = None) -> list[str]:
  """`metrics`, checked; by default every metric in the final eval line of every evaluated run.

  Raises:
    ValueError: a requested metric is in no run's final eval line.
  """
  finals = [[key for key in run.split_lines(run.eval_split)[-1] if key not in _NOT_METRICS]
            for run in runs if run.split_lines(run.eval_split)]
  available = list(dict.fromkeys(key for final in finals for key in final))
  if metrics is None:
    return [key for key in available if all(key in final for final in finals)]
  for metric in metrics:
    if metric not in available:
      raise ValueError(f"No run has the metric '{metric}' in its final evaluation; available: "
                       f"{', '.join(available) or 'none'}.")
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


def format_stat(stat: Stat | None, with_std: bool = True) -> str:
  """'0.9960 ± 0.0012': the mean to 4 significant digits, the std to the same decimals."""
  if stat is None:
    return '—'
  mean = stat.mean
  finite = mean != 0 and math.isfinite(mean)
  decimals = max(0, 3 - math.floor(math.log10(abs(mean)))) if finite else 4
  text = f'{mean:.{decimals}f}'
  return f'{text} ± {stat.std:.{decimals}f}' if with_std and stat.std is not None else text


def markdown_table(fields: list[str], settings: list[Setting], metrics: list[str]) -> str:
  """One row per setting: its fields, n, metrics (mean ± std), @init values, time, parameters."""
  stats = [aggregate([summarize_run(run, metrics) for run in setting.runs]) for setting in settings]
  init = [f'{metric}@init' for metric in metrics] + ['grad_norm@init']
  init = [column for column in init if any(column in row for row in stats)]
  header = [*(fields or ['run']), 'n', *metrics, *init, 'train time (s)', 'ms/step', 'parameters']
  rows = []
  for setting, row in zip(settings, stats):
    names = [format_value(value) for value in setting.values.values()] or [setting.label]
    values = [format_stat(row.get(column)) for column in metrics + init]
    timing = ('train time (s)', 'ms/step')  # Means only: seeds' speeds differ by machine load.
    values += [format_stat(row.get(column), with_std=False) for column in timing]
    values.append(f"{round(row['parameters'].mean):,}" if 'parameters' in row else '—')
    rows.append(names + [str(len(setting.runs))] + values)
  cells = [[str(cell).replace('|', r'\|') for cell in row] for row in [header] + rows]
  lines = ['| ' + ' | '.join(row) + ' |' for row in cells]
  lines.insert(1, '|' + '|'.join('---' for _ in header) + '|')
  return '\n'.join(lines)


def draw_curves(settings: list[Setting], metrics: list[str]) -> bytes:
  """PNG of train loss and each eval metric against step; one colour per setting, all its seeds."""
  panels = [('train', 'loss')] + [(None, metric) for metric in metrics]  # None: a run's eval split.
  columns = min(3, len(panels))
  rows = math.ceil(len(panels) / columns)
  figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.5 * rows), squeeze=False,
                              layout='constrained')
  colours = plt.get_cmap('tab10')
  for index, setting in enumerate(settings):
    for run in setting.runs:
      for ax, (split, metric) in zip(axes.flat, panels):
        points = [(line['step'], line[metric])
                  for line in run.split_lines(split or run.eval_split) if metric in line]
        if points:
          steps, values = zip(*points)
          ax.plot(steps, values, color=colours(index % 10), marker=None if split else 'o',
                  markersize=3, linewidth=1)
  splits = sorted({run.eval_split for setting in settings for run in setting.runs})
  for ax, (split, metric) in zip(axes.flat, panels):
    ax.set_title(f"{split or '/'.join(splits)} {metric}", fontsize=10)
    ax.set_xlabel('step')
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
  for ax in list(axes.flat)[len(panels):]:
    ax.set_visible(False)
  # Below the panels, as settings' labels can be longer than a panel is wide.
  handles = [Line2D([], [], color=colours(index % 10), label=setting.label)
             for index, setting in enumerate(settings)]  # Each setting once, however many seeds.
  figure.legend(handles=handles, loc='outside lower center', ncols=min(3, len(settings)),
                fontsize=8)
  buffer = io.BytesIO()
  figure.savefig(buffer, format='png', dpi=100, bbox_inches='tight')
  plt.close(figure)
  return buffer.getvalue()


def _count(number: int, noun: str) -> str:
  return f'{number} {noun}' + ('' if number == 1 else 's')


def write_report(paths: list[str], out_dir: str, metrics: list[str] | None = None,
                 against: str | None = None, from_eval: bool = False) -> str:
  """Compares the runs under `paths`; writes out_dir/report.md and out_dir/curves.png (and
  out_dir/against.png with `against`).

  Args:
    paths: runs (workdirs with metrics.jsonl) or folders whose subdirectories are runs.
    out_dir: where report.md and curves.png go (created if needed).
    metrics: eval metrics to compare (default: all in every run's final eval line).
    against: draw the final metrics against this differing field, or across the metrics with
      'metrics' (see `training.compare_against`).
    from_eval: each run's final metrics are eval.py's (see `load_run`).

  Returns:
    The markdown of report.md.

  Raises:
    FileNotFoundError: a path is not a run or folder of runs, or a run lacks config.json.
    ValueError: a requested metric is in no run's final evaluation.
  """
  runs = [load_run(path, from_eval) for path in find_runs(paths)]
  metrics = select_metrics(runs, metrics)
  fields, settings = group_settings(runs)
  figures = {'curves.png': lambda: draw_curves(settings, metrics)}
  if against:
    from training import compare_against  # pylint: disable=g-import-not-at-top  (it imports us)
    compare_against.lines(settings, against)  # a bad field fails before anything is written
    figures['against.png'] = lambda: compare_against.draw(settings, metrics, against)
  splits = '/'.join(sorted({run.eval_split for run in runs}))
  markdown = '\n\n'.join([
      f'# Comparison of {_count(len(runs), "run")} in {_count(len(settings), "setting")}',
      f"Final {splits} metrics{' of eval.py' if from_eval else ''}, mean ± std over the n "
      'seeds (or cross-validation folds) of each setting.',
      markdown_table(fields, settings, metrics),
      *(f'![{name[:-4]}]({name})' for name in figures)]) + '\n'
  os.makedirs(out_dir, exist_ok=True)
  for name, draw in figures.items():
    with open(os.path.join(out_dir, name), 'wb') as f:
      f.write(draw())
  with open(os.path.join(out_dir, 'report.md'), 'w', encoding='utf-8') as f:
    f.write(markdown)
  return markdown
