"""Head studies of a pretrained decoder: previous-token, induction and first-token heads, and what
ablating each kind does to in-context learning.

    python -m benchmarks.decoder_heads --checkpoint=FOLDER --out=runs/heads_gpt2

FOLDER is a Hugging Face checkpoint of any architecture `models.pretrained_decoders` converts
(GPT-2, Llama, Mistral, Qwen2: config.json, safetensors, tokenizer.json); nothing is downloaded.
The study runs on repeated random tokens, as in Olsson et al. (2022, "In-context Learning and
Induction Heads"): `--sequences` rows of `--length` tokens drawn uniformly from the vocabulary,
each followed by itself again. For every layer and head, over those rows:

- previous-token: the weight a query gives the token just before it (queries 1 ..);
- induction: the weight a query in the repeat gives the token after the earlier occurrence of
  its own token (query n + t attends to t + 1), the lookup an induction head does;
- first-token: the weight a query gives position 0 (queries 1 ..), the attention sink mass
  (Xiao et al. 2023).

A model that copies in context predicts the repeat far better than the first half: the
in-context loss drop is the first half's next-token loss minus the repeat's. Zeroing the
`--ablate` heads of the highest score of each kind (their outputs before W_O, see
`models.interventions`) and `--ablate` random heads (a control; seed `--seed`) shows which kind
the drop depends on. `--out` receives `heads.json` and `heads.png` (a layers x heads grid per
score, with colour bars); the tables print as markdown.
"""

import argparse
import json
import os

from flax import nnx
import jax
import jax.numpy as jnp
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
import numpy as np

from models import interventions, pretrained
from models.pretrained_decoders import load_decoder
from reports.head_ablation import attention_layers

SCORES = ('previous-token', 'induction', 'first-token')


def repeated_tokens(vocab_size: int, sequences: int, length: int, seed: int) -> np.ndarray:
  """`[sequences, 2 * length]` ids: random tokens, then the same tokens again."""
  first = np.random.default_rng(seed).integers(0, vocab_size, (sequences, length))
  return np.concatenate([first, first], axis=1).astype(np.int32)


def head_scores(weights: np.ndarray, length: int) -> dict[str, np.ndarray]:
  """Each score of the module docstring, `[L, N]`, from attention `[B, L, N, 2n, 2n]` of repeated
  rows of `length` n."""
  t = np.arange(1, 2 * length)
  repeat = np.arange(length, 2 * length - 1)  # queries whose earlier occurrence has a successor
  return {
    'previous-token': weights[..., t, t - 1].mean(axis=(0, -1)),
    'induction': weights[..., repeat, repeat - length + 1].mean(axis=(0, -1)),
    'first-token': weights[..., t, 0].mean(axis=(0, -1)),
  }


def _losses(logits: jax.Array, ids: jax.Array, length: int) -> dict[str, jax.Array]:
  """Mean next-token loss of the first half and of the repeat (predicting tokens n+1 .. 2n-1)."""
  nll = -jnp.take_along_axis(jax.nn.log_softmax(logits[:, :-1]), ids[:, 1:, None], -1)[..., 0]
  return {'first half': nll[:, : length - 1].mean(), 'repeat': nll[:, length:].mean()}


def study(
  model: nnx.Module, ids: np.ndarray, length: int, *, ablate: int = 2, seed: int = 0
) -> dict:
  """Scores per head, the losses, and the repeat's loss with the top `ablate` heads of each
  score (and `ablate` random heads) zeroed. See the module docstring."""
  graphdef, state = nnx.split(model)
  layers = list(attention_layers(model).items())  # [(path, heads)]

  @jax.jit
  def run(state, ids, keep):
    model = nnx.merge(graphdef, state)
    scale = lambda mask, heads: heads * mask[:, None, None].astype(heads.dtype)  # [B, N, T, H]
    edits = {
      f'{path}/heads': lambda h, m=mask: scale(m, h) for (path, _), mask in zip(layers, keep)
    }
    logits, captured = interventions.capture(model, ids, method='token_logits', edits=edits)
    weights = interventions.stack(captured, model.attention_names['self'])  # [B, L, N, T, T]
    return _losses(logits, ids, length), weights

  ones = [jnp.ones((heads,)) for _, heads in layers]
  losses, weights = run(state, jnp.asarray(ids), ones)
  scores = head_scores(np.asarray(weights), length)
  shape = scores['induction'].shape
  rng = np.random.default_rng(seed)
  chosen = {f'top {kind}': np.argsort(-scores[kind], axis=None)[:ablate] for kind in SCORES}
  chosen['random (control)'] = rng.choice(np.prod(shape), ablate, replace=False)
  ablations = {}
  for name, flat in chosen.items():
    keep = np.ones(shape, np.float32)
    keep[np.unravel_index(flat, shape)] = 0.0
    ablated, _ = run(state, jnp.asarray(ids), [jnp.asarray(row) for row in keep])
    heads = [[int(i) for i in np.unravel_index(f, shape)] for f in flat]
    ablations[name] = dict(heads=heads, repeat_loss=float(ablated['repeat']))
  return dict(
    scores={kind: value.tolist() for kind, value in scores.items()},
    losses={key: float(value) for key, value in losses.items()},
    in_context_loss_drop=float(losses['first half'] - losses['repeat']),
    ablations=ablations,
  )


def save_grids(path: str, scores: dict[str, list], title: str) -> str:
  """One annotated layers x heads grid per score (0 to 1, with a colour bar) in one PNG."""
  grids = {kind: np.asarray(value) for kind, value in scores.items()}
  layers, heads = next(iter(grids.values())).shape
  figure = Figure(figsize=(len(grids) * max(3.5, 0.55 * heads + 2), max(2.8, 0.45 * layers + 1.8)))
  FigureCanvasAgg(figure)
  for axes, (kind, grid) in zip(figure.subplots(1, len(grids), squeeze=False)[0], grids.items()):
    image = axes.imshow(grid, cmap='viridis', vmin=0.0, vmax=1.0, aspect='auto')
    axes.set_xticks(range(heads), [str(h) for h in range(heads)], fontsize=8)
    axes.set_yticks(range(layers), [str(i) for i in range(layers)], fontsize=8)
    axes.set_xlabel('head')
    axes.set_ylabel('layer')
    axes.set_title(f'{kind} score', fontsize=9)
    for (i, j), value in np.ndenumerate(grid):
      color = 'black' if value > 0.5 else 'white'
      axes.text(j, i, f'{value:.2f}', ha='center', va='center', fontsize=7, color=color)
    figure.colorbar(image, ax=axes, fraction=0.05, label='mean attention weight')
  figure.suptitle(title, fontsize=10)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  return path


def markdown(result: dict) -> str:
  """The score tables (percent) and the ablations as markdown."""
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
  lines += ['', '| heads zeroed | heads (layer, head) | repeat loss |', '|---|---|---|']
  for name, ablation in result['ablations'].items():
    heads = ', '.join(f'({l}, {h})' for l, h in ablation['heads'])
    lines.append(f'| {name} | {heads} | {ablation["repeat_loss"]:.3f} |')
  return '\n'.join(lines)


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--checkpoint', required=True, help='a GPT-2 / Llama-family folder')
  parser.add_argument('--out', required=True, help='the folder for heads.json and heads.png')
  parser.add_argument('--sequences', type=int, default=32, help='rows of repeated tokens')
  parser.add_argument('--length', type=int, default=32, help='tokens before the repeat')
  parser.add_argument('--ablate', type=int, default=2, help='heads zeroed per kind')
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args(argv)
  checkpoint = pretrained.read(args.checkpoint)
  model, _ = load_decoder(checkpoint)
  vocab = checkpoint.config['vocab_size']
  ids = repeated_tokens(vocab, args.sequences, args.length, args.seed)
  result = study(model, ids, args.length, ablate=args.ablate, seed=args.seed)
  result.update(checkpoint=args.checkpoint, sequences=args.sequences, length=args.length)
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, 'heads.json'), 'w', encoding='utf-8') as f:
    json.dump(result, f, indent=1)
  name = os.path.basename(os.path.normpath(args.checkpoint))
  title = f'{name}: {args.sequences} rows of {args.length} random tokens, repeated'
  save_grids(os.path.join(args.out, 'heads.png'), result['scores'], title)
  print(markdown(result))
  return result


if __name__ == '__main__':
  main()
