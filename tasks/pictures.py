"""Attention heatmap PNGs: source tokens across, output tokens down (like the paper's figures)."""

import matplotlib

matplotlib.use('Agg')  # files only; never needs a display
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import numpy as np


def select_heads(weights: np.ndarray, layer: int, head: int) -> np.ndarray:
  """One [T, S] map from cross-attention weights [L, N, T, S]: a head, or the mean when head < 0.

  Raises:
    ValueError: `layer` or `head` is out of range for this model.
  """
  num_layers, num_heads = weights.shape[:2]
  if not -num_layers <= layer < num_layers:
    raise ValueError(f'--heatmap_layer={layer} is out of range for a model with {num_layers} '
                     f'layers (valid: {-num_layers}..{num_layers - 1}).')
  if head >= num_heads:
    raise ValueError(f'--heatmap_head={head} is out of range for a model with {num_heads} heads '
                     f'(valid: 0..{num_heads - 1}, or -1 for the mean over heads).')
  per_layer = weights[layer]                                            # [N, T, S]
  return per_layer.mean(axis=0) if head < 0 else per_layer[head]


def save_heatmap(path: str, weights: np.ndarray, source_tokens: list[str],
                 output_tokens: list[str], title: str) -> None:
  """Writes one heatmap of weights [T, S] to `path` (PNG)."""
  height, width = weights.shape
  figure, axes = plt.subplots(figsize=(max(4.0, 0.3 * width + 2), max(3.0, 0.3 * height + 1.5)))
  image = axes.imshow(weights, cmap='viridis', vmin=0.0, vmax=1.0, aspect='auto')
  axes.set_xticks(range(width), source_tokens, rotation=90, fontsize=8)
  axes.set_yticks(range(height), output_tokens, fontsize=8)
  axes.set_xlabel('source')
  axes.set_ylabel('output')
  axes.set_title(title, fontsize=9)
  figure.colorbar(image, ax=axes, fraction=0.04)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)
