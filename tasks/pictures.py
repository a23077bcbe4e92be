"""Attention pictures: heatmaps (source across, output down), the HAN document figure,
confusion matrices, grids of every layer's and head's self-attention, and attention over images."""

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


def _figure(**kwargs) -> 'Figure':
  """A figure drawn by Agg (files only, never a display) and outside pyplot, whose registry keeps
  every figure open until closed: nothing here can leak one, however many pictures are drawn."""
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
  figure = _figure(figsize=(max(4.0, 0.3 * width + 2), max(3.0, 0.3 * height + 1.5)))
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
  figure = _figure(figsize=(size, size))
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


def _shades(
  word_weights: list[list[float]], sentence_weights: list[float] | None
) -> list[list[float]]:
  """Per word, its weight times the square root of its sentence's (the HAN paper's display, so
  words of unimportant sentences stay pale), rescaled to [0, 1] by the document's largest."""
  scales = (
    [1.0] * len(word_weights) if sentence_weights is None else [s**0.5 for s in sentence_weights]
  )
  shades = [[w * scale for w in words] for words, scale in zip(word_weights, scales)]
  peak = max((w for words in shades for w in words), default=0.0)
  return [[w / peak if peak > 0 else 0.0 for w in words] for words in shades]


def save_document_attention(
  path: str,
  tokens: list[list[str]],
  word_weights: list[list[float]],
  sentence_weights: list[float] | None,
  key_sentences: list[int],
  title: str,
) -> None:
  """The HAN paper's figure as a PNG: one row per sentence, a bar for its sentence weight on the
  left, each word on a background as dark as its weight (see `_shades`); key sentences marked
  '*'."""
  import matplotlib
  from matplotlib.patches import Patch

  rows = len(tokens)
  figure = _figure(figsize=(11, 0.38 * rows + 1.0))
  axes = figure.add_axes((0, 0, 1, 1))
  axes.set_xlim(0, 1)
  axes.set_ylim(rows + 1, 0)
  axes.axis('off')
  axes.text(0.01, 0.5, title, fontsize=9, va='center')
  renderer = figure.canvas.get_renderer()
  to_data = axes.transData.inverted()
  bar_width = 0.12
  for i, (words, shades) in enumerate(zip(tokens, _shades(word_weights, sentence_weights))):
    y = i + 1.5
    if sentence_weights is not None:
      axes.barh(y, bar_width * sentence_weights[i], height=0.6, left=0.01, color='tab:blue')
      axes.text(0.015 + bar_width, y, f'{sentence_weights[i]:.2f}', fontsize=7, va='center')
    marker = '*' if i in key_sentences else ' '
    x = 0.03 + bar_width + 0.04
    axes.text(x - 0.015, y, marker, fontsize=9, va='center')
    for word, shade in zip(words, shades):
      # White on the darker shades, black on the lighter ones: readable on every background.
      text = axes.text(
        x,
        y,
        word,
        fontsize=8,
        va='center',
        color='white' if shade > 0.55 else 'black',
        bbox=dict(
          boxstyle='square,pad=0.15',
          linewidth=0,
          facecolor=matplotlib.colormaps['Reds'](0.85 * shade),
        ),
      )
      extent = text.get_window_extent(renderer).transformed(to_data)
      x = extent.x1 + 0.008
  legend = [
    Patch(color=matplotlib.colormaps['Reds'](0.85 * v), label=f'{v:g}') for v in (0.25, 0.5, 1.0)
  ]
  legend.insert(0, Patch(color='tab:blue', label='bar: sentence weight'))
  legend.append(Patch(color='white', label='* key sentence (from the data)'))
  axes.legend(
    handles=legend,
    loc='upper right',
    fontsize=7,
    ncol=5,
    frameon=False,
    title='word shade (weight x sqrt(sentence weight), of the largest)',
    title_fontsize=7,
  )
  figure.savefig(path, dpi=100)


def document_attention_html(
  tokens: list[list[str]],
  word_weights: list[list[float]],
  sentence_weights: list[float] | None,
  key_sentences: list[int],
  title: str,
) -> str:
  """The same figure as a small self-contained HTML page (no scripts, no external files)."""
  import html  # pylint: disable=g-import-not-at-top

  lines = [
    '<!doctype html><meta charset="utf-8"><title>attention</title>',
    '<style>body{font:14px sans-serif} .row{display:flex;align-items:center;margin:3px 0}'
    ' .bar{height:12px;background:#1f77b4;margin-right:6px} .w{padding:1px 2px}'
    ' .bars{width:130px;display:flex;align-items:center} .key{width:14px}</style>',
    f'<p>{html.escape(title)}</p>',
  ]
  shades = _shades(word_weights, sentence_weights)
  for i, (words, weights) in enumerate(zip(tokens, word_weights)):
    bar = ''
    if sentence_weights is not None:
      bar = (
        f'<span class="bar" style="width:{100 * sentence_weights[i]:.0f}px"></span>'
        f'<small>{sentence_weights[i]:.2f}</small>'
      )
    spans = ''.join(
      f'<span class="w" style="background:rgba(214,39,40,{0.85 * shade:.2f})" '
      f'title="{weight:.3f}">{html.escape(word)}</span> '
      for word, weight, shade in zip(words, weights, shades[i])
    )
    key = '*' if i in key_sentences else ''
    lines.append(
      f'<div class="row"><span class="bars">{bar}</span><span class="key">{key}'
      f'</span><span>{spans}</span></div>'
    )
  return '\n'.join(lines) + '\n'


def save_head_grid(
  path: str,
  weights: np.ndarray,
  tokens: list[str],
  *,
  title: str,
  marks: list[tuple[int, int]] = (),
) -> None:
  """Every layer's and head's self-attention over one sequence: a grid of `[T, T]` maps, with
  a colour bar; longer sequences are drawn as the window of their last WINDOW positions.

  Args:
    path: the PNG to write.
    weights: `[L, N, T, T]` (query down, key across).
    tokens: the T tokens, for the axes.
    title: the figure's title.
    marks: `(query, key)` cells to outline, e.g. where a query should look.
  """
  from matplotlib.patches import Rectangle

  num_layers, num_heads, length = weights.shape[:3]
  start = max(0, length - WINDOW)
  if start:
    weights, tokens = weights[..., start:, start:], tokens[start:]
    title += f' (positions {start}..{length - 1} of {length})'
  shown = length - start
  size = 2.2 + 0.06 * shown
  figure = _figure(figsize=(size * num_heads + 1.0, size * num_layers + 0.8))
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
    ax.set_title(f'layer {layer}, head {head}', fontsize=9)
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
  figure = _figure(figsize=(panel * (len(maps) + 1), panel * height / width + 0.8))
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
  figure = _figure(figsize=(max(4.0, 0.12 * steps + 1.5), sum(heights) + 0.8))
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
  figure = _figure(figsize=(4.5 + 0.9 * hops, 0.32 * rows + 1.0))
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


def save_head_ablation(
  path: str, values: np.ndarray, layers: list[str], *, metric: str, unablated: float
) -> str:
  """Writes `values [L, N]`, the metric with each head ablated (rows attention layers, columns
  heads), as an annotated PNG with a colour bar; returns `path`."""
  rows, heads = values.shape
  figure = _figure(figsize=(max(4.0, 0.7 * heads + 3.5), max(2.5, 0.45 * rows + 1.5)))
  axes = figure.subplots()
  image = axes.imshow(values, cmap='viridis', aspect='auto')
  axes.set_xticks(range(heads), [str(h) for h in range(heads)], fontsize=8)
  axes.set_yticks(range(rows), layers, fontsize=8)
  axes.set_xlabel('head ablated')
  middle = (np.nanmin(values) + np.nanmax(values)) / 2
  for (i, j), value in np.ndenumerate(values):
    axes.text(
      j,
      i,
      f'{value:.3g}',
      ha='center',
      va='center',
      fontsize=8,
      color='black' if value > middle else 'white',
    )
  axes.set_title(f'{metric} with one head ablated (none: {unablated:.3g})', fontsize=9)
  figure.colorbar(image, ax=axes, fraction=0.04, label=metric)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  return path
