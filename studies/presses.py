"""KV-cache compression on long-context retrieval: every press at every ratio, kvpress's protocol.

    python -m studies.presses --checkpoint=SmolLM2-135M-Instruct --lengths=1024 --samples=4 \
        --out=runs/presses_smollm2

For each RULER-style task (`data.retrieval_tasks`) and context length: `--samples` prompts,
framed as kvpress frames them for an instruct model (the context as the user's turn, under the
chat template; the question and its answer prefix after it, not compressed). One prefill per
prompt serves every press (`models.compression`): each press scores the same queries, keys and
values, the cache is evicted to `int(S * (1 - ratio))` positions per head (AdaKV: per layer,
PyramidKV: per layer), the question is read, and the answer is greedy, scored by RULER's
substring match. A task the uncompressed model scores below `--floor` on is dropped (named in
the output): a press cannot be judged where the model fails without one.

The prompts of a length have one context length, and a task's prompts one question length, so
XLA compiles each program once per length and question length, not once per prompt: contexts
shorter than the length's longest end in newline tokens, and questions shorter than their task's
longest start with them (a few dozen at most: the tasks fit their haystacks sentence by sentence,
and their questions differ: with SmolLM2 the needles' are 40-42 tokens, variable tracking's 61).
The presses under one budget rule (the uniform budgets; PyramidKV's per layer; AdaKV's; KVzip's)
answer as one batch at every ratio at once (a row keeping fewer positions ends in empty slots),
each press is scored once for all ratios, and KVzip's repeat block is read once per prompt for
every ratio.

Writes `presses.json` (every answer and score, the times, the dropped tasks, the table's curves),
`summary.json` (all of it but the answers: what a docs page commits beside its table),
`presses.md` (rows: presses; columns: ratios; the mean score over the kept tasks), `presses.png`
(score against ratio, one curve per press) and `kept.png` (which positions each head kept at the
largest ratio, the needle marked) into `--out`, and prints the table.
"""

import argparse
import dataclasses
import functools
import inspect
import json
import os
import time
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from attention import PRESSES, Press, get_press
from data import retrieval_tasks
from models import compression
import sources
from studies import press_prompts, presses_report
import training

MAX_NEW = {'variable_tracking': 30}  # tokens to generate; the needles' 7 digits need fewer
MAX_NEW_DEFAULT = 16


@functools.partial(jax.jit, static_argnums=0, static_argnames='room')
def _prefill(graphdef, state, prompt, *, room):
  return compression.prefill(nnx.merge(graphdef, state), prompt, room)


@functools.partial(jax.jit, static_argnums=0)
def _repeated(graphdef, state, cache, repeat):
  """KVzip's queries and cache after its repeat block: read once per prompt, for every ratio."""
  return compression.repeated(nnx.merge(graphdef, state), cache, repeat)


@functools.partial(
  jax.jit, static_argnums=0, static_argnames=('press', 'ratios', 'context', 'prefix')
)
def _entries(graphdef, state, cache, queries, *, press, ratios, context, prefix):
  """A press's kept entries per layer at each of `ratios` (`cache` and `queries` after the
  repeat block for KVzip, whose scores read the `context` positions after the template's
  `prefix`): one program per press, whatever the ratios."""
  model = nnx.merge(graphdef, state)
  where = dict(context=context, prefix=prefix) if press.repeat else {}
  # Scored once where the score does not read the ratio (every press but StreamingLLM): observed
  # attention's full weights were otherwise formed again at every ratio (11 s a 1k prompt).
  by_ratio = 'ratio' in inspect.signature(press.score).parameters
  scored_at = {ratio: ratio if by_ratio else ratios[0] for ratio in ratios}
  scores = {
    ratio: compression.layer_scores(model, cache, queries, press, ratio, **where)
    for ratio in dict.fromkeys(scored_at.values())
  }
  return [compression.kept_entries(scores[scored_at[r]], press, r) for r in ratios]


@functools.partial(jax.jit, static_argnums=0, static_argnames=('length', 'room', 'max_new', 'eos'))
def _answer(graphdef, state, cache, entries, question, *, length, room, max_new, eos):
  """Greedy answers after `question [1, Q]` on the prompt's cache, whole (`entries` None) or
  evicted to `entries` (per layer `[B, K', M]`: B presses or ratios at once, a row each; a row
  keeping fewer than M ends in empty entries, `_stacked`)."""
  model = nnx.merge(graphdef, state)
  if entries is not None:
    rows = next(kept.shape[0] for kept in entries if kept is not None)
    cache = jax.tree.map(lambda x: jnp.broadcast_to(x, (rows, *x.shape[1:])), cache)
    question = jnp.broadcast_to(question, (rows, question.shape[1]))
    cache = compression.compress(cache, entries, length, room)
  return compression.answer(model, cache, question, max_length=max_new, eos_id=eos)


def _batches(presses: list[Press]) -> list[list[Press]]:
  """The presses in groups whose evicted caches have one shape at a ratio: each budget rule's
  (`attention.presses.Press.budget`)."""
  groups = {}
  for press in presses:
    groups.setdefault(press.budget, []).append(press)
  return list(groups.values())


def _kept_masks(entries: list, length: int, kv_heads: int) -> list[list[str]]:
  """Per pressed layer, which context positions each key/value head kept: a string per head,
  `'1'` kept and `'0'` dropped, position by position (entries index the layer's head-major
  `[K * S]` cache: `attention.evict`)."""
  masks = []
  for kept in entries:
    if kept is not None:
      flat = np.zeros(kv_heads * length, np.uint8)
      flat[np.asarray(kept[0]).ravel()] = 1
      masks.append([''.join(map(str, head)) for head in flat.reshape(kv_heads, length)])
  return masks


def _stacked(entries: list[list]) -> list:
  """Several presses' (or ratios') entries per layer as one batch, one per row; a row keeping
  fewer positions than the layer's most ends in empty entries (-1: `attention.evict`)."""

  def rows(layer):
    most = max(kept.shape[-1] for kept in layer)
    pad = lambda kept: [(0, 0)] * (kept.ndim - 1) + [(0, most - kept.shape[-1])]
    return jnp.concatenate([jnp.pad(kept, pad(kept), constant_values=-1) for kept in layer])

  return [None if layer[0] is None else rows(layer) for layer in zip(*entries)]


@dataclasses.dataclass(frozen=True)
class _Study:
  """What every prompt of a run reads: the model split for the compiled calls, its tokenizer,
  the presses (resolved from `--presses`), the ratios, and the answer's room (any task's)."""

  graphdef: nnx.GraphDef
  state: nnx.State
  tokenizer: Any
  presses: list[Press]
  ratios: list[float]
  longest: int


def _choices(args) -> dict:
  """The flags' presses (resolved), ratios, lengths and tasks, refused in one sentence each
  before the model is read."""
  names = args.presses.split(',') if args.presses else list(PRESSES)
  chosen = dict(
    presses=[get_press(name) for name in names],
    ratios=[float(r) for r in args.ratios.split(',')],
    lengths=[int(n) for n in args.lengths.split(',')],
    tasks=args.tasks.split(',') if args.tasks else list(retrieval_tasks.TASKS),
  )
  for task in chosen['tasks']:
    if task not in retrieval_tasks.TASKS:
      raise SystemExit(
        f'--tasks: no task {task!r}; the tasks are {", ".join(retrieval_tasks.TASKS)}.'
      )
  for press in chosen['presses']:
    compression.check_settings(press, max(chosen['ratios']), min(chosen['lengths']), repeat=True)
  return chosen


def _unpressed(study: _Study, length, task, index, sample, ids) -> tuple:
  """A prompt's prefill (one for every press) and its uncompressed answer: its row, the
  prefill, the question's ids and the settings `_answer` takes."""
  context, question = ids['context'], ids['question']
  prompt = jnp.asarray([context + question[:1]], jnp.int32)
  settings = dict(
    length=len(context),
    room=len(question) + study.longest,
    max_new=MAX_NEW.get(task, MAX_NEW_DEFAULT),
    eos=ids['turn_end'],
  )
  # Room in the full cache for the answer, and for KVzip's repeat block.
  room = max(settings['room'], len(ids['repeat']))
  prefilled = _prefill(study.graphdef, study.state, prompt, room=room)
  question_ids = jnp.asarray([question], jnp.int32)
  full = _answer(study.graphdef, study.state, prefilled[0], None, question_ids, **settings)
  row = dict(task=task, length=length, sample=index, tokens=len(context) + len(question))
  row['answers'] = {'none': study.tokenizer.decode([int(i) for i in full[0] if i])}
  row['correct'] = {'none': retrieval_tasks.is_correct(row['answers']['none'], sample)}
  return row, prefilled, question_ids, settings


def _pressed(study: _Study, row, sample, ids, prefilled, question_ids, settings) -> None:
  """Every press's answers at every ratio on the prompt's prefill, into `row`."""
  graphdef, state, ratios = study.graphdef, study.state, study.ratios
  cache, queries = prefilled
  if any(press.repeat for press in study.presses):
    repeat = jnp.asarray([ids['repeat']], jnp.int32)
    repeat_queries, repeat_cache = _repeated(graphdef, state, cache, repeat)
  kept = {  # a press: its entries at each ratio
    press.name: _entries(
      graphdef,
      state,
      *((repeat_cache, repeat_queries) if press.repeat else (cache, queries)),
      press=press,
      ratios=tuple(ratios),
      context=settings['length'],
      prefix=ids['prefix'],
    )
    for press in study.presses
  }
  for batch in _batches(study.presses):  # one call for every ratio of the group's presses
    pairs = [(at, ratio, press.name) for at, ratio in enumerate(ratios) for press in batch]
    entries = _stacked([kept[name][at] for at, _, name in pairs])
    answers = _answer(graphdef, state, cache, entries, question_ids, **settings)
    for (at, ratio, name), answer in zip(pairs, answers):
      row['answers'][f'{name}@{ratio}'] = study.tokenizer.decode([int(i) for i in answer if i])
      if row['sample'] == 0 and ratio == max(ratios):  # what each head kept: the figure
        kv_heads = cache['layers'][0]['k'].shape[1]
        masks = _kept_masks(kept[name][at], settings['length'], kv_heads)
        row.setdefault('kept', {})[name] = masks
  row['correct'] = {
    key: retrieval_tasks.is_correct(text, sample) for key, text in row['answers'].items()
  }
  if row['sample'] == 0:
    row['needle'] = press_prompts.needle_position(study.tokenizer, sample, ids)


def _task_rows(study: _Study, task: str, length: int, prompts: list, floor: float, say) -> list:
  """A task's rows at a length: every prompt uncompressed, then pressed, unless the model
  scores below `floor` uncompressed (then no press is judged: where it fails without one)."""
  mine = [
    (sample, ids, *_unpressed(study, length, task, i, sample, ids))
    for t, i, sample, ids in prompts
    if t == task
  ]
  score = float(np.mean([row['correct']['none'] for _, _, row, *_ in mine]))
  if score < floor:
    say(f'{task} {length}: uncompressed {100 * score:.0f}% < --floor={floor:g}, dropped')
    return [row for _, _, row, *_ in mine]
  for sample, ids, row, *prefill in mine:
    _pressed(study, row, sample, ids, *prefill)
    say(
      f'{task} {length} #{row["sample"]}: {sum(row["correct"].values())}/'
      f'{len(row["correct"])} right; uncompressed {row["answers"]["none"]!r}'
    )
  return [row for _, _, row, *_ in mine]


def run(args) -> dict:
  """Every press at every ratio on every task and length of the flags (the module docstring)."""
  chosen = _choices(args)
  decoder = sources.load_decoder(args.checkpoint)
  model, tokenizer = decoder.model, decoder.tokenizer
  for press in chosen['presses']:  # what the model refuses, before the first prefill
    compression.check_press(model, press, min(chosen['lengths']))
  graphdef, state = nnx.split(model)
  longest = max(MAX_NEW.get(task, MAX_NEW_DEFAULT) for task in chosen['tasks'])  # one shape
  study = _Study(graphdef, state, tokenizer, chosen['presses'], chosen['ratios'], longest)
  results, started = [], time.perf_counter()
  say = lambda line: print(f'[{time.perf_counter() - started:.0f} s] {line}', flush=True)
  for length in chosen['lengths']:
    prompts = press_prompts.prompts(tokenizer, chosen['tasks'], length, args.samples, args.seed)
    for task in chosen['tasks']:
      results += _task_rows(study, task, length, prompts, args.floor, say)
  return dict(
    checkpoint=args.checkpoint,
    presses=[press.name for press in chosen['presses']],
    ratios=chosen['ratios'],
    results=results,
    seconds=time.perf_counter() - started,
  )


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument(
    '--checkpoint',
    required=True,
    help='a workdir, a short name, a folder or a .gguf (sources.resolve)',
  )
  parser.add_argument('--out', required=True, help='the folder for presses.json, .md, .png')
  parser.add_argument('--lengths', default='1024', help='context lengths in tokens, commas')
  parser.add_argument('--tasks', default='', help='names in data.retrieval_tasks (default all)')
  parser.add_argument('--samples', type=int, default=4, help='prompts per task and length')
  parser.add_argument('--presses', default='', help='names in attention.PRESSES (default all)')
  parser.add_argument('--ratios', default='0.25,0.5,0.75,0.875')
  parser.add_argument('--floor', type=float, default=0.7, help='uncompressed score to keep a task')
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args(argv)
  os.makedirs(args.out, exist_ok=True)
  training.enable_compilation_cache(training.DEFAULT_COMPILATION_CACHE)  # a rerun compiles nothing
  report = run(args)
  text, curves = presses_report.table(report, args.floor)
  report['curves'] = curves  # the table's figures: {press: [share right per ratio]}
  print(text)
  with open(os.path.join(args.out, 'presses.md'), 'w', encoding='utf-8') as f:
    f.write(text + '\n')
  with open(os.path.join(args.out, 'presses.json'), 'w', encoding='utf-8') as f:
    json.dump(report, f, indent=1)
  with open(os.path.join(args.out, 'summary.json'), 'w', encoding='utf-8') as f:
    json.dump(presses_report.summary(report), f, indent=1)
  presses_report.figure(report, curves, os.path.join(args.out, 'presses.png'))
  presses_report.kept_figure(report, os.path.join(args.out, 'kept.png'))
  return report


if __name__ == '__main__':
  main()
