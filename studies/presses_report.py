"""studies/presses.py's table (rows: presses; columns: ratios) and its figures: score against
ratio, one curve per press, and which positions each head kept."""

import numpy as np


def table(report: dict, floor: float) -> tuple[str, dict]:
  """Markdown rows of presses, columns of ratios: the mean score over the tasks the uncompressed
  model scores at least `floor` on; and `{press: [score per ratio]}`."""
  rows = report['results']
  kept_tasks, dropped = [], {}
  for task in dict.fromkeys(row['task'] for row in rows):
    score = float(np.mean([row['correct']['none'] for row in rows if row['task'] == task]))
    if score >= floor:
      kept_tasks.append(task)
    else:
      dropped[task] = score
  report['kept_tasks'], report['dropped_tasks'] = kept_tasks, dropped
  chosen = [row for row in rows if row['task'] in kept_tasks]
  curves = {}
  lines = ['| press | ' + ' | '.join(f'{r:g}' for r in report['ratios']) + ' |']
  lines.append('|---' * (len(report['ratios']) + 1) + '|')
  for name in report['presses']:
    curve = [
      float(np.mean([row['correct'][f'{name}@{ratio}'] for row in chosen])) if chosen else 0.0
      for ratio in report['ratios']
    ]
    curves[name] = curve
    lines.append(f'| {name} | ' + ' | '.join(f'{100 * c:.0f}' for c in curve) + ' |')
  base = float(np.mean([row['correct']['none'] for row in chosen])) if chosen else 0.0
  report['uncompressed'] = base
  lines.append(f'\nUncompressed: {100 * base:.0f}% on {", ".join(kept_tasks) or "no task"}')
  if dropped:
    lines.append(
      'Dropped (uncompressed below the floor): '
      + ', '.join(f'{t} ({100 * s:.0f}%)' for t, s in dropped.items())
    )
  return '\n'.join(lines), curves


def summary(report: dict) -> dict:
  """`report` without its per-prompt answers (`results`, megabytes): the table's curves, the
  kept and dropped tasks, the settings and the time, small enough to commit beside a page."""
  return {key: value for key, value in report.items() if key != 'results'}


def figure(report: dict, curves: dict, path: str) -> None:
  import matplotlib  # pylint: disable=import-outside-toplevel

  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

  fig, ax = plt.subplots(figsize=(8.5, 4.5), dpi=120)
  base = report['uncompressed']  # every curve starts at ratio 0, the cache kept whole
  for index, (name, curve) in enumerate(curves.items()):
    # Curves that coincide stay visible: each marker a little smaller than the one before.
    ax.plot(
      [0.0, *report['ratios']],
      [100 * base, *(100 * c for c in curve)],
      marker='o',
      markersize=9 - 0.8 * index,
      label=name,
    )
  ax.set_xlabel('compression ratio (share of cached positions dropped)')
  ax.set_ylabel('answers right (%)')
  ax.set_ylim(-5, 105)
  chosen = [row for row in report['results'] if row['task'] in report['kept_tasks']]
  lengths = ', '.join(str(n) for n in sorted({row['length'] for row in chosen}))
  ax.set_title(
    f'{report["checkpoint"]}, {lengths or "no"} tokens: {len(chosen)} prompts of '
    f'{", ".join(report["kept_tasks"]) or "no task"}',
    fontsize=9,
  )
  ax.legend(fontsize=8, loc='center left', bbox_to_anchor=(1.01, 0.5))  # beside the curves
  ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)


def kept_figure(report: dict, path: str) -> bool:
  """Which positions each head kept at the largest ratio, per press (one panel each; rows:
  layers x key/value heads, columns: context positions), the needle marked, for the first
  needle sample. False when no sample recorded them."""
  row = next((r for r in report['results'] if r.get('kept') and r.get('needle')), None)
  if row is None:
    return False
  import matplotlib  # pylint: disable=import-outside-toplevel

  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

  names = list(row['kept'])
  fig, axes = plt.subplots(
    len(names), 1, figsize=(9, 1.6 * len(names) + 0.6), dpi=120, squeeze=False
  )
  for ax, name in zip(axes[:, 0], names):
    grid = np.asarray([[c == '1' for c in head] for layer in row['kept'][name] for head in layer])
    ax.imshow(grid, aspect='auto', cmap='Greys', interpolation='nearest', vmin=0, vmax=1)
    ax.axvline(row['needle'], color='tab:red', lw=1.2, label='needle')
    ax.set_ylabel(f'{name}\nlayer x head', fontsize=8)
    ax.tick_params(labelsize=7)
  axes[0, 0].legend(fontsize=7, loc='upper right')
  axes[-1, 0].set_xlabel('context position (black: kept)')
  fig.suptitle(
    f'{report["checkpoint"]}: kept at ratio {max(report["ratios"])}, {row["task"]} sample 0',
    fontsize=9,
  )
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)
  return True
