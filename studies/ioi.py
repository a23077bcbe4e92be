"""The indirect object identification circuit (Wang et al. 2022, "Interpretability in the
Wild") looked for in a pretrained decoder, on the paper's templates.

    python -m studies.ioi --checkpoint=SmolLM2-135M-Instruct --out=runs/ioi_smollm2

Prompts (`studies.ioi_prompts`): 16 templates (the 15 of the paper's code and its running
example), each in both name orders, the
indirect object IO first (ABBA: "When Mary and John went to the store, John gave a drink to") or
second (BABA: "When John and Mary ..."); the subject S comes twice (S1, S2). A *draw* gives every
template two names, a place and an object, in both orders: `--draws` draws make 32 x draws
prompts. Names, places and objects are the paper's lists, kept where they are one token after a
space, so the prompts of a template share one length; a batch is the prompts of one length
(nothing is padded). Each prompt has an ABC twin, its IO, S1 and S2 replaced by three other
names. The metric is the logit difference IO - S after the prompt; a head's effect is a fraction
of it.

Heads are chosen on the even draws (the selection half) and tested on the odd ones (held out):

1. Selection half: activation patching of every head (its output from the ABC twin), direct
   logit attribution, attention from the last position (END) to IO, S1, S2 and from S2 to S1
   and S1 + 1; then path patching (`interpret.patching`) from the heads costing at least `COST`
   into the name movers' queries (Wang et al.'s Figure 4), and from the heads attending S2 -> S1
   or S1 + 1 into the S-inhibition heads' values (how the paper found duplicate-token and
   induction heads). `classes` states the rules, with the thresholds below.
2. Held-out half: the circuit (every classed head), the `--top` heads of the largest patching
   cost, `--random` sets of as many other heads, and each chosen head alone, mean-ablated: a
   head's output replaced by its mean over `--abc` ABC sentences of the prompt's template,
   position by position (the paper's mean over the ABC distribution).

Prints its tables (markdown), writes them and every number into `ioi.json`, and the maps into
`ioi.png`, in `--out`.
"""

import argparse
import json
import os
import time

import jax.numpy as jnp
import numpy as np

from interpret import attribution, effects, patching
from interpret import heads as heads_lib
from models import interventions
import sources
from studies import ioi_prompts, ioi_report
from training import failures

# The class rules' thresholds (fractions of the clean IO - S; weights). DIRECT, COST, ATTENDS and
# INDIRECT were in the study's first version; the name movers' END -> IO >= ATTENDS condition came
# after its first run, PATH with the results (docs/llm_studies.md, indirect object identification).
DIRECT = 0.10  # a name mover's direct effect on IO - S, at least
COST = 0.05  # a head costs IO - S when patched from the ABC twin: at least this much
PATH = 0.05  # a path carries IO - S when path patching it costs at least this much
ATTENDS = 0.3  # an attention weight this large on one token counts as attending to it
INDIRECT = 0.5  # an S-inhibition head's |direct effect| stays under this share of its cost
Head = tuple[int, int]


def batches(items: list[dict]) -> list[list[int]]:
  """Indices of `items` grouped by token length: one batch per length, nothing padded."""
  lengths = sorted({len(item['ids']) for item in items})
  return [[i for i, item in enumerate(items) if len(item['ids']) == n] for n in lengths]


def batch(items: list[dict], rows: list[int]) -> dict:
  """The arrays of `items[rows]` (one length): `ids`, `abc` `[B, T]`, `io`, `s` `[B]`, `metric`."""
  out = {k: jnp.asarray(np.stack([items[i][k] for i in rows])) for k in ('ids', 'abc', 'io', 's')}
  out['metric'] = effects.Metric('logit_diff', out['io'], out['s'])
  return out


def pooled(items: list[dict], measure, say, what: str) -> tuple:
  """`measure(batch)` (a tuple of numbers or arrays) over the batches of `items`, averaged
  weighted by their prompts; a line to `say` per batch."""
  parts, groups = [], batches(items)
  for k, rows in enumerate(groups):
    say(f'{what}: batch {k + 1}/{len(groups)}, {len(rows)} prompts of {len(items[rows[0]]["ids"])}')
    parts.append((len(rows), measure(batch(items, rows))))
  weigh = lambda k: sum(n * np.asarray(part[k]) for n, part in parts) / len(items)
  return tuple(weigh(k) for k in range(len(parts[0][1])))


def readings(model, items: list[dict]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
  """Each prompt's IO - S `[P]`, and its heads' attention `{name: [P, L, N]}` from END to IO,
  S1, S2 and from S2 to S1 and to S1 + 1."""
  diffs, scores = np.zeros(len(items)), {}
  for rows in batches(items):
    b = batch(items, rows)
    logits, captured = interventions.capture(model, b['ids'], method='token_logits')
    diffs[rows] = np.asarray(b['metric'](logits, b['ids']))
    weights = np.asarray(interventions.stack(captured, model.attention_names['self']))
    io, s1, s2 = np.asarray([items[i]['positions'] for i in rows]).T  # [B] each
    end, r = np.full_like(io, weights.shape[-1] - 1), np.arange(len(rows))
    pairs = dict(zip(['END->IO', 'END->S1', 'END->S2', 'S2->S1', 'S2->S1+1'], [
      (end, io), (end, s1), (end, s2), (s2, s1), (s2, s1 + 1)]))  # fmt: skip
    for name, (query, key) in pairs.items():
      scores.setdefault(name, np.zeros((len(items), *weights.shape[1:3])))
      scores[name][rows] = weights[r, :, :, query, key]  # [B, L, N]
  return diffs, scores


def classes(maps: dict[str, np.ndarray]) -> dict[str, list[Head]]:
  """`{class: [(layer, head), ...]}` by the rules (fractions of the clean IO - S: `patching` and
  `direct`; path patching `via queries` and `via values`, NaN where not measured; the mean
  attention maps of `readings`):

  - name mover: direct >= DIRECT, END->IO >= ATTENDS and above END->S1 and END->S2;
  - negative name mover: direct <= -DIRECT, the same attention;
  - S-inhibition: cost (-patching) >= COST, |direct| < INDIRECT x cost, END->S2 >= ATTENDS,
    and path patching it into the name movers' queries costs >= PATH;
  - duplicate token: S2->S1 >= ATTENDS; induction: S2->S1+1 >= ATTENDS; each also costing >= PATH
    by path patching into the S-inhibition heads' values.
  """
  direct, cost = maps['direct'], -maps['patching']
  nan = np.full(direct.shape, np.nan)
  via_queries, via_values = -maps.get('via queries', nan), -maps.get('via values', nan)
  to_io = (maps['END->IO'] >= ATTENDS) & (
    maps['END->IO'] > np.maximum(maps['END->S1'], maps['END->S2'])
  )
  rules = {
    'name mover': (direct >= DIRECT) & to_io,
    'negative name mover': (direct <= -DIRECT) & to_io,
    'S-inhibition': (cost >= COST)
    & (np.abs(direct) < INDIRECT * cost)
    & (maps['END->S2'] >= ATTENDS)
    & (via_queries >= PATH),
    'duplicate token': (maps['S2->S1'] >= ATTENDS) & (via_values >= PATH),
    'induction': (maps['S2->S1+1'] >= ATTENDS) & (via_values >= PATH),
  }
  return {name: [(int(l), int(h)) for l, h in np.argwhere(rule)] for name, rule in rules.items()}


def path(model, items, receivers, into, senders, shape, say) -> np.ndarray:
  """`shape` `[L, N]`: path patching of each of `senders` into the `into` inputs of `receivers`,
  over `items`, as a fraction of their clean IO - S (NaN where not a sender)."""
  if not senders:
    say(f'path patching into {into[0]}: no receivers, or no senders before them')
    return np.full(shape, np.nan)
  measure = lambda b: patching.path_patching(
    model, b['ids'], b['abc'], b['metric'], receivers, into=into, senders=senders, progress=say
  )
  clean, effect = pooled(items, measure, say, f'path patching into {into[0]}')
  return effect / clean


def choose(model, items: list[dict], scores: dict, *, top: int, say) -> dict:
  """On the selection half `items` (their mean attention `scores`): the maps `classes` reads,
  the classes, and the `top` heads of the largest patching cost."""
  sweep = lambda b: effects.head_effects(
    model, b['ids'], b['metric'], ablation='patch', other=b['abc'], progress=say
  )
  clean, patched = pooled(items, sweep, say, 'activation patching of every head')

  def direct(b):
    rows = jnp.arange(len(b['io']))
    return attribution.head_attributions(
      model, b['ids'], lambda logits: logits[..., rows, b['io']] - logits[..., rows, b['s']]
    )

  (dla,) = pooled(items, lambda b: (direct(b),), say, 'direct logit attribution')
  maps = dict(patching=patched / clean, direct=dla / clean, **scores)
  heads = list(np.ndindex(patched.shape))
  before = lambda receivers: [h for h in heads if receivers and h[0] < min(l for l, _ in receivers)]
  movers = classes(maps)['name mover']
  costly = [h for h in before(movers) if -maps['patching'][h] >= COST]
  maps['via queries'] = path(model, items, movers, ('queries',), costly, patched.shape, say)
  inhibitors = classes(maps)['S-inhibition']
  attends = (maps['S2->S1'] >= ATTENDS) | (maps['S2->S1+1'] >= ATTENDS)
  senders = [h for h in before(inhibitors) if attends[h]]
  maps['via values'] = path(model, items, inhibitors, ('values',), senders, patched.shape, say)
  order = np.argsort(maps['patching'], axis=None)[:top]  # the most negative: the largest cost
  return dict(
    maps=maps,
    classes=classes(maps),
    top=[tuple(int(i) for i in np.unravel_index(k, patched.shape)) for k in order],
  )


def ablated(model, items, reference, head_sets: list[list[Head]]) -> np.ndarray:
  """`[1 + S, P]`: each prompt's IO - S with no head replaced (row 0) and with each set of
  `head_sets` mean-ablated together, a head's output replaced position by position by its mean
  over the ABC sentences of the prompt's template (`reference`), N sets a call of the engine
  (`interpret.heads.measure_rows`)."""
  paths, n = heads_lib.grid(model)
  mean_of = lambda ids: effects.replacements(model, ids, 'mean', ids, per_position=True)
  means = {t: mean_of(jnp.asarray(ids)) for t, ids in reference.items()}  # per layer [1, N, T, H]
  out = np.zeros((1 + len(head_sets), len(items)))
  for rows in batches(items):
    b = batch(items, rows)
    replaced = [
      jnp.concatenate([means[items[i]['template']][layer] for i in rows])  # [B, N, T, H]
      for layer in range(len(paths))
    ]
    run = effects.metric_program(model, b['metric'])
    measure = lambda masks: run(b['ids'], masks, replaced)
    out[:, rows] = heads_lib.measure_rows([(), *head_sets], (len(paths), n), measure)
  return out


def split(items: list[dict]) -> dict[str, list[int]]:
  """Indices of the selection half (even draws) and of the held-out half (odd draws)."""
  even = [i for i, item in enumerate(items) if item['draw'] % 2 == 0]
  return {'selection': even, 'held-out': [i for i in range(len(items)) if i not in even]}


def study(model, data: dict, *, top: int, random_sets: int, seed: int, say) -> dict:
  """The numbers of the module docstring for `ioi_prompts.prompts`' `data`, JSON-ready."""
  items, part = data['items'], split(data['items'])
  pick = lambda rows: [items[i] for i in rows]
  say(f'IO - S and attention of all {len(items)} prompts')
  diffs, scores = readings(model, items)
  selection = {name: values[part['selection']].mean(0) for name, values in scores.items()}
  chosen = choose(model, pick(part['selection']), selection, top=top, say=say)
  circuit = sorted({head for heads in chosen['classes'].values() for head in heads})
  compared = {'circuit (every classed head)': circuit, f'top {top} by patching cost': chosen['top']}
  compared = {name: heads for name, heads in compared.items() if heads}
  rng, everyone = np.random.default_rng(seed), list(np.ndindex(chosen['maps']['patching'].shape))
  draw = lambda others, k: [others[i] for i in rng.choice(len(others), k, replace=False)]
  others = lambda heads: [h for h in everyone if h not in heads]  # random sets avoid the set
  randoms = {n: [draw(others(h), len(h)) for _ in range(random_sets)] for n, h in compared.items()}
  alone = sorted({head for heads in compared.values() for head in heads})
  sets = [*compared.values(), *sum(randoms.values(), []), *[[head] for head in alone]]
  say(f'held-out half: mean-ablating {len(sets)} sets of heads')
  values = ablated(model, pick(part['held-out']), data['reference'], sets)  # row 0: clean
  mean = lambda row: float(values[row].mean())
  error = lambda row: float(values[row].std(ddof=1) / len(values[row]) ** 0.5)
  ablation = {'none': dict(heads=[], held_out=[mean(0), error(0)], random=[])}
  for j, (name, heads) in enumerate(compared.items()):
    first = 1 + len(compared) + j * random_sets
    ablation[name] = dict(
      heads=heads,
      held_out=[mean(1 + j), error(1 + j)],
      random=[mean(row) for row in range(first, first + random_sets)],
      random_heads=randoms[name],
    )
  first = 1 + len(compared) * (1 + random_sets)
  return dict(
    thresholds=dict(DIRECT=DIRECT, COST=COST, PATH=PATH, ATTENDS=ATTENDS, INDIRECT=INDIRECT),
    templates=list(ioi_prompts.TEMPLATES),
    prompts=[
      {k: item[k] for k in ('text', 'draw', 'template', 'order')} | dict(logit_diff=float(diffs[i]))
      for i, item in enumerate(items)
    ],
    selection=dict(
      maps={name: values.tolist() for name, values in chosen['maps'].items()},
      classes=chosen['classes'],
      top=chosen['top'],
    ),
    held_out_attention={k: v[part['held-out']].mean(0).tolist() for k, v in scores.items()},
    ablation=ablation,
    alone={'%d.%d' % head: mean(first + k) / mean(0) - 1 for k, head in enumerate(alone)},
  )


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--checkpoint', required=True, help='what models.pretrained.read reads')
  parser.add_argument('--out', required=True, help='the folder for ioi.json and ioi.png')
  parser.add_argument('--draws', type=int, default=2, help='draws of names, even (2 halves)')
  parser.add_argument('--top', type=int, default=8, help='heads of the largest patching cost')
  parser.add_argument('--random', type=int, default=5, help='random sets per ablated set')
  parser.add_argument('--abc', type=int, default=16, help='ABC sentences per template (means)')
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args(argv)
  if args.draws < 2 or args.draws % 2 or min(args.top, args.random, args.abc) < 1:
    raise ValueError('--draws must be even and at least 2; --top, --random, --abc at least 1.')
  started = time.perf_counter()
  say = lambda line: print(f'[{time.perf_counter() - started:4.0f} s] {line}', flush=True)
  decoder = sources.load_decoder(args.checkpoint, log=say)
  data = ioi_prompts.prompts(decoder.tokenizer, args.draws, args.seed, args.abc)
  result = study(
    decoder.model, data, top=args.top, random_sets=args.random, seed=args.seed, say=say
  )
  result.update(checkpoint=args.checkpoint, draws=args.draws, seed=args.seed)
  result['tables'] = ioi_report.tables(result)
  result['seconds'] = round(time.perf_counter() - started, 1)
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, 'ioi.json'), 'w', encoding='utf-8') as f:
    json.dump(result, f, indent=1)
  name = f'{decoder.name}: indirect object identification'
  ioi_report.save_figure(os.path.join(args.out, 'ioi.png'), result, name)
  done = f'Wrote {args.out}/ioi.json and ioi.png ({result["seconds"]:.0f} s).'
  print('\n\n'.join(['', *result['tables'].values(), done]))
  return result


if __name__ == '__main__':
  failures.run('python -m studies.ioi', main)  # a user's error: one sentence
