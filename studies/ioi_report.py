"""studies/ioi.py's printed tables (the docs copy them) and its figure: the patching, attribution
and path maps of the heads, each head's class marked."""

import numpy as np

from interpret import figures
from tasks import pictures

# The classes of Wang et al.'s circuit, each with the mark drawn over its heads.
CLASS_MARKS = {
  'name mover': 'N',
  'negative name mover': '-',
  'S-inhibition': 'S',
  'duplicate token': 'D',
  'induction': 'I',
}


def _table(header: list[str], rows: list[list[str]]) -> str:
  lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
  return '\n'.join(lines + ['| ' + ' | '.join(row) + ' |' for row in rows])


def tables(result: dict) -> dict[str, str]:
  """The markdown tables of `study`'s (or `ioi.json`'s) result: the task, the heads, the
  ablations."""
  cost, attends = result['thresholds']['COST'], result['thresholds']['ATTENDS']
  diffs = lambda **match: np.asarray(
    [p['logit_diff'] for p in result['prompts'] if all(p[k] == v for k, v in match.items())]
  )
  task = _table(
    ['template (BABA form), IO - S averaged over the draws', 'ABBA', 'BABA'],
    [
      [t, *[f'{diffs(template=i, order=o).mean():.2f}' for o in ('ABBA', 'BABA')]]
      for i, t in enumerate(result['templates'])
    ],
  )
  for half, first in (('selection', 0), ('held-out', 1)):
    d = np.concatenate([diffs(draw=k) for k in range(first, result['draws'], 2)])
    task += (
      f'\n\n{half} half: IO - S {d.mean():.2f} ± {d.std(ddof=1) / len(d) ** 0.5:.2f} (s.e.), '
      f'IO preferred in {np.mean(d > 0):.0%} of {len(d)} prompts.'
    )
  chosen, held = result['selection'], result['held_out_attention']
  maps = {name: np.asarray(values, float) for name, values in chosen['maps'].items()}
  labels = {}
  for name, heads in chosen['classes'].items():
    for l, h in heads:
      labels.setdefault((l, h), []).append(name)
  measured = np.isfinite(maps['via queries']) | np.isfinite(maps['via values'])
  shown = {*labels, *map(tuple, chosen['top'])}
  shown |= set(map(tuple, np.argwhere((np.abs(maps['patching']) >= cost) | measured).tolist()))
  signed = lambda v: f'{v:+.2f}' if np.isfinite(v) else ''
  attention = ('END->IO', 'END->S2', 'S2->S1', 'S2->S1+1')
  header = ['head', 'class', 'patching', 'direct', *[f'{a} (held-out)' for a in attention]]
  header += ["via name movers' queries", 'via S-inhibition values', 'mean-ablated alone, held-out']
  rows = []
  for l, h in sorted(shown):
    alone = result['alone'].get(f'{l}.{h}')
    rows.append(
      [f'{l}.{h}', ', '.join(labels.get((l, h), ['none']))]
      + [signed(maps[name][l, h]) for name in ('patching', 'direct')]
      + [f'{maps[a][l, h]:.2f} ({held[a][l][h]:.2f})' for a in attention]
      + [signed(maps[name][l, h]) for name in ('via queries', 'via values')]
      + [signed(alone) if alone is not None else '']
    )
  heads = _table(header, rows)
  for name, score in (('duplicate token', 'S2->S1'), ('induction', 'S2->S1+1')):
    only = [
      f'{l}.{h}'
      for l, h in np.argwhere(maps[score] >= attends)
      if name not in labels.get((l, h), [])
    ]
    heads += f'\n\n{score} >= {attends} but no class (no {name} path effect): '
    heads += ', '.join(only) or 'none'
  rows = []
  for name, entry in result['ablation'].items():
    random = entry['random']
    rows.append(
      [name, str(len(entry['heads'])), '%.2f ± %.2f' % tuple(entry['held_out'])]
      + [f'{np.mean(random):.2f} ± {np.std(random):.2f} ({len(random)} sets)' if random else '']
    )
  header = ['mean-ablated (chosen on the selection half)', 'heads', 'IO - S, held-out (± s.e.)']
  header += ['as many random heads, held-out (± s.d. over sets)']
  return dict(task=task, heads=heads, ablation=_table(header, rows))


def save_figure(path: str, result: dict, title: str) -> None:
  """The selection half's patching, direct effect and path patching maps, classes marked."""
  chosen = result['selection']
  marks = {tuple(h): CLASS_MARKS[name] for name, heads in chosen['classes'].items() for h in heads}
  panels = {
    'patched from the ABC twin': 'patching',
    'direct logit attribution': 'direct',
    "path patched into the name movers' queries": 'via queries',
    "path patched into the S-inhibition heads' values": 'via values',
  }
  width, height = figures.size(*np.shape(chosen['maps']['patching']))
  figure = pictures.new_figure(figsize=(4 * width, height + 0.6), dpi=80)
  for index, (name, key) in enumerate(panels.items()):
    axes, values = figure.add_subplot(1, 4, index + 1), np.asarray(chosen['maps'][key], float)
    label = 'change / clean IO - S'
    figures.draw_head_map(figure, axes, values, title=name, label=label, marks=marks)
  legend = ', '.join(f'{mark} {name}' for name, mark in CLASS_MARKS.items())
  figure.suptitle(f'{title}, selection half (grey: not a sender)\n{legend}', fontsize=10)
  figure.tight_layout()
  figure.savefig(path)
