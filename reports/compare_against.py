"""A study's final metrics against one setting field, or across the compared metrics.

  png = compare_against.draw(settings, metrics, against='dataset.builder_config')
  png = compare_against.draw(settings, ['bits_per_char@64', 'bits_per_char@128'], 'metrics')

`against` is a differing config field (one panel per metric, the field's values along x, one
line per combination of the other fields) or 'metrics' (one panel, the metrics along x, one line
per setting: e.g. bits per character at each evaluated length). Points are means over seeds
with their std as error bars. Fields that move with `against` (a sequence length set with the
pairs it holds) label nothing: a line is what stays fixed while `against` changes, and of that
only what tells the lines apart (`reports.figure_words.legend`: 'attention=softmax, window=16'). The
title, axes and ticks are in words (`against_words`: 'evaluation length (tokens)', 'bits per
character').
"""

import io
import json
import math
import statistics

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from reports.figure_words import (
  EVAL_LENGTH,
  and_list,
  determines,
  field_words,
  format_value,
  legend,
  metric_words,
  natural_key,
)
from reports.runs import Setting, config_keys, summarize_run

METRICS = 'metrics'  # `against` value: the metrics themselves along x


def _legend(settings: list[Setting], against: str) -> tuple[list[str], dict[str, list[Setting]]]:
  """(names of the fields that tell the lines apart, label -> the settings of one line in order
  along x).

  Raises:
    ValueError: `against` is neither 'metrics' nor a field that differs among the settings.
  """
  keys = config_keys(settings)
  if against == METRICS:
    names, _ = legend([setting.values for setting in settings], keys)
    return names, {setting.label: [setting] for setting in settings}
  fields = list(settings[0].values) if settings else []
  if against not in fields:
    raise ValueError(
      f'--against={against} is not a field that differs among these runs; valid: '
      f'{", ".join([METRICS, *fields])}.'
    )
  values = [setting.values for setting in settings]
  others = [f for f in fields if f != against and not determines(values, [against], [f])]
  grouped = {}
  for setting in settings:
    key = json.dumps([setting.values[f] for f in others], default=repr)
    grouped.setdefault(key, []).append(setting)
  names, labels = legend(
    [{f: group[0].values[f] for f in others} for group in grouped.values()], keys
  )
  for members in grouped.values():
    members.sort(key=lambda s: natural_key(s.values[against]))
  return names, {label or 'all runs': members for label, members in zip(labels, grouped.values())}


def lines(settings: list[Setting], against: str) -> dict[str, list[Setting]]:
  """Label -> the settings of one line, in order along x; labels name only what tells the lines
  apart (`reports.figure_words.legend`): 'attention=softmax, window=16'.

  Raises:
    ValueError: `against` is neither 'metrics' nor a field that differs among the settings.
  """
  return _legend(settings, against)[1]


def _lengths(metrics: list[str]) -> tuple[str, list[str]] | None:
  """('bits_per_char', ['64', '128']) for one metric at evaluation lengths; None otherwise."""
  if not metrics:
    return None
  names, suffixes = zip(*(metric.partition('@')[::2] for metric in metrics))
  if len(set(names)) == 1 and all(suffix.isdigit() for suffix in suffixes):
    return names[0], list(suffixes)
  return None


def against_words(settings: list[Setting], metrics: list[str], against: str) -> dict:
  """The words of against.png: 'title', per panel its 'panels' title and 'ylabels', the 'xlabel',
  and the 'ticks' along x.

  Across the metrics of one metric at evaluation lengths ('bits_per_char@64', '@128', ...) x is
  the evaluation length; across other metrics x names each metric; against a field x is the
  field's values. Metrics are written by `metric_words`, the field by `field_words`.
  """
  names, _ = _legend(settings, against)
  keys = config_keys(settings)
  split = '/'.join(sorted({run.eval_split for setting in settings for run in setting.runs}))
  by = f', by {and_list(names)}' if names else ''
  if against == METRICS:
    lengths = _lengths(metrics)
    if lengths:
      metric, ticks = lengths
      return {
        'title': f'Final {split} {metric_words(metric)} by evaluation length{by}',
        'panels': [''],
        'ylabels': [metric_words(metric)],
        'xlabel': EVAL_LENGTH,
        'ticks': ticks,
      }
    return {
      'title': f'Final {split} metrics{by}',
      'panels': [''],
      'ylabels': ['final value'],
      'xlabel': 'metric',
      'ticks': [metric_words(metric) for metric in metrics],
    }
  measured = metric_words(metrics[0]) if len(metrics) == 1 else 'metrics'
  return {
    'title': f'Final {split} {measured} against {field_words(against, keys)}{by}',
    'panels': [metric_words(metric) if len(metrics) > 1 else '' for metric in metrics],
    'ylabels': [metric_words(metric) for metric in metrics],
    'xlabel': field_words(against, keys),
    'ticks': sorted({format_value(s.values[against]) for s in settings}, key=natural_key),
  }


def _mean_std(setting: Setting, metric: str) -> tuple[float, float] | None:
  values = [
    v for v in (summarize_run(run, [metric]).get(metric) for run in setting.runs) if v is not None
  ]
  if not values:
    return None
  return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def against_figure(settings: list[Setting], metrics: list[str], against: str) -> Figure:
  """The final metrics against `against` (see the module docstring)."""
  grouped = lines(settings, against)
  words = against_words(settings, metrics, against)
  panels = [None] if against == METRICS else metrics
  ticks = words['ticks']
  columns = min(2, len(panels))
  rows = math.ceil(len(panels) / columns)
  # Drawn by Agg outside pyplot: files only, and matplotlib's backend is left as it is.
  figure = Figure(figsize=(6.5 * columns, 4.2 * rows), layout='constrained')
  FigureCanvasAgg(figure)
  axes = figure.subplots(rows, columns, squeeze=False)
  colours = matplotlib.colormaps['tab10']
  for ax, metric in zip(axes.flat, panels):
    for index, (label, members) in enumerate(grouped.items()):
      points = []
      for setting in members:
        for position, name in enumerate(metrics) if metric is None else [(None, metric)]:
          x = position if metric is None else ticks.index(format_value(setting.values[against]))
          stat = _mean_std(setting, name)
          if stat:
            points.append((x, *stat))
      if points:
        xs, means, stds = zip(*points)
        ax.errorbar(
          xs,
          means,
          yerr=stds if any(stds) else None,
          marker='o',
          markersize=4,
          linewidth=1.5,
          capsize=3,
          color=colours(index % 10),
          label=label,
        )
  for ax, title, ylabel in zip(axes.flat, words['panels'], words['ylabels']):
    rotation = 20 if len(ticks) > 5 or max(map(len, ticks), default=0) > 12 else 0
    ax.set_xticks(range(len(ticks)), ticks, fontsize=9, rotation=rotation)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(words['xlabel'], fontsize=10)
    ax.set_ylabel(ylabel, fontsize=10)
    ax.grid(alpha=0.3)
  for ax in list(axes.flat)[len(panels) :]:
    ax.set_visible(False)
  figure.suptitle(words['title'], fontsize=12)
  handles, labels = axes.flat[0].get_legend_handles_labels()
  longest = max(map(len, labels), default=0)  # long labels: fewer columns, no wider than the axes
  figure.legend(
    handles,
    labels,
    loc='outside lower center',
    fontsize=9,
    ncols=min(3 if longest <= 30 else 2 if longest <= 45 else 1, len(labels) or 1),
  )
  return figure


def draw(settings: list[Setting], metrics: list[str], against: str) -> bytes:
  """PNG of `against_figure`."""
  buffer = io.BytesIO()
  against_figure(settings, metrics, against).savefig(
    buffer, format='png', dpi=110, bbox_inches='tight'
  )
  return buffer.getvalue()
