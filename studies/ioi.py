"""The indirect object identification circuit (Wang et al. 2022, "Interpretability in the
Wild") looked for in a pretrained decoder.

    python -m studies.ioi --checkpoint=SmolLM2-135M-Instruct --out=runs/ioi_smollm2

`--prompts` sentences "When Mary and John went to the store, John gave a drink to" from two
templates (the indirect object first, ABBA, or second, BABA), random single-token names, places
and objects; the model should continue with the indirect object (IO, Mary), not the subject
(S, John). The metric is the logit difference IO - S at the last position. Each prompt has a
corrupted twin with the three names replaced by three others (the paper's ABC distribution), of
the same tokens' length. Then, with `interpret`:

- per-head activation patching: each head's output taken from the corrupted twin, the change in
  the logit difference, as a fraction of the clean one (-1: the head carries all of it);
- per-head direct logit attribution of the logit difference;
- each head's attention from the last position to IO, S1 and S2, from S2 to S1 (duplicate
  token) and to the token after S1 (induction);
- the heads classed where the evidence supports a class: name movers (a positive direct effect,
  attending to IO over S), negative name movers (a negative one, the same attention),
  S-inhibition (patching costs, little direct effect, attending to S2), duplicate-token and
  induction heads (S2 to S1, S2 to S1 + 1);
- the `--top` heads of the largest patching effect mean-ablated together (their mean output over
  the corrupted prompts), against as many random heads over `--draws` draws.

Writes `ioi.json` and `ioi.png` (patching and attribution maps, classes marked) into `--out`
and prints the tables.
"""

import argparse
import json
import os
import time

import jax.numpy as jnp
import numpy as np

from interpret import attribution, effects, figures, loading
from models import interventions
from tasks import pictures
from training import failures

NAMES = (
  'Mary John Tom James Sarah Anna Paul Mark Lisa David Emma Kate Peter Jack Alice Bob Sam Ben '
  'Luke Jane Rose Adam Eric Amy Dan Max Ryan Laura Mike Kevin Steve Chris Michael Daniel Andrew '
  'George Henry Lucy Grace'
).split()
PLACES = 'store park school garden office beach shop house'.split()
OBJECTS = 'drink book ring ball bone computer snack letter gift'.split()
TEMPLATE = 'When {0} and {1} went to the {place}, {2} gave a {thing} to'
CLASS_MARKS = {
  'name mover': 'N',
  'negative name mover': '-',
  'S-inhibition': 'S',
  'duplicate token': 'D',
  'induction': 'I',
}
ATTENDS = 0.3  # a weight this large on one token counts as attending to it


def prompts(tokenizer, count: int, seed: int) -> dict:
  """Clean and corrupted ids `[count, T]`, the IO and S token ids and their positions."""
  single = [n for n in NAMES if len(tokenizer.encode_pieces(' ' + n)) == 1]
  rng = np.random.default_rng(seed)
  clean, corrupted, io, s, where = [], [], [], [], []
  for i in range(count):
    a, b, c, d, e = rng.choice(single, 5, replace=False)
    place, thing = rng.choice(PLACES), rng.choice(OBJECTS)
    first, second = (a, b) if i % 2 == 0 else (b, a)  # ABBA: IO first; BABA: IO second
    clean.append(TEMPLATE.format(first, second, b, place=place, thing=thing))
    corrupted.append(TEMPLATE.format(c, d, e, place=place, thing=thing))
    io.append(tokenizer.encode_pieces(' ' + a)[0])
    s.append(tokenizer.encode_pieces(' ' + b)[0])
  ids = np.asarray([tokenizer.encode(text) for text in clean], np.int32)
  other = np.asarray([tokenizer.encode(text) for text in corrupted], np.int32)
  for row, (io_id, s_id) in zip(ids, zip(io, s)):
    s_positions = np.flatnonzero(row == s_id)
    where.append((int(np.flatnonzero(row == io_id)[0]), int(s_positions[0]), int(s_positions[1])))
  return dict(
    texts=clean,
    ids=ids,
    corrupted=other,
    io=np.asarray(io),
    s=np.asarray(s),
    positions=np.asarray(where),  # [count, 3]: IO, S1, S2
  )


def attention_scores(model, data: dict) -> dict[str, np.ndarray]:
  """Each head's mean attention `[L, N]` from the last position to IO, S1, S2, and from S2 to
  S1 and to the token after S1."""
  ids = jnp.asarray(data['ids'])
  weights = np.asarray(interventions.attention(model, 'self', ids, method='token_logits'))
  rows = np.arange(len(data['ids']))
  io, s1, s2 = data['positions'].T
  last = np.full_like(io, weights.shape[-1] - 1)
  at = lambda query, key: weights[rows, :, :, query, key].mean(0)  # [L, N]
  return dict(
    end_to_io=at(last, io),
    end_to_s1=at(last, s1),
    end_to_s2=at(last, s2),
    s2_to_s1=at(s2, s1),
    s2_to_after_s1=at(s2, s1 + 1),
  )


def classes(patched: np.ndarray, dla: np.ndarray, scores: dict, clean: float) -> dict:
  """`{class: [(layer, head), ...]}` by the criteria of the module docstring, in fractions of
  the clean logit difference: a direct effect of at least 10% of it, a patching cost of at
  least 5%."""
  direct, cost = dla / clean, -patched / clean
  to_io = scores['end_to_io'] > np.maximum(scores['end_to_s1'], scores['end_to_s2'])
  out = {name: [] for name in CLASS_MARKS}
  for layer, head in np.ndindex(dla.shape):
    key = (int(layer), int(head))
    if direct[key] >= 0.1 and to_io[key]:
      out['name mover'].append(key)
    elif direct[key] <= -0.1 and to_io[key]:
      out['negative name mover'].append(key)
    elif (
      cost[key] >= 0.05
      and abs(direct[key]) < 0.5 * cost[key]
      and scores['end_to_s2'][key] >= ATTENDS
    ):
      out['S-inhibition'].append(key)
    if scores['s2_to_s1'][key] >= ATTENDS:
      out['duplicate token'].append(key)
    if scores['s2_to_after_s1'][key] >= ATTENDS:
      out['induction'].append(key)
  return out


def study(model, data: dict, *, top: int, draws: int, seed: int) -> dict:
  """The numbers of the module docstring for the prompts `data` (`prompts`)."""
  metric = effects.Metric('logit_diff', jnp.asarray(data['io']), jnp.asarray(data['s']))
  ids, corrupted = jnp.asarray(data['ids']), jnp.asarray(data['corrupted'])
  per_prompt = np.asarray(metric(model.token_logits(ids), ids))
  clean, patched = effects.head_effects(model, ids, metric, ablation='patch', other=corrupted)
  rows = jnp.arange(len(data['ids']))

  def direction(logits):  # [..., B, V] -> [..., B]
    return logits[..., rows, data['io']] - logits[..., rows, data['s']]

  dla = attribution.head_attributions(model, ids, direction)
  scores = attention_scores(model, data)
  found = classes(patched, dla, scores, clean)
  # The most negative fractions: the heads whose patching takes the most of the difference.
  order = np.argsort(patched / clean, axis=None)[:top]
  circuit = [tuple(int(i) for i in np.unravel_index(k, patched.shape)) for k in order]
  mean_ablated = lambda heads: effects.ablated_metric(
    model, ids, metric, heads, ablation='mean', other=corrupted
  )
  rng = np.random.default_rng(seed)
  everyone = list(np.ndindex(patched.shape))
  random_values = [
    mean_ablated([tuple(map(int, everyone[i])) for i in rng.choice(len(everyone), top, False)])
    for _ in range(draws)
  ]
  return dict(
    clean_logit_diff=clean,
    io_preferred=float(np.mean(per_prompt > 0)),
    patched_fraction=(patched / clean).tolist(),
    direct_logit_attribution=dla.tolist(),
    attention={name: value.tolist() for name, value in scores.items()},
    classes={name: [list(h) for h in heads] for name, heads in found.items()},
    top_heads=[list(h) for h in circuit],
    top_ablated=mean_ablated(circuit),
    random_ablated=dict(
      mean=float(np.mean(random_values)),
      std=float(np.std(random_values)),
      values=[float(v) for v in random_values],
    ),
  )


def save_figure(path: str, result: dict, title: str) -> None:
  """The patching and attribution maps, each head's class marked."""
  patched = np.asarray(result['patched_fraction'])
  dla = np.asarray(result['direct_logit_attribution'])
  layers, heads = patched.shape
  figure = pictures.new_figure(figsize=(4.0 + 0.9 * heads, 1.8 + 0.24 * layers), dpi=120)
  marks = {
    (layer, head): CLASS_MARKS[cls]
    for cls, heads_of in result['classes'].items()
    for layer, head in heads_of
  }
  panels = [
    ('patched from the corrupted prompt:\nchange / clean logit difference', patched),
    ('direct logit attribution\n(logit IO - logit S)', dla),
  ]
  for index, (name, values) in enumerate(panels):
    axes = figure.add_subplot(1, 2, index + 1)
    figures.draw_head_map(figure, axes, values, title=name, label='', marks=marks)
  legend = ', '.join(f'{mark} {name}' for name, mark in CLASS_MARKS.items())
  figure.suptitle(f'{title}\n{legend}', fontsize=9)
  figure.tight_layout()
  figure.savefig(path)


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--checkpoint', required=True, help='what models.pretrained.read reads')
  parser.add_argument('--out', required=True, help='the folder for ioi.json and ioi.png')
  parser.add_argument('--prompts', type=int, default=16, help='sentences (half of each order)')
  parser.add_argument('--top', type=int, default=8, help='heads of the circuit ablated')
  parser.add_argument('--draws', type=int, default=5, help='random sets of as many heads')
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args(argv)
  if args.prompts < 2 or args.top < 1 or args.draws < 1:
    raise ValueError('--prompts must be at least 2, --top and --draws at least 1.')
  started = time.perf_counter()
  decoder = loading.load_decoder(args.checkpoint)
  model, tokenizer = decoder.model, decoder.tokenizer
  data = prompts(tokenizer, args.prompts, args.seed)
  result = study(model, data, top=args.top, draws=args.draws, seed=args.seed)
  result.update(
    checkpoint=args.checkpoint,
    prompts=data['texts'],
    seconds=round(time.perf_counter() - started, 1),
  )
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, 'ioi.json'), 'w', encoding='utf-8') as f:
    json.dump(result, f, indent=1)
  name = os.path.basename(os.path.normpath(args.checkpoint))
  save_figure(os.path.join(args.out, 'ioi.png'), result, f'{name}: indirect object identification')
  print(
    f'Clean logit difference IO - S: {result["clean_logit_diff"]:.3f} '
    f'(IO preferred in {result["io_preferred"]:.0%} of {args.prompts} prompts).'
  )
  for cls, heads in result['classes'].items():
    print(f'  {cls}: {", ".join(f"{l}.{h}" for l, h in heads) or "none"}')
  random = result['random_ablated']
  print(
    f'Mean-ablating the top {args.top} patched heads: logit difference '
    f'{result["top_ablated"]:.3f}; '
    f'{args.top} random heads: {random["mean"]:.3f} ± {random["std"]:.3f} ({args.draws} draws).'
  )
  print(f'Wrote {args.out}/ioi.json and ioi.png ({result["seconds"]:.0f} s).')
  return result


if __name__ == '__main__':
  failures.run('python -m studies.ioi', main)  # a user's error: one sentence
