"""Attention sinks and streaming (Xiao et al., "Efficient Streaming Language Models with Attention
Sinks", ICLR 2024), in small, on a pretrained decoder over a real text.

    python -m studies.streaming --checkpoint=CHECKPOINT \
        --text=../shared/data/books/pride_and_prejudice.txt --out=runs/streaming

CHECKPOINT is anything `models.pretrained.read` reads of an architecture
`models.pretrained.load_decoder` converts. The first `--tokens` ids of `--text` (the checkpoint's
tokenizer, with its special tokens, e.g. Gemma's <bos>) are one stream, and every token's
next-token loss is measured with a cache of `--cache` keys and values per layer, each way the
paper compares (its Figure 3):

- dense: every earlier token (the full pass over the stream, within the model's context);
- window: the `--cache` latest tokens, the first ones evicted as the stream moves on;
- kept s: the same memory as s first tokens kept for good plus the `--cache` - s latest
  (StreamingLLM, Attend's `sink_tokens`), for each s of `--kept` (its Table 1);
- recompute: the `--cache` latest tokens encoded afresh for each prediction (positions
  0 .. cache-1), sampled at every `--every`-th token past the cache (the cost is a whole pass
  per token).

A windowed cache gives each token the keys it had when its own step ran, so decoding the stream
token by token with Attend's ring-buffer cache is one full pass with each query seeing the keys
the cache would hold (the window and the kept tokens, at the offsets the cache gives them;
`tests/test_streaming.py` checks the two agree). Each way's per-token losses become the
perplexity over the tokens past the cache and a curve along the stream. Over the dense pass,
each layer and head's mean attention weight on the first token (queries 1 ..) is the paper's
Figure 2 reading: the attention sink. `--out` receives `streaming.json` and `streaming.png`.
"""

import argparse
import dataclasses
import json
import os
import time
from typing import Callable

from flax import nnx
import jax
import jax.numpy as jnp
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
import numpy as np

from models.attention_paths import attention_layers
from studies.decoder_runs import first_token_weight, integers, load_with_stream, per_head
from training import failures


def with_cache(model: nnx.Module, window: int, sink_tokens: int) -> nnx.Module:
  """The model (sharing its parameters) with every self-attention's window and kept first tokens
  set: `window=0` sees every earlier token."""
  graphdef, state = nnx.split(model)
  copy = nnx.merge(graphdef, state)
  for layer in attention_layers(copy).values():
    layer.config = dataclasses.replace(layer.config, window=window, sink_tokens=sink_tokens)
  return copy


def next_token_nll(model: nnx.Module) -> Callable[[np.ndarray], np.ndarray]:
  """The model's losses as one compiled function of ids `[B, L]` -> `[B, L - 1]`: entry t - 1
  is the loss of token t given tokens 0 .. t-1 of its row (the logits stay inside)."""
  graphdef, state = nnx.split(model)

  @jax.jit
  def losses(state, ids):
    logits = nnx.merge(graphdef, state).token_logits(ids)[:, :-1]  # [B, L-1, V]
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), ids[:, 1:, None], -1)
    return nll[..., 0]

  return lambda ids: np.asarray(losses(state, jnp.asarray(ids)))


def recompute_nll(
  losses: Callable[[np.ndarray], np.ndarray],
  ids: np.ndarray,
  targets: np.ndarray,
  context: int,
  batch: int = 8,
) -> np.ndarray:
  """The loss of each token `ids[t]`, t in `targets` (each >= context), given only the `context`
  tokens before it, encoded afresh at positions 0 .. context-1: `[len(targets)]`. `losses` is
  `next_token_nll(model)`; rows go `batch` at a time (the last batch padded by repeating)."""
  out = []
  for start in range(0, len(targets), batch):
    chunk = targets[start : start + batch]
    padded = np.concatenate([chunk, np.full(batch - len(chunk), chunk[-1])])
    rows = np.stack([ids[t - context : t + 1] for t in padded])  # [batch, context + 1]
    out.append(losses(rows)[: len(chunk), -1])
  return np.concatenate(out)


def first_token_mass(model: nnx.Module, ids: np.ndarray) -> np.ndarray:
  """Each layer and head's mean attention weight on position 0 over queries 1 .. T-1, `[L, N]`
  (one pass, `studies.decoder_runs.per_head`)."""
  return per_head(model, ids[None], lambda weights: {'mass': first_token_weight(weights)})['mass']


def perplexity(nll: np.ndarray) -> float:
  """`exp` of the mean loss."""
  return float(np.exp(np.mean(nll)))


def study(
  model: nnx.Module, ids: np.ndarray, *, cache: int, kept: tuple[int, ...], every: int, log=print
) -> dict:
  """Every way's per-token losses, their perplexities and the first-token masses; see the
  module docstring. `kept` holds the numbers of kept first tokens (0: the plain window)."""
  losses, seconds = {}, {}
  ways = {'dense': model}
  ways.update({f'kept {s}' if s else 'window': with_cache(model, cache - s, s) for s in kept})
  for name, variant in ways.items():
    start = time.perf_counter()
    losses[name] = next_token_nll(variant)(ids[None])[0]
    seconds[name] = time.perf_counter() - start
    log(f'{name}: {seconds[name]:.1f} s, perplexity {perplexity(losses[name][cache - 1 :]):.2f}')
  targets = np.arange(cache, len(ids), every)  # the tokens recompute predicts
  start = time.perf_counter()
  recomputed = recompute_nll(next_token_nll(model), ids, targets, cache)
  seconds['recompute'] = time.perf_counter() - start
  log(f'recompute ({len(targets)} tokens): {seconds["recompute"]:.1f} s')
  start = time.perf_counter()
  mass = first_token_mass(model, ids)
  seconds['first-token mass'] = time.perf_counter() - start
  log(f'first-token mass: {seconds["first-token mass"]:.1f} s')
  table = {
    name: dict(
      past_cache=perplexity(nll[cache - 1 :]),
      sampled=perplexity(nll[targets - 1]),
      first_cache=perplexity(nll[: cache - 1]),
    )
    for name, nll in losses.items()
  }
  table['recompute'] = dict(sampled=perplexity(recomputed))
  return dict(
    perplexity=table,
    losses={name: np.round(nll, 4).tolist() for name, nll in losses.items()},
    recompute=dict(targets=targets.tolist(), losses=np.round(recomputed, 4).tolist()),
    first_token_mass=mass.tolist(),
    seconds={name: round(value, 1) for name, value in seconds.items()},
  )


def _smooth(values: np.ndarray, width: int) -> np.ndarray:
  """Moving average over `width` values (valid part only)."""
  width = max(1, min(width, len(values)))
  return np.convolve(values, np.ones(width) / width, mode='valid')


def _curves(axes, result: dict, cache: int, smooth: int, *, excess: bool) -> None:
  """Each way's loss along the stream (moving means over `smooth` tokens), or with `excess` its
  loss minus the dense cache's, with recompute's at its sampled tokens (moving means over the
  samples in twice that span; alone they would be single tokens' losses)."""
  losses = {name: np.asarray(nll) for name, nll in result['losses'].items()}
  dense = losses['dense']
  for i, (name, nll) in enumerate(losses.items()):
    if excess and name == 'dense':
      continue
    smoothed = _smooth(nll - dense if excess else nll, smooth)
    x = np.arange(len(smoothed)) + (smooth + 1) / 2  # the predicted token at the window centre
    width = 1.5 if name in ('dense', 'window') else 1
    axes.plot(x, smoothed, color=f'C{i}', label=name, linewidth=width)
  every = int(result['every'])
  if excess:
    targets, recomputed = (np.asarray(result['recompute'][key]) for key in ('targets', 'losses'))
    points = max(1, min(2 * smooth // every, len(targets)))
    x = targets[points - 1 :] - every * (points - 1) / 2
    values = _smooth(recomputed - dense[targets - 1], points)
    axes.plot(x, values, 'k.-', markersize=3, linewidth=0.5, label='recompute')
  axes.axvline(cache, color='gray', linestyle='--', linewidth=1)
  axes.text(cache, 1, f' cache {cache}', va='top', fontsize=8, transform=axes.get_xaxis_transform())
  if excess:
    axes.axhline(0, color='black', linewidth=0.8)
    axes.set_ylabel("loss minus the dense cache's (nats)")
    axes.set_title(f'what each cache costs (recompute: every {every}th token)', fontsize=10)
  else:
    axes.set_ylabel(f'next-token loss (nats), mean of {smooth}')
    axes.set_title('loss along the stream (their Figure 3)', fontsize=10)
  axes.set_xlabel('token position in the stream')
  axes.legend(fontsize=7, ncol=3)
  axes.grid(alpha=0.3)


def save_figure(path: str, result: dict, title: str, *, cache: int) -> str:
  """Four panels: the loss along the stream, its excess over the dense cache, perplexity
  against kept tokens, and each layer's attention on the first token."""
  smooth = min(128, max(1, result['tokens'] // 16))  # tokens per point of the curves
  figure = Figure(figsize=(15, 8.5))
  FigureCanvasAgg(figure)
  (curve, bars), (excess, mass) = figure.subplots(2, 2, width_ratios=[2, 1])
  _curves(curve, result, cache, smooth, excess=False)
  _curves(excess, result, cache, smooth, excess=True)
  table = result['perplexity']
  kept = [name for name in table if name == 'window' or name.startswith('kept')]
  values = [table[name]['past_cache'] for name in kept]
  labels = ['0' if name == 'window' else name.split()[1] for name in kept]
  bars.bar(labels, values, color='tab:blue')
  for i, value in enumerate(values):
    bars.text(i, value, f'{value:.1f}', ha='center', va='bottom', fontsize=8)
  bars.axhline(table['dense']['past_cache'], color='black', linestyle='--', label='dense')
  bars.set_xlabel(f'first tokens kept (a cache of {cache} in all; 0 = window)')
  bars.set_ylabel(f'perplexity of tokens {cache} ..')
  bars.set_title('kept first tokens (their Table 1)', fontsize=10)
  bars.legend(fontsize=8)
  grid = np.asarray(result['first_token_mass'])  # [L, N]
  layers = np.arange(len(grid))
  mass.fill_between(layers, grid.min(1), grid.max(1), alpha=0.25, label='range over heads')
  mass.plot(layers, grid.mean(1), 'o-', markersize=3, label='mean over heads')
  mass.set_ylim(0, 1)
  mass.xaxis.get_major_locator().set_params(integer=True)
  mass.set_xlabel('layer')
  mass.set_ylabel('attention weight on token 0')
  mass.set_title('attention on the first token, dense (their Figure 2)', fontsize=10)
  mass.legend(fontsize=8)
  mass.grid(alpha=0.3)
  figure.suptitle(title, fontsize=11)
  figure.tight_layout()
  figure.savefig(path, dpi=80)
  return path


def markdown(result: dict, cache: int) -> str:
  """The perplexity table and the per-layer first-token mass as markdown."""
  lines = [
    f'| cache | perplexity, tokens {cache} .. | sampled tokens | tokens 1 .. {cache - 1} |',
    '|---|---|---|---|',
  ]
  for name, row in result['perplexity'].items():
    cells = [
      f'{row[key]:.2f}' if key in row else '-' for key in ('past_cache', 'sampled', 'first_cache')
    ]
    lines.append(f'| {name} | ' + ' | '.join(cells) + ' |')
  grid = np.asarray(result['first_token_mass'])
  lines += [
    '',
    '| layer | first-token mass, mean over heads (%) | min head | max head |',
    '|---|---|---|---|',
  ]
  lines += [
    f'| {i} | {100 * row.mean():.1f} | {100 * row.min():.1f} | {100 * row.max():.1f} |'
    for i, row in enumerate(grid)
  ]
  return '\n'.join(lines)


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--checkpoint', required=True, help='what models.pretrained.read reads')
  parser.add_argument('--text', required=True, help='a plain UTF-8 text file')
  parser.add_argument('--out', required=True, help='the folder for streaming.json and .png')
  parser.add_argument('--tokens', type=int, default=2560, help='length of the stream')
  parser.add_argument('--cache', type=int, default=256, help='keys and values kept per layer')
  parser.add_argument('--kept', default='0,1,2,4,8', help='first tokens kept, comma-separated')
  parser.add_argument('--every', type=int, default=16, help="recompute's sampling step")
  args = parser.parse_args(argv)
  kept = integers(args.kept, '--kept', zero=True)
  if not max(kept) < args.cache < args.tokens or args.every < 1:
    raise ValueError(
      f'need every kept count < --cache < --tokens and --every >= 1; got --kept={args.kept}, '
      f'--cache={args.cache}, --tokens={args.tokens}, --every={args.every}.'
    )
  start = time.perf_counter()
  model, ids = load_with_stream(args.checkpoint, args.text, args.tokens)
  result = study(model, ids, cache=args.cache, kept=kept, every=args.every)
  result.update(
    checkpoint=args.checkpoint,
    text=args.text,
    tokens=args.tokens,
    cache=args.cache,
    every=args.every,
    seconds_total=round(time.perf_counter() - start, 1),
  )
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, 'streaming.json'), 'w', encoding='utf-8') as f:
    json.dump(result, f)
  name = os.path.basename(os.path.normpath(args.checkpoint))
  text = os.path.basename(args.text)
  title = f'{name} over the first {args.tokens} tokens of {text}, a cache of {args.cache}'
  save_figure(os.path.join(args.out, 'streaming.png'), result, title, cache=args.cache)
  print(markdown(result, args.cache))
  print(f'total: {result["seconds_total"]} s')
  return result


if __name__ == '__main__':
  failures.run('python -m studies.streaming', main)  # a user's error: one sentence
