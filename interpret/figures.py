"""The layers x heads map: one value per head, rows the attention layers, with its colour bar.

Every command and study that reports a number per head draws it here (prompt.py heads and
attribute, eval.py --ablate_heads, the head, IOI and attention distance studies): a diverging
scale centred at 0 for changes and attributions, a sequential one for scores, metrics and
distances; grey where a head was not computed (NaN); the values written in the cells while they
stay legible; marks (e.g. a head's class in a circuit) over the cells; row labels in bold where a
row stands apart (a global layer among local ones).
"""

from collections.abc import Mapping, Sequence

import numpy as np

from tasks import pictures

ANNOTATED_CELLS = 100  # values are written in the cells of maps this small or smaller


def size(layers: int, heads: int) -> tuple[float, float]:
  """A figure size (inches) in which a `layers x heads` map's ticks and numbers stay legible."""
  return max(6.5, 2.4 + 0.45 * heads), max(3.0, 1.6 + 0.26 * layers)


def draw_head_map(
  figure,
  axes,
  values: np.ndarray,
  *,
  title: str,
  label: str,
  rows: Sequence[str] | None = None,
  xlabel: str = 'head',
  diverging: bool = True,
  limits: tuple[float, float] | None = None,
  marks: Mapping[tuple[int, int], str] | None = None,
  bold: Sequence[int] = (),
) -> None:
  """Draws `values [L, N]` on `axes` of `figure` with its colour bar.

  Args:
    figure: the matplotlib figure (for the colour bar).
    axes: where to draw.
    values: one value per (layer, head); NaN = not computed (grey).
    title: the panel's title.
    label: the colour bar's label (what the values are, with their unit).
    rows: the row labels (default the layer numbers).
    xlabel: the x axis label.
    diverging: a blue-red scale symmetric about 0 (changes); else viridis (scores, metrics).
    limits: the colour scale's (min, max); default the data's (symmetric when diverging).
    marks: text drawn over some cells, `{(layer, head): text}`.
    bold: rows whose labels are set in bold (e.g. Gemma 3's global layers among local ones).
  """
  from matplotlib import colormaps  # pylint: disable=import-outside-toplevel

  layers, heads = values.shape
  finite = values[np.isfinite(values)]
  if limits is None:
    if diverging:
      limit = float(np.max(np.abs(finite))) if finite.size else 1.0
      limits = (-(limit or 1.0), limit or 1.0)
    else:
      limits = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
  cmap = colormaps['RdBu_r' if diverging else 'viridis'].with_extremes(bad='#cccccc')
  image = axes.imshow(values, cmap=cmap, vmin=limits[0], vmax=limits[1], aspect='auto')
  axes.set_xticks(range(heads), [str(h) for h in range(heads)], fontsize=8)
  step = 1 if rows is not None or layers <= 32 else max(1, layers // 16)
  names = list(rows) if rows is not None else [str(layer) for layer in range(layers)]
  axes.set_yticks(range(0, layers, step), names[::step], fontsize=7)
  for row in bold:
    if row % step == 0:  # a row with a label
      axes.get_yticklabels()[row // step].set_fontweight('bold')
  axes.set(xlabel=xlabel, ylabel='layer' if rows is None else '')
  axes.set_title(title, fontsize=9, wrap=True)
  if layers * heads <= ANNOTATED_CELLS and not marks:
    middle = sum(limits) / 2
    for (i, j), value in np.ndenumerate(values):
      if np.isfinite(value):
        dark = value > middle if not diverging else abs(value) < 0.5 * limits[1]
        color = 'black' if dark else 'white'
        axes.text(j, i, f'{value:.3g}', ha='center', va='center', fontsize=7, color=color)
  for (layer, head), text in (marks or {}).items():
    axes.text(head, layer, text, ha='center', va='center', fontsize=7)
  figure.colorbar(image, ax=axes, label=label, fraction=0.08, pad=0.03)


def save_head_map(path: str, values: np.ndarray, **options) -> str:
  """`values [L, N]` drawn alone (`draw_head_map`'s options) as a PNG at `path`; returns it."""
  figure = pictures.new_figure(figsize=size(*values.shape), dpi=120)
  draw_head_map(figure, figure.add_subplot(), values, **options)
  figure.tight_layout()
  figure.savefig(path)
  return path
