"""Pictures of attention over a memory: the NTM's read and write weightings over time
(`save_time_panels`, the copy figure of Graves et al. 2014) and a memory network's hop table
(`save_hop_table`, Sukhbaatar et al. 2015)."""

import numpy as np

from tasks.pictures import new_figure


def save_time_panels(path: str, panels: list[tuple[str, np.ndarray]], *, title: str) -> None:
  """Panels stacked vertically over a shared time axis (the NTM paper's copy figure).

  Args:
    path: the PNG to write.
    panels: `(name, values [rows, T])` per panel, e.g. input bits, or write weightings over the
      memory slots; values in [0, 1], each panel with its colour bar.
    title: the figure's title.
  """
  steps = panels[0][1].shape[1]
  heights = [max(1.0, min(4.0, 0.12 * values.shape[0])) for _, values in panels]
  figure = new_figure(figsize=(max(4.0, 0.12 * steps + 1.5), sum(heights) + 0.8))
  axes = figure.subplots(
    len(panels), 1, squeeze=False, sharex=True, gridspec_kw=dict(height_ratios=heights)
  )
  for ax, (name, values) in zip(axes[:, 0], panels):
    image = ax.imshow(
      values, cmap='gray_r', aspect='auto', interpolation='nearest', vmin=0.0, vmax=1.0
    )
    ax.set_ylabel(name, fontsize=8)
    ax.set_yticks([])
    figure.colorbar(image, ax=ax, fraction=0.02, pad=0.01)
  axes[-1, 0].set_xlabel('time step')
  figure.suptitle(title, fontsize=9)
  figure.tight_layout()
  figure.savefig(path, dpi=100, bbox_inches='tight')


def save_hop_table(
  path: str, sentences: list[str], weights: np.ndarray, supporting: list[int], *, title: str
) -> None:
  """A memory network's hop table as the notes show it: the story's sentences down, a support
  mark, and one column per hop whose cells are shaded by (and show) that hop's weight.

  Args:
    path: the PNG to write.
    sentences: the story's sentences in memory order.
    weights: `[K, len(sentences)]` each hop's attention weights.
    supporting: indices of the supporting sentences.
    title: the figure's title (the question, the answer, the prediction).
  """
  import matplotlib
  from matplotlib.patches import Rectangle

  hops, rows = weights.shape
  figure = new_figure(figsize=(4.5 + 0.9 * hops, 0.32 * rows + 1.0))
  axes = figure.add_axes((0, 0, 1, 1))
  axes.set_xlim(0, 1)
  axes.set_ylim(rows + 1.5, 0)
  axes.axis('off')
  text_width = 0.62 - 0.05 * hops
  cell = (0.97 - text_width - 0.1) / hops
  axes.text(0.01, 0.5, 'story', fontsize=8, weight='bold', va='center')
  axes.text(text_width, 0.5, 'support', fontsize=8, weight='bold', va='center')
  for k in range(hops):
    axes.text(
      text_width + 0.1 + (k + 0.5) * cell,
      0.5,
      f'hop {k + 1}',
      fontsize=8,
      weight='bold',
      ha='center',
      va='center',
    )
  for i, sentence in enumerate(sentences):
    y = i + 1.5
    axes.text(0.01, y, sentence, fontsize=8, va='center')
    axes.text(text_width, y, 'yes' if i in supporting else '', fontsize=8, va='center')
    for k in range(hops):
      x = text_width + 0.1 + k * cell
      axes.add_patch(
        Rectangle(
          (x, y - 0.45),
          cell * 0.95,
          0.9,
          color=matplotlib.colormaps['Blues'](0.85 * float(weights[k, i])),
        )
      )
      axes.text(
        x + cell * 0.47,
        y,
        f'{weights[k, i]:.2f}',
        fontsize=7,
        ha='center',
        va='center',
        color='white' if weights[k, i] > 0.5 else 'black',
      )
  axes.text(0.01, rows + 1.1, title, fontsize=8, va='center')
  figure.savefig(path, dpi=100)
