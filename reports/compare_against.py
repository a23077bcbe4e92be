"""A study's final metrics against one setting field, or across the compared metrics.

  png = compare_against.draw(settings, metrics, against='dataset.builder_config')
  png = compare_against.draw(settings, ['bits_per_char@64', 'bits_per_char@128'], 'metrics')

`against` is a differing config field (one panel per metric, the field's values along x, one
line per combination of the other fields) or 'metrics' (one panel, the metrics along x, one line
per setting: e.g. bits per character at each evaluated length). Points are means over seeds
with their std as error bars. Fields that move with `against` (a sequence length set with the
pairs it holds) label nothing: a line is what stays fixed while `against` changes.
"""

import io
import json
import math
import statistics

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from reports.runs import Setting, format_value, natural_key, summarize_run

METRICS = 'metrics'  # `against` value: the metrics themselves along x


def _tied(settings: list[Setting], field: str, against: str) -> bool:
  """Whether `field`'s value follows from `against`'s in every setting."""
  seen = {}
  for setting in settings:
    key = json.dumps(setting.values[against], default=repr)
    value = json.dumps(setting.values[field], default=repr)
    if seen.setdefault(key, value) != value:
      return False
  return True


def lines(settings: list[Setting], against: str) -> dict[str, list[Setting]]:
  """Label -> the settings of one line, in order along x.

  Raises:
    ValueError: `against` is neither 'metrics' nor a field that differs among the settings.
  """
  if against == METRICS:
    return {setting.label: [setting] for setting in settings}
  fields = list(settings[0].values) if settings else []
  if against not in fields:
    raise ValueError(
      f'--against={against} is not a field that differs among these runs; valid: '
      f'{", ".join([METRICS, *fields])}.'
    )
  others = [f for f in fields if f != against and not _tied(settings, f, against)]
  grouped = {}
  for setting in settings:
    label = ', '.join(f'{f}={format_value(setting.values[f])}' for f in others) or 'all runs'
    grouped.setdefault(label, []).append(setting)
  for members in grouped.values():
    members.sort(key=lambda s: natural_key(s.values[against]))
  return grouped


def _mean_std(setting: Setting, metric: str) -> tuple[float, float] | None:
  values = [
    v for v in (summarize_run(run, [metric]).get(metric) for run in setting.runs) if v is not None
  ]
  if not values:
    return None
  return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def draw(settings: list[Setting], metrics: list[str], against: str) -> bytes:
  """PNG of the final metrics against `against` (see the module docstring)."""
  grouped = lines(settings, against)
  panels = [None] if against == METRICS else metrics
  if against == METRICS:
    ticks = metrics
    prefixes = {metric.partition('@')[0] for metric in metrics}
    shared = prefixes.pop() if len(prefixes) == 1 and all('@' in m for m in metrics) else None
  else:
    ticks = sorted({format_value(s.values[against]) for s in settings}, key=natural_key)
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
        for name in metrics if metric is None else [metric]:
          x = name if metric is None else format_value(setting.values[against])
          stat = _mean_std(setting, name)
          if stat:
            points.append((ticks.index(x), *stat))
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
    if metric is None and shared:  # 'bits_per_char@64', '@128', ...: the suffixes along x
      ax.set_xticks(range(len(ticks)), [t.partition('@')[2] for t in ticks], fontsize=9)
      ax.set_xlabel(f'{shared}@…', fontsize=10)
      ax.set_ylabel(shared, fontsize=10)
    else:
      ax.set_xticks(range(len(ticks)), ticks, fontsize=9, rotation=20 if len(ticks) > 5 else 0)
      ax.set_xlabel('metric' if metric is None else against, fontsize=10)
      ax.set_ylabel('final value' if metric is None else metric, fontsize=10)
    ax.grid(alpha=0.3)
  for ax in list(axes.flat)[len(panels) :]:
    ax.set_visible(False)
  handles, labels = axes.flat[0].get_legend_handles_labels()
  longest = max(map(len, labels), default=0)  # long labels: fewer columns, no wider than the axes
  figure.legend(
    handles,
    labels,
    loc='outside lower center',
    fontsize=9,
    ncols=min(3 if longest <= 30 else 2 if longest <= 45 else 1, len(labels) or 1),
  )
  buffer = io.BytesIO()
  figure.savefig(buffer, format='png', dpi=110, bbox_inches='tight')
  return buffer.getvalue()
