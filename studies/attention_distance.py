"""How far back each layer and head of a pretrained decoder looks over a long text: the mean
attention distance, which tells Gemma 3's local layers from its global ones.

    python -m studies.attention_distance --checkpoint=CHECKPOINT \
        --text=../shared/data/books/pride_and_prejudice.txt --out=runs/distance

CHECKPOINT is anything `models.pretrained.read` reads of an architecture
`models.pretrained.load_decoder` converts. The first `--tokens` ids of `--text` (the checkpoint's
tokenizer, with its special tokens) are one sequence. For a query at position i that gives key
j <= i the weight w_ij, its attention distance is `sum_j w_ij (i - j)` tokens (the "mean
attention distance" of Dosovitskiy et al. 2021, Figure 7, along a text); each head's is the
mean over the queries from `--first_query` on (default: the second half, past a window of up
to half the text). Gemma 3 interleaves local layers, which see a window of the last 512
tokens, with a global layer every sixth: a local head's distance stays below its window by
construction, a global head's may reach back to the start. A head that parks its weight on
the first token (an attention sink) is far away without reading anything there, so the
distance is also given without the first token (its weight removed, the rest renormalised),
with the first token's weight itself. `--out` receives `distance.json` and `distance.png`.
"""

import argparse
import json
import os
import time

from flax import nnx
import jax
import jax.numpy as jnp
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
import numpy as np

from interpret import figures
from models.attention_paths import attention_layers
from studies.decoder_runs import first_token_weight, load_with_stream, per_head
from training import failures

MEASURES = ('distance', 'distance without the first token', 'first-token weight')


def distances(weights: jax.Array, first_query: int) -> dict[str, jax.Array]:
  """Each measure of the module docstring, `[..., N]`, from causal weights `[B, ..., N, T, T]`,
  averaged over the rows and over queries `first_query` .. T-1."""
  t = weights.shape[-1]
  queries = weights[..., first_query:, :]  # [B, ..., N, Q, T]
  back = jnp.arange(first_query, t)[:, None] - jnp.arange(t)[None, :]  # [Q, T]: i - j
  far = (queries * jnp.maximum(back, 0)).sum(-1)  # [B, ..., N, Q]; future keys carry no weight
  first = queries[..., 0]  # [B, ..., N, Q]
  # Key 0 is i tokens back: dropping it takes first * i off, renormalising divides by 1 - first.
  without = (far - first * back[:, 0]) / jnp.maximum(1.0 - first, 1e-9)
  return {
    'distance': far.mean(axis=(0, -1)),
    'distance without the first token': without.mean(axis=(0, -1)),
    'first-token weight': first_token_weight(weights, first_query),
  }


def head_distances(model: nnx.Module, ids: np.ndarray, first_query: int) -> dict[str, np.ndarray]:
  """Each measure, `[L, N]`, over one pass of `ids [T]` (`studies.decoder_runs.per_head`)."""
  measured = per_head(model, ids[None], lambda weights: distances(weights, first_query))
  return {kind: measured[kind] for kind in MEASURES}


def layer_windows(model: nnx.Module) -> list[int]:
  """Each layer's self-attention window (0: global, every earlier key)."""
  return [layer.config.window for layer in attention_layers(model).values()]


def save_figure(path: str, result: dict, title: str) -> str:
  """The distance per layer and head as a grid (`interpret.figures`' layers x heads map, global
  layers in bold), and per layer with local and global layers apart, with the first token's
  part."""
  grid = np.asarray(result['distance'])  # [L, N]
  without = np.asarray(result['distance without the first token'])
  windows, (layers, heads) = result['windows'], grid.shape
  figure = Figure(figsize=(14, max(4.5, 0.25 * layers + 1.5)))
  FigureCanvasAgg(figure)
  cells, lines = figure.subplots(1, 2, width_ratios=[max(3.0, 0.5 * heads + 2), 7])
  figures.draw_head_map(
    figure,
    cells,
    grid,
    title='mean attention distance (tokens)',
    label='tokens back',
    rows=[f'{i} ({"global" if not w else f"local {w}"})' for i, w in enumerate(windows)],
    diverging=False,
    bold=[i for i, window in enumerate(windows) if not window],
  )
  x = np.arange(layers)
  local = np.array([bool(w) for w in windows])
  for mask, colour, name in ((local, 'tab:blue', 'local'), (~local, 'tab:red', 'global')):
    for h in range(heads):
      lines.scatter(x[mask], grid[mask, h], color=colour, s=18, label=name if h == 0 else None)
      lines.scatter(
        x[mask],
        without[mask, h],
        facecolors='none',
        edgecolors=colour,
        s=18,
        label=f'{name}, first token left out' if h == 0 else None,
      )
  for window in sorted({w for w in windows if w}):
    lines.axhline(window, color='tab:blue', linestyle=':', linewidth=1)
    lines.text(
      0.99,
      window,
      f'window {window}',
      ha='right',
      va='bottom',
      fontsize=8,
      transform=lines.get_yaxis_transform(),
    )
  queries = np.arange(result['first_query'], result['tokens'])
  lines.axhline(queries.mean() / 2, color='gray', linestyle='--', linewidth=1)
  lines.text(
    0.99,
    queries.mean() / 2,
    'uniform over all earlier keys',
    ha='right',
    va='bottom',
    fontsize=8,
    transform=lines.get_yaxis_transform(),
  )
  lines.set_xticks(x, [str(i) for i in x], fontsize=8)
  lines.set_xlabel('layer')
  lines.set_ylabel('mean attention distance (tokens)')
  lines.set_title('each head, by layer', fontsize=10)
  lines.legend(fontsize=8, loc='upper left')
  lines.grid(alpha=0.3)
  figure.suptitle(title, fontsize=11)
  figure.tight_layout()
  figure.savefig(path, dpi=80)
  return path


def markdown(result: dict) -> str:
  """Per layer: its window, the distance (mean, min and max head), without the first token, and
  the first token's weight."""
  lines = [
    '| layer | attention | distance, mean of heads | min - max head | without the first token '
    '| first-token weight (%) |',
    '|---|---|---|---|---|---|',
  ]
  grid = np.asarray(result['distance'])
  without = np.asarray(result['distance without the first token'])
  first = np.asarray(result['first-token weight'])
  for i, window in enumerate(result['windows']):
    kind = f'local ({window})' if window else '**global**'
    lines.append(
      f'| {i} | {kind} | {grid[i].mean():.1f} | {grid[i].min():.1f} - {grid[i].max():.1f} '
      f'| {without[i].mean():.1f} | {100 * first[i].mean():.1f} |'
    )
  return '\n'.join(lines)


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--checkpoint', required=True, help='what models.pretrained.read reads')
  parser.add_argument('--text', required=True, help='a plain UTF-8 text file')
  parser.add_argument('--out', required=True, help='the folder for distance.json and .png')
  parser.add_argument('--tokens', type=int, default=2048, help='length of the text read')
  parser.add_argument('--first_query', type=int, default=None, help='default: --tokens // 2')
  args = parser.parse_args(argv)
  first_query = args.tokens // 2 if args.first_query is None else args.first_query
  if not 0 < first_query < args.tokens:
    raise ValueError(
      f'--first_query must be in 1 .. --tokens - 1 = {args.tokens - 1}, got {first_query}.'
    )
  start = time.perf_counter()
  model, ids = load_with_stream(args.checkpoint, args.text, args.tokens)
  measured = head_distances(model, ids, first_query)
  result = {kind: value.tolist() for kind, value in measured.items()}
  result.update(
    windows=layer_windows(model),
    checkpoint=args.checkpoint,
    text=args.text,
    tokens=args.tokens,
    first_query=first_query,
    seconds=round(time.perf_counter() - start, 1),
  )
  print(f'distances: {result["seconds"]} s')
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, 'distance.json'), 'w', encoding='utf-8') as f:
    json.dump(result, f, indent=1)
  name = os.path.basename(os.path.normpath(args.checkpoint))
  text = os.path.basename(args.text)
  title = f'{name} over the first {args.tokens} tokens of {text}, queries {first_query} ..'
  save_figure(os.path.join(args.out, 'distance.png'), result, title)
  print(markdown(result))
  return result


if __name__ == '__main__':
  failures.run('python -m studies.attention_distance', main)  # a user's error: one sentence
