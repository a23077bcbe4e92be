"""Compares training workdirs: a table of final metrics per setting (mean ± std over seeds), curves.

  markdown = compare.write_report(['runs/study'], out_dir='runs/study')

A run is a workdir written by train.py (config.json, metrics.jsonl); runs that differ only in
their seed (or cross-validation fold) are one setting (`reports.runs`), and the table gives
their mean ± std. It only reads files: no model is built. The figures label each setting only by
what tells it apart from the others ('positions=alibi') and name axes and metrics in words
(reports/figure_words.py).
"""

import io
import math
import os

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from reports import compare_against
from reports.figure_words import and_list, format_value, legend, metric_words
from reports.runs import (
  Setting,
  Stat,
  aggregate,
  config_keys,
  find_runs,
  group_settings,
  load_run,
  select_metrics,
  summarize_run,
)


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
    values.append(f'{round(row["parameters"].mean):,}' if 'parameters' in row else '—')
    rows.append(names + [str(len(setting.runs))] + values)
  cells = [[str(cell).replace('|', r'\|') for cell in row] for row in [header] + rows]
  lines = ['| ' + ' | '.join(row) + ' |' for row in cells]
  lines.insert(1, '|' + '|'.join('---' for _ in header) + '|')
  return '\n'.join(lines)


def curve_words(settings: list[Setting], metrics: list[str]) -> dict:
  """The words of curves.png: 'title', per panel its 'panels' title and 'ylabels', the 'xlabel'.

  The title says what tells the settings apart ('Training curves by positions'); a panel is the
  training loss, then each eval metric on the runs' eval split, named by `metric_words`.
  """
  names, _ = legend([setting.values for setting in settings], config_keys(settings))
  splits = '/'.join(sorted({run.eval_split for setting in settings for run in setting.runs}))
  if names:
    title = f'Training curves by {and_list(names)}'
  else:
    title = f'Training curves of {settings[0].label}' if len(settings) == 1 else 'Training curves'
  return {
    'title': title,
    'panels': ['training loss'] + [f'{splits} {metric_words(metric)}' for metric in metrics],
    'ylabels': [metric_words('loss')] + [metric_words(metric) for metric in metrics],
    'xlabel': 'training step',
  }


def curves_figure(settings: list[Setting], metrics: list[str]) -> Figure:
  """Train loss and each eval metric against step; one colour per setting, all its seeds."""
  panels = [('train', 'loss')] + [(None, metric) for metric in metrics]  # None: a run's eval split.
  words = curve_words(settings, metrics)
  columns = min(3, len(panels))
  rows = math.ceil(len(panels) / columns)
  # Drawn by Agg outside pyplot: files only, and matplotlib's backend is left as it is.
  figure = Figure(figsize=(5 * columns, 3.5 * rows), layout='constrained')
  FigureCanvasAgg(figure)
  axes = figure.subplots(rows, columns, squeeze=False)
  colours = matplotlib.colormaps['tab10']
  for index, setting in enumerate(settings):
    for run in setting.runs:
      for ax, (split, metric) in zip(axes.flat, panels):
        points = [
          (line['step'], line[metric])
          for line in run.split_lines(split or run.eval_split)
          if metric in line
        ]
        if points:
          steps, values = zip(*points)
          ax.plot(
            steps,
            values,
            color=colours(index % 10),
            marker=None if split else 'o',
            markersize=3,
            linewidth=1,
          )
  for ax, title, ylabel in zip(axes.flat, words['panels'], words['ylabels']):
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(words['xlabel'])
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
  for ax in list(axes.flat)[len(panels) :]:
    ax.set_visible(False)
  figure.suptitle(words['title'], fontsize=12)
  # Below the panels, as settings' labels can be longer than a panel is wide.
  handles = [
    Line2D([], [], color=colours(index % 10), label=setting.label)
    for index, setting in enumerate(settings)
  ]  # Each setting once, however many seeds.
  longest = max((len(setting.label) for setting in settings), default=0)
  figure.legend(
    handles=handles,
    loc='outside lower center',
    ncols=min(3 if longest <= 45 else 2, len(settings)),
    fontsize=9,
  )
  return figure


def draw_curves(settings: list[Setting], metrics: list[str]) -> bytes:
  """PNG of `curves_figure`."""
  buffer = io.BytesIO()
  curves_figure(settings, metrics).savefig(buffer, format='png', dpi=100, bbox_inches='tight')
  return buffer.getvalue()


def _count(number: int, noun: str) -> str:
  return f'{number} {noun}' + ('' if number == 1 else 's')


def write_report(
  paths: list[str],
  out_dir: str,
  metrics: list[str] | None = None,
  against: str | None = None,
  from_eval: bool = False,
) -> str:
  """Compares the runs under `paths`; writes out_dir/report.md and out_dir/curves.png (and
  out_dir/against.png with `against`).

  Args:
    paths: runs (workdirs with metrics.jsonl) or folders whose subdirectories are runs.
    out_dir: where report.md and curves.png go (created if needed).
    metrics: eval metrics to compare (default: all in every run's final eval line).
    against: draw the final metrics against this differing field, or across the metrics with
      'metrics' (see `reports.compare_against`).
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
    compare_against.lines(settings, against)  # a bad field fails before anything is written
    figures['against.png'] = lambda: compare_against.draw(settings, metrics, against)
  splits = '/'.join(sorted({run.eval_split for run in runs}))
  markdown = (
    '\n\n'.join(
      [
        f'# Comparison of {_count(len(runs), "run")} in {_count(len(settings), "setting")}',
        f'Final {splits} metrics{" of eval.py" if from_eval else ""}, mean ± std over the n '
        'seeds (or cross-validation folds) of each setting.',
        markdown_table(fields, settings, metrics),
        *(f'![{name[:-4]}]({name})' for name in figures),
      ]
    )
    + '\n'
  )
  os.makedirs(out_dir, exist_ok=True)
  for name, draw in figures.items():
    with open(os.path.join(out_dir, name), 'wb') as f:
      f.write(draw())
  with open(os.path.join(out_dir, 'report.md'), 'w', encoding='utf-8') as f:
    f.write(markdown)
  return markdown
