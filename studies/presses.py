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

Writes `presses.json` (every answer and score, the times, the dropped tasks), `presses.md` (rows:
presses; columns: ratios; the mean score over the kept tasks), `presses.png` (score against
ratio, one curve per press) and `kept.png` (which positions each head kept at the largest ratio,
the needle marked) into `--out`, and prints the table.
"""

import argparse
import functools
import inspect
import json
import os
import time

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from attention import PRESSES
from data import retrieval_tasks
from data.chat import chat_text
from interpret import loading
from models import compression
from studies import presses_report
import training

BOOK = os.path.join(os.path.dirname(__file__), '..', '..', 'shared', 'data', 'books')
BOOK = os.path.join(BOOK, 'pride_and_prejudice.txt')
MAX_NEW = {'variable_tracking': 30}  # tokens to generate; the needles' 7 digits need fewer
MAX_NEW_DEFAULT = 16


REPEAT = '\n\nRepeat the previous context exactly.'  # KVzip's request, as kvpress words it


def framed(tokenizer, sample: retrieval_tasks.Sample) -> dict:
  """kvpress's framing of a sample: `context` ids (what a press compresses), `question` ids (the
  question closing the user's turn, then the answer prefix), `turn_end` (the id that ends the
  answer: the template's end of turn, else the end of text), and KVzip's `request` (the turn's
  end after it; `padded` appends the context again, without the template's `opening`, `prefix`
  tokens long)."""
  if not getattr(tokenizer, 'chat_template', ''):
    # What the tokenizer puts before any text (Gemma's BOS) opens the context, and is left out
    # of KVzip's repeat block as a template's opening is: a BOS inside a text derails it.
    opening, context = tokenizer.encode(''), tokenizer.encode(sample.context)
    return dict(
      context=context,
      question=tokenizer.encode_pieces(f'{sample.question}\n{sample.answer_prefix}'),
      turn_end=tokenizer.eos_id,
      prefix=len(opening) if context[: len(opening)] == opening else 0,
      opening='',
      request=tokenizer.encode_pieces(REPEAT + '\n'),
    )
  marker = '#' * 16
  opened, suffix = chat_text(tokenizer, sample.context + marker).split(marker)
  opening = opened[: len(opened) - len(sample.context)]
  context, prefix = tokenizer.encode_pieces(opened), len(tokenizer.encode_pieces(opening))
  first = tokenizer.encode_pieces(suffix)[0]
  return dict(
    context=context,
    question=tokenizer.encode_pieces(sample.question + suffix + sample.answer_prefix),
    turn_end=first if first in tokenizer.special_ids else tokenizer.eos_id,
    prefix=prefix,
    opening=opening,
    request=tokenizer.encode_pieces(REPEAT + suffix),
  )


def padded(ids: dict, context: int, question: int, filler: int) -> dict:
  """`framed`'s ids with the context ending in `filler` tokens up to `context` ids and the
  question starting with them up to `question` ids (one shape per length and task: one
  compile), and KVzip's `repeat` block: its request, then the padded context without the
  template's opening."""
  body = ids['context'] + [filler] * (context - len(ids['context']))
  return dict(
    ids,
    context=body,
    question=[filler] * (question - len(ids['question'])) + ids['question'],
    repeat=ids['request'] + body[ids['prefix'] :],
  )


@functools.partial(jax.jit, static_argnums=0, static_argnames='room')
def _prefill(graphdef, state, prompt, *, room):
  return compression.prefill(nnx.merge(graphdef, state), prompt, room)


@functools.partial(jax.jit, static_argnums=0)
def _repeated(graphdef, state, cache, repeat):
  """KVzip's queries and cache after its repeat block: read once per prompt, for every ratio."""
  return compression.repeated(nnx.merge(graphdef, state), cache, repeat)


@functools.partial(
  jax.jit, static_argnums=0, static_argnames=('name', 'ratios', 'context', 'prefix')
)
def _entries(graphdef, state, cache, queries, *, name, ratios, context, prefix):
  """A press's kept entries per layer at each of `ratios` (`cache` and `queries` after the
  repeat block for KVzip, whose scores read the `context` positions after the template's
  `prefix`): one program per press, whatever the ratios."""
  model = nnx.merge(graphdef, state)
  press = PRESSES[name]
  where = dict(context=context, prefix=prefix) if press.repeat else {}
  # Scored once where the score does not read the ratio (every press but StreamingLLM): observed
  # attention's full weights were otherwise formed again at every ratio (11 s a 1k prompt).
  by_ratio = 'ratio' in inspect.signature(press.score).parameters
  scored_at = {ratio: ratio if by_ratio else ratios[0] for ratio in ratios}
  scores = {
    ratio: compression.layer_scores(model, cache, queries, name, ratio, **where)
    for ratio in dict.fromkeys(scored_at.values())
  }
  return [compression.kept_entries(scores[scored_at[r]], name, r) for r in ratios]


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


def _batches(presses: list[str]) -> list[list[str]]:
  """The presses in groups whose evicted caches have one shape at a ratio: each budget rule's
  (`attention.presses.Press.budget`)."""
  groups = {}
  for name in presses:
    groups.setdefault(PRESSES[name].budget, []).append(name)
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


def _needle_position(tokenizer, sample: retrieval_tasks.Sample, ids: dict) -> int | None:
  """The context token where the answer's value first appears (None where it does not)."""
  where = sample.context.find(sample.answers[0])
  if where < 0:
    return None
  if not ids['opening']:  # no template: the tokenizer's own opening (a BOS), then the text
    return ids['prefix'] + len(tokenizer.encode_pieces(sample.context[:where]))
  return len(tokenizer.encode_pieces(ids['opening'] + sample.context[:where]))


def _prompts(tokenizer, tasks: list[str], length: int, args) -> list[tuple]:
  """Every (task, index, sample, ids) of a length, ids padded to the length's context length and
  the task's question length."""
  count = lambda text: len(tokenizer.encode(text))
  prompts = [
    (task, index, sample, framed(tokenizer, sample))
    for task in tasks
    for index, sample in enumerate(
      retrieval_tasks.samples(task, count, length, args.samples, args.seed, BOOK)
    )
  ]
  context = max(len(ids['context']) for *_, ids in prompts)
  question = {}  # per task: a long question (variable tracking's) does not pad the others'
  for task, _, _, ids in prompts:
    question[task] = max(question.get(task, 0), len(ids['question']))
  newline = tokenizer.encode_pieces('\n')  # none in a word-level vocabulary: its last word
  return [
    (t, i, sample, padded(ids, context, question[t], (newline or ids['context'])[-1]))
    for t, i, sample, ids in prompts
  ]


def _stacked(entries: list[list]) -> list:
  """Several presses' (or ratios') entries per layer as one batch, one per row; a row keeping
  fewer positions than the layer's most ends in empty entries (-1: `attention.evict`)."""

  def rows(layer):
    most = max(kept.shape[-1] for kept in layer)
    pad = lambda kept: [(0, 0)] * (kept.ndim - 1) + [(0, most - kept.shape[-1])]
    return jnp.concatenate([jnp.pad(kept, pad(kept), constant_values=-1) for kept in layer])

  return [None if layer[0] is None else rows(layer) for layer in zip(*entries)]


def run(args) -> dict:
  decoder = loading.load_decoder(args.checkpoint)
  model, tokenizer = decoder.model, decoder.tokenizer
  graphdef, state = nnx.split(model)
  kv_heads = model.layers[0].self_attn.num_kv_heads
  presses = args.presses.split(',') if args.presses else list(PRESSES)
  ratios = [float(r) for r in args.ratios.split(',')]
  lengths = [int(n) for n in args.lengths.split(',')]
  tasks = args.tasks.split(',') if args.tasks else list(retrieval_tasks.TASKS)
  for task in tasks:
    if task not in retrieval_tasks.TASKS:
      raise SystemExit(
        f'--tasks: no task {task!r}; the tasks are {", ".join(retrieval_tasks.TASKS)}.'
      )
  for name in presses:  # every refusal before the first prefill
    compression.check_press(model, name, max(ratios), min(lengths), repeat=True)
  longest = max(MAX_NEW.get(task, MAX_NEW_DEFAULT) for task in tasks)  # one shape: any task's
  results, started = [], time.perf_counter()

  def read(length, task, index, sample, ids):
    """A prompt's prefill (one for every press) and its uncompressed answer."""
    context, question = ids['context'], ids['question']
    prompt = jnp.asarray([context + question[:1]], jnp.int32)
    settings = dict(
      length=len(context),
      room=len(question) + longest,
      max_new=MAX_NEW.get(task, MAX_NEW_DEFAULT),
      eos=ids['turn_end'],
    )
    # Room in the full cache for the answer, and for KVzip's repeat block.
    prefilled = _prefill(graphdef, state, prompt, room=max(settings['room'], len(ids['repeat'])))
    question_ids = jnp.asarray([question], jnp.int32)
    full = _answer(graphdef, state, prefilled[0], None, question_ids, **settings)
    row = dict(task=task, length=length, sample=index, tokens=len(context) + len(question))
    row['answers'] = {'none': tokenizer.decode([int(i) for i in full[0] if i])}
    row['correct'] = {'none': retrieval_tasks.is_correct(row['answers']['none'], sample)}
    return row, prefilled, question_ids, settings

  def press(row, sample, ids, prefilled, question_ids, settings):
    """Every press's answers at every ratio on the prompt's prefill, into `row`."""
    cache, queries = prefilled
    if any(PRESSES[name].repeat for name in presses):
      repeat_queries, repeat_cache = _repeated(
        graphdef, state, cache, jnp.asarray([ids['repeat']], jnp.int32)
      )
    kept = {  # a press: its entries at each ratio
      name: _entries(
        graphdef,
        state,
        *((repeat_cache, repeat_queries) if PRESSES[name].repeat else (cache, queries)),
        name=name,
        ratios=tuple(ratios),
        context=settings['length'],
        prefix=ids['prefix'],
      )
      for name in presses
    }
    for batch in _batches(presses):  # one call for every ratio of the group's presses
      pairs = [(at, ratio, name) for at, ratio in enumerate(ratios) for name in batch]
      entries = _stacked([kept[name][at] for at, _, name in pairs])
      answers = _answer(graphdef, state, cache, entries, question_ids, **settings)
      for (at, ratio, name), answer in zip(pairs, answers):
        row['answers'][f'{name}@{ratio}'] = tokenizer.decode([int(i) for i in answer if i])
        if row['sample'] == 0 and ratio == max(ratios):  # what each head kept: the figure
          masks = _kept_masks(kept[name][at], settings['length'], kv_heads)
          row.setdefault('kept', {})[name] = masks
    row['correct'] = {
      key: retrieval_tasks.is_correct(text, sample) for key, text in row['answers'].items()
    }
    if row['sample'] == 0:
      row['needle'] = _needle_position(tokenizer, sample, ids)

  for length in lengths:
    prompts = _prompts(tokenizer, tasks, length, args)
    for task in tasks:
      mine = [
        (sample, ids, *read(length, task, i, sample, ids))
        for t, i, sample, ids in prompts
        if t == task
      ]
      score = float(np.mean([row['correct']['none'] for _, _, row, *_ in mine]))
      if score < args.floor:  # no press is judged where the model fails without one
        results += [row for _, _, row, *_ in mine]
        print(
          f'[{time.perf_counter() - started:.0f} s] {task} {length}: uncompressed '
          f'{100 * score:.0f}% < --floor={args.floor:g}, dropped',
          flush=True,
        )
        continue
      for sample, ids, row, *prefill in mine:
        press(row, sample, ids, *prefill)
        results.append(row)
        print(
          f'[{time.perf_counter() - started:.0f} s] {task} {length} #{row["sample"]}: '
          f'{sum(row["correct"].values())}/{len(row["correct"])} right; '
          f'uncompressed {row["answers"]["none"]!r}',
          flush=True,
        )
  return dict(
    checkpoint=args.checkpoint,
    presses=presses,
    ratios=ratios,
    results=results,
    seconds=time.perf_counter() - started,
  )


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--checkpoint', required=True, help='what interpret.loading reads')
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
  print(text)
  with open(os.path.join(args.out, 'presses.md'), 'w', encoding='utf-8') as f:
    f.write(text + '\n')
  with open(os.path.join(args.out, 'presses.json'), 'w', encoding='utf-8') as f:
    json.dump(report, f, indent=1)
  presses_report.figure(report, curves, os.path.join(args.out, 'presses.png'))
  presses_report.kept_figure(report, os.path.join(args.out, 'kept.png'))
  return report


if __name__ == '__main__':
  main()
