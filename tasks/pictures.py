"""Attention pictures: heatmaps (source across, output down), confusion matrices, grids of every
layer's and head's self-attention, attention over images, and the figure every picture draws on.

A task's pictures of one kind of model live beside it: `document_pictures` (a hierarchical
attention network's document) and `memory_pictures` (the NTM's and memory networks' memory)."""

import textwrap
from typing import TYPE_CHECKING

import numpy as np

# matplotlib is imported where a picture is drawn, not here: every train.py imports this module
# through its task, and about half a second of CPU to load matplotlib is wasted in a process
# that never draws (training does not; eval.py does).
if TYPE_CHECKING:
  from matplotlib.figure import Figure

# Sequences longer than this are drawn as a window of their last WINDOW positions, where the
# tokens' labels can still be read (the explorer, eval/explorer.html, shows every position).
WINDOW = 48


def select_heads(weights: np.ndarray, layer: int, head: int) -> np.ndarray:
  """One [T, S] map from cross-attention weights [L, N, T, S]: a head, or the mean when head < 0.

  Raises:
    ValueError: `layer` or `head` is out of range for this model.
  """
  num_layers, num_heads = weights.shape[:2]
  if not -num_layers <= layer < num_layers:
    raise ValueError(
      f'--heatmap_layer={layer} is out of range for a model with {num_layers} '
      f'layers (valid: {-num_layers}..{num_layers - 1}).'
    )
  if head >= num_heads:
    raise ValueError(
      f'--heatmap_head={head} is out of range for a model with {num_heads} heads '
      f'(valid: 0..{num_heads - 1}, or -1 for the mean over heads).'
    )
  per_layer = weights[layer]  # [N, T, S]
  return per_layer.mean(axis=0) if head < 0 else per_layer[head]


def new_figure(**kwargs) -> 'Figure':
  """A figure drawn by Agg (files only, never a display) and outside pyplot, whose registry keeps
  every figure open until closed: no picture drawn on one can leak it, however many are drawn.
  Every picture of `tasks/` and `reports/` starts from one."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  figure = Figure(**kwargs)
  FigureCanvasAgg(figure)
  return figure


def save_heatmap(
  path: str, weights: np.ndarray, source_tokens: list[str], output_tokens: list[str], title: str
) -> None:
  """Writes one heatmap of weights [T, S] to `path` (PNG)."""
  height, width = weights.shape
  figure = new_figure(figsize=(max(4.0, 0.3 * width + 2), max(3.0, 0.3 * height + 1.5)))
  axes = figure.subplots()
  image = axes.imshow(weights, cmap='viridis', vmin=0.0, vmax=1.0, aspect='auto')
  axes.set_xticks(range(width), source_tokens, rotation=90, fontsize=8)
  axes.set_yticks(range(height), output_tokens, fontsize=8)
  axes.set_xlabel('source')
  axes.set_ylabel('output')
  # Wrapped to the figure's width (about 14 characters an inch at this size), never cut off.
  axes.set_title(
    textwrap.fill(title, max(30, int(14 * figure.get_figwidth())), replace_whitespace=False),
    fontsize=9,
  )
  figure.colorbar(image, ax=axes, fraction=0.04, label='attention weight')
  figure.tight_layout()
  figure.savefig(path, dpi=100)


def save_confusion_matrix(path: str, matrix: np.ndarray, names: list[str]) -> str:
  """Writes the `[C, C]` counts (rows true, columns predicted) as an annotated PNG; returns path."""
  size = max(3.5, 0.6 * len(names) + 2)
  figure = new_figure(figsize=(size, size))
  axes = figure.subplots()
  axes.imshow(matrix, cmap='Blues')
  axes.set_xticks(range(len(names)), names, rotation=45, ha='right', fontsize=8)
  axes.set_yticks(range(len(names)), names, fontsize=8)
  axes.set_xlabel('predicted')
  axes.set_ylabel('true')
  threshold = matrix.max() / 2 if matrix.size else 0
  for (i, j), count in np.ndenumerate(matrix):
    axes.text(
      j,
      i,
      str(count),
      ha='center',
      va='center',
      fontsize=8,
      color='white' if count > threshold else 'black',
    )
  axes.set_title(f'confusion matrix ({matrix.sum()} examples)', fontsize=9)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  return path


GRID_LAYERS = 4  # layers a picture of every head shows at most, unless asked for more


def spread_layers(num_layers: int, count: int = GRID_LAYERS) -> list[int]:
  """`count` layers evenly spaced from the first to the last (all of them if there are fewer):
  a real model's 30 layers x 9 heads in one grid is a picture of tens of thousands of pixels
  that takes minutes to draw."""
  count = min(count, num_layers)
  return sorted({round(i * (num_layers - 1) / max(count - 1, 1)) for i in range(count)})


def save_head_grid(
  path: str,
  weights: np.ndarray,
  tokens: list[str],
  *,
  title: str,
  marks: list[tuple[int, int]] = (),
  layers: list[int] | None = None,
  heads: list[int] | None = None,
) -> None:
  """Every layer's and head's self-attention over one sequence: a grid of `[T, T]` maps, with
  a colour bar; longer sequences are drawn as the window of their last WINDOW positions.

  Args:
    path: the PNG to write.
    weights: `[L, N, T, T]` (query down, key across).
    tokens: the T tokens, for the axes.
    title: the figure's title.
    marks: `(query, key)` cells to outline, e.g. where a query should look.
    layers, heads: the model's numbers of the L layers and N heads drawn (default 0 ..).
  """
  from matplotlib.patches import Rectangle

  num_layers, num_heads, length = weights.shape[:3]
  start = max(0, length - WINDOW)
  if start:
    weights, tokens = weights[..., start:, start:], tokens[start:]
    title += f' (positions {start}..{length - 1} of {length})'
  shown = length - start
  size = 2.2 + 0.06 * shown
  figure = new_figure(figsize=(size * num_heads + 1.0, size * num_layers + 0.8))
  axes = figure.subplots(num_layers, num_heads, squeeze=False)
  for (layer, head), ax in np.ndenumerate(axes):
    image = ax.imshow(
      weights[layer, head],
      cmap='viridis',
      vmin=0.0,
      vmax=1.0,
      aspect='auto',
      interpolation='nearest',
    )
    for query, key in marks:
      if query >= start and key >= start:
        ax.add_patch(
          Rectangle(
            (key - start - 0.5, query - start - 0.5),
            1,
            1,
            fill=False,
            edgecolor='red',
            linewidth=0.8,
          )
        )
    layer_name = layer if layers is None else layers[layer]
    ax.set_title(f'layer {layer_name}, head {head if heads is None else heads[head]}', fontsize=9)
    ax.set_xticks(range(shown), tokens, rotation=90, fontsize=6)
    ax.set_yticks(range(shown), tokens, fontsize=6)
  figure.suptitle(title, fontsize=10)
  figure.tight_layout(rect=(0, 0, 0.97, 0.98))
  figure.colorbar(image, ax=axes, fraction=0.02, pad=0.01, label='attention weight')
  figure.savefig(path, dpi=100)


def save_image_attention(
  path: str,
  pixels: np.ndarray,
  maps: list[tuple[str, np.ndarray]],
  *,
  title: str,
  boxes: list[tuple[int, int, int, int] | None] = (),
) -> None:
  """The image, then one panel per attention map laid over it (Show, Attend and Tell's figure).

  Args:
    path: the PNG to write.
    pixels: the image, uint8 `[H, W, C]` (C = 1 is drawn in grey).
    maps: `(panel title, weights [gh, gw])` per panel; each map is drawn over the whole image
      as its cells (the regions or patches, no smoothing) and scaled to its own maximum.
    title: the figure's title.
    boxes: per map, a `(top, left, bottom, right)` box to outline (e.g. where the word's object
      is), or None; empty for none at all.
  """
  from matplotlib.patches import Rectangle

  height, width = pixels.shape[:2]
  image = pixels[..., 0] if pixels.shape[-1] == 1 else pixels
  cmap = 'gray' if pixels.shape[-1] == 1 else None
  panel = max(1.2, min(3.0, 2.4 * width / max(height, width)))
  figure = new_figure(figsize=(panel * (len(maps) + 1), panel * height / width + 0.8))
  axes = figure.subplots(1, len(maps) + 1, squeeze=False)
  axes = axes[0]
  axes[0].imshow(image, cmap=cmap)
  axes[0].set_title('image', fontsize=8)
  for i, (name, weights) in enumerate(maps):
    ax = axes[i + 1]
    ax.imshow(image, cmap=cmap)
    peak = float(np.max(weights)) or 1.0
    overlay = ax.imshow(
      weights / peak,
      cmap='inferno',
      alpha=0.6,
      vmin=0.0,
      vmax=1.0,
      extent=(-0.5, width - 0.5, height - 0.5, -0.5),
      interpolation='nearest',
    )
    box = boxes[i] if i < len(boxes) else None
    if box is not None:
      top, left, bottom, right = box
      ax.add_patch(
        Rectangle(
          (left - 0.5, top - 0.5),
          right - left,
          bottom - top,
          fill=False,
          edgecolor='white',
          linewidth=1.0,
        )
      )
    ax.set_title(name, fontsize=8)
  for ax in axes:
    ax.set_xticks([])
    ax.set_yticks([])
  figure.suptitle(textwrap.fill(title, max(30, int(14 * figure.get_figwidth()))), fontsize=9)
  figure.tight_layout()
  if maps:
    figure.colorbar(overlay, ax=list(axes), fraction=0.03, pad=0.01, label='of the peak')
  figure.savefig(path, dpi=100, bbox_inches='tight')
