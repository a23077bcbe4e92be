"""Head studies of a pretrained decoder: previous-token, induction and first-token heads, and what
ablating each kind does to in-context learning.

    python -m studies.decoder_heads --checkpoint=CHECKPOINT --out=runs/heads_gpt2

CHECKPOINT is anything `models.pretrained.read` reads (a short name, a Hugging Face folder or
`.zip`, a `.gguf` file) of a decoder architecture of `models.pretrained.ARCHITECTURES`; nothing
is downloaded. The study runs on repeated
random tokens, as in Olsson et al. (2022, "In-context Learning and Induction Heads"):
`--sequences` rows of `--length` tokens drawn uniformly from the vocabulary, each followed by
itself again. For every layer and head, over those rows:

- previous-token: the weight a query gives the token just before it (queries 1 ..);
- induction: the weight a query in the repeat gives the token after the earlier occurrence of
  its own token (query n + t attends to t + 1), the lookup an induction head does;
- first-token: the weight a query gives position 0 (queries 1 ..), the attention sink mass
  (Xiao et al. 2023).

A model that copies in context predicts the repeat far better than the first half: the
in-context loss drop is the first half's next-token loss minus the repeat's. For each k of
`--ablate` (comma-separated), zeroing the k heads of the highest score of each kind (their
outputs before W_O, see `models.interventions`) and, as a control, k heads drawn at random
(`--draws` draws, seed `--seed`; mean, standard deviation and range) shows which kind the drop
depends on. `--out` receives `heads.json` and `heads.png` (a layers x heads grid per score, with
colour bars, and the repeat's loss against k); the tables print as markdown.
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
from interpret import heads as heads_lib
from models import interventions
from models.attention_paths import attention_layers
import sources
from studies.decoder_runs import first_token_weight, integers
from training import failures

SCORES = ('previous-token', 'induction', 'first-token')
RANDOM = 'random (control)'


def repeated_tokens(vocab_size: int, sequences: int, length: int, seed: int) -> np.ndarray:
  """`[sequences, 2 * length]` ids: random tokens, then the same tokens again."""
  first = np.random.default_rng(seed).integers(0, vocab_size, (sequences, length))
  return np.concatenate([first, first], axis=1).astype(np.int32)


def head_scores(weights, length: int) -> dict:
  """Each score of the module docstring, `[L, N]`, from attention `[B, L, N, 2n, 2n]` of repeated
  rows of `length` n (NumPy or JAX arrays)."""
  t = np.arange(1, 2 * length)
  repeat = np.arange(length, 2 * length - 1)  # queries whose earlier occurrence has a successor
  return {
    'previous-token': weights[..., t, t - 1].mean(axis=(0, -1)),
    'induction': weights[..., repeat, repeat - length + 1].mean(axis=(0, -1)),
    'first-token': first_token_weight(weights),
  }


def _losses(logits: jax.Array, ids: jax.Array, length: int) -> dict[str, jax.Array]:
  """Mean next-token loss of the first half and of the repeat (predicting tokens n+1 .. 2n-1)."""
  nll = -jnp.take_along_axis(jax.nn.log_softmax(logits[:, :-1]), ids[:, 1:, None], -1)[..., 0]
  return {'first half': nll[:, : length - 1].mean(), 'repeat': nll[:, length:].mean()}


def chosen_heads(
  scores: dict[str, np.ndarray], sizes: list[int], draws: int, seed: int
) -> list[tuple[str, int, np.ndarray]]:
  """`(kind, k, flat head indices)` to zero: the top k heads of each score, and `draws` sets of
  k heads drawn at random without replacement (one generator, seeded, in the order of `sizes`)."""
  count = next(iter(scores.values())).size
  rng = np.random.default_rng(seed)
  chosen = []
  for k in sizes:
    chosen += [(f'top {kind}', k, np.argsort(-scores[kind], axis=None)[:k]) for kind in SCORES]
    chosen += [(RANDOM, k, rng.choice(count, k, replace=False)) for _ in range(draws)]
  return chosen


def study(
  model: nnx.Module,
  ids: np.ndarray,
  length: int,
  *,
  ablate: tuple[int, ...] = (2,),
  draws: int = 5,
  seed: int = 0,
  log=print,
) -> dict:
  """Scores per head, the losses, and the losses with the top k heads of each score and k random
  heads (`draws` times) zeroed, for each k in `ablate`. See the module docstring."""
  graphdef, state = nnx.split(model)
  paths, n = heads_lib.grid(model)
  shape = (len(paths), n)

  @jax.jit
  def measure(state, ids):
    logits, captured = interventions.capture(nnx.merge(graphdef, state), ids, method='token_logits')
    weights = interventions.stack(captured, model.attention_names['self'])  # [B, L, N, T, T]
    return _losses(logits, ids, length), head_scores(weights, length)

  ablated_losses = heads_lib.program(
    model, lambda model, ids: _losses(model.token_logits(ids), ids, length)
  )
  zeros = [jnp.zeros((1, 1, 1, 1))] * len(paths)
  start = time.perf_counter()
  losses, scores = measure(state, jnp.asarray(ids))
  scores = {kind: np.asarray(scores[kind]) for kind in SCORES}  # jit returns keys sorted
  log(f'scores and losses: {time.perf_counter() - start:.1f} s (with compilation)')
  rows = []
  chosen = chosen_heads(scores, list(ablate), draws, seed)
  for i, (kind, k, flat) in enumerate(chosen):
    zeroed = [tuple(int(i) for i in np.unravel_index(f, shape)) for f in flat]
    ablated = ablated_losses(jnp.asarray(ids), heads_lib.masks([zeroed], *shape), zeros)
    heads = [list(head) for head in zeroed]
    rows.append(
      dict(
        kind=kind,
        k=k,
        heads=heads,
        first_half_loss=float(ablated['first half'][0]),
        repeat_loss=float(ablated['repeat'][0]),
      )
    )
    log(f'ablation {i + 1}/{len(chosen)}: {kind}, k={k}: repeat loss {rows[-1]["repeat_loss"]:.3f}')
  return dict(
    scores={kind: value.tolist() for kind, value in scores.items()},
    losses={key: float(value) for key, value in losses.items()},
    in_context_loss_drop=float(losses['first half'] - losses['repeat']),
    ablations=rows,
    random_summary=random_summary(rows),
  )


def random_summary(rows: list[dict]) -> dict[str, dict[str, float]]:
  """Per k (a string key), the random draws' repeat loss: mean, standard deviation, min, max."""
  summary = {}
  for k in sorted({row['k'] for row in rows if row['kind'] == RANDOM}):
    losses = np.array(
      [row['repeat_loss'] for row in rows if row['kind'] == RANDOM and row['k'] == k]
    )
    summary[str(k)] = dict(
      mean=float(losses.mean()),
      std=float(losses.std(ddof=1)) if len(losses) > 1 else 0.0,
      min=float(losses.min()),
      max=float(losses.max()),
      draws=len(losses),
    )
  return summary


def _ablation_plot(axes, result: dict) -> None:
  """The repeat's loss against k: each kind's top heads, the random draws' mean ± std and range."""
  rows = result['ablations']
  for kind, marker in zip(SCORES, 'os^'):
    mine = [row for row in rows if row['kind'] == f'top {kind}']
    axes.plot([r['k'] for r in mine], [r['repeat_loss'] for r in mine], marker=marker, label=kind)
  summary = result['random_summary']
  ks = [int(k) for k in summary]
  stats = [summary[str(k)] for k in ks]
  axes.errorbar(
    ks,
    [s['mean'] for s in stats],
    yerr=[s['std'] for s in stats],
    color='gray',
    marker='D',
    capsize=3,
    label=f'random, mean ± std ({stats[0]["draws"]} draws)',
  )
  axes.fill_between(
    ks,
    [s['min'] for s in stats],
    [s['max'] for s in stats],
    color='gray',
    alpha=0.2,
    label='random, range',
  )
  losses = result['losses']
  axes.axhline(
    losses['repeat'], color='black', linestyle='--', linewidth=1, label='repeat, none zeroed'
  )
  axes.axhline(
    losses['first half'], color='black', linestyle=':', linewidth=1, label='first half, none zeroed'
  )
  if len(ks) > 1:
    axes.set_xscale('log', base=2)
  axes.set_xticks(ks, [str(k) for k in ks])
  axes.set_xlabel('heads zeroed (k)')
  axes.set_ylabel("repeat's next-token loss (nats)")
  axes.set_title('zeroing the top k heads of each score', fontsize=10)
  axes.legend(fontsize=7)
  axes.grid(alpha=0.3)


def save_figure(path: str, result: dict, title: str) -> str:
  """The score grids and the ablation plot in one PNG."""
  grids = {kind: np.asarray(value) for kind, value in result['scores'].items()}
  layers, heads = next(iter(grids.values())).shape
  width, height = max(3.5, 0.4 * heads + 2), max(3.2, 0.2 * layers + 2)
  figure = Figure(figsize=(len(grids) * width + 5.5, height))
  FigureCanvasAgg(figure)
  panels = figure.subplots(1, len(grids) + 1, width_ratios=[width] * len(grids) + [5.5])
  for axes, (kind, grid) in zip(panels, grids.items()):
    figures.draw_head_map(
      figure,
      axes,
      grid,
      title=f'{kind} score',
      label='mean attention weight',
      diverging=False,
      limits=(0.0, 1.0),
    )
  _ablation_plot(panels[-1], result)
  figure.suptitle(title, fontsize=11)
  figure.tight_layout()
  figure.savefig(path, dpi=90)
  return path


def markdown(result: dict) -> str:
  """The score tables (percent), the losses and the ablations as markdown."""
  lines = []
  for kind, grid in result['scores'].items():
    grid = np.asarray(grid)
    lines += [
      f'{kind} score (%)',
      '',
      '| layer | ' + ' | '.join(f'head {h}' for h in range(grid.shape[1])) + ' |',
    ]
    lines.append('|---' * (grid.shape[1] + 1) + '|')
    lines += [
      f'| {i} | ' + ' | '.join(f'{100 * v:.1f}' for v in row) + ' |' for i, row in enumerate(grid)
    ]
    lines.append('')
  losses = result['losses']
  lines.append(
    f'next-token loss: first half {losses["first half"]:.3f}, repeat {losses["repeat"]:.3f} '
    f'(in-context drop {result["in_context_loss_drop"]:.3f})'
  )
  summary = result['random_summary']
  draws = next(iter(summary.values()))['draws']
  lines += [
    '',
    "repeat's loss with k heads zeroed",
    '',
    '| k | '
    + ' | '.join(f'top {kind}' for kind in SCORES)
    + f' | random: mean ± std (min - max), {draws} draws |',
    '|---' * (len(SCORES) + 2) + '|',
  ]
  by = {(row['kind'], row['k']): row['repeat_loss'] for row in result['ablations']}
  for k, stats in summary.items():
    tops = ' | '.join(f'{by[(f"top {kind}", int(k))]:.3f}' for kind in SCORES)
    lines.append(
      f'| {k} | {tops} | {stats["mean"]:.3f} ± {stats["std"]:.3f} '
      f'({stats["min"]:.3f} - {stats["max"]:.3f}) |'
    )
  largest = max(int(k) for k in summary)
  lines.append('')
  for kind in SCORES:
    row = next(r for r in result['ablations'] if r['kind'] == f'top {kind}' and r['k'] == largest)
    heads = ', '.join(f'({l}, {h})' for l, h in row['heads'])
    lines.append(f'top {kind} heads (layer, head), best first: {heads}')
  return '\n'.join(lines)


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--checkpoint', required=True, help='what models.pretrained.read reads')
  parser.add_argument('--out', required=True, help='the folder for heads.json and heads.png')
  parser.add_argument('--sequences', type=int, default=32, help='rows of repeated tokens')
  parser.add_argument('--length', type=int, default=32, help='tokens before the repeat')
  parser.add_argument('--ablate', default='2', help='heads zeroed per kind: k, or k1,k2,..')
  parser.add_argument('--draws', type=int, default=5, help='random draws of k heads per k')
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args(argv)
  sizes = integers(args.ablate, '--ablate', zero=False)
  if args.draws < 1:
    raise ValueError(f'--draws must be at least 1, got {args.draws}.')
  start = time.perf_counter()
  decoder = sources.load_decoder(args.checkpoint)
  model, vocab = decoder.model, decoder.tokenizer.vocab_size
  heads = sum(layer.num_heads for layer in attention_layers(model).values())
  if max(sizes) > heads:
    raise ValueError(f'--ablate={args.ablate} asks for more heads than the model has ({heads}).')
  ids = repeated_tokens(vocab, args.sequences, args.length, args.seed)
  result = study(model, ids, args.length, ablate=sizes, draws=args.draws, seed=args.seed)
  result.update(
    checkpoint=args.checkpoint,
    sequences=args.sequences,
    length=args.length,
    seconds=round(time.perf_counter() - start, 1),
  )
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, 'heads.json'), 'w', encoding='utf-8') as f:
    json.dump(result, f, indent=1)
  name = os.path.basename(os.path.normpath(args.checkpoint))
  title = f'{name}: {args.sequences} rows of {args.length} random tokens, repeated'
  save_figure(os.path.join(args.out, 'heads.png'), result, title)
  print(markdown(result))
  print(f'total: {result["seconds"]} s')
  return result


if __name__ == '__main__':
  failures.run('python -m studies.decoder_heads', main)  # a user's error: one sentence
