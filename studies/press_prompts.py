"""The prompts of studies/presses.py, framed as kvpress frames them for an instruct model: the
context as the user's turn under the chat template (what a press compresses), the question and
its answer prefix after it, KVzip's repeat block, and the padding that gives the prompts of a
length one context length and a task's one question length (one compile each).
"""

import os

from data import retrieval_tasks
from data.chat import chat_text

BOOK = os.path.join(os.path.dirname(__file__), '..', '..', 'shared', 'data', 'books')
BOOK = os.path.join(BOOK, 'pride_and_prejudice.txt')
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


def needle_position(tokenizer, sample: retrieval_tasks.Sample, ids: dict) -> int | None:
  """The context token where the answer's value first appears (None where it does not)."""
  where = sample.context.find(sample.answers[0])
  if where < 0:
    return None
  if not ids['opening']:  # no template: the tokenizer's own opening (a BOS), then the text
    return ids['prefix'] + len(tokenizer.encode_pieces(sample.context[:where]))
  return len(tokenizer.encode_pieces(ids['opening'] + sample.context[:where]))


def prompts(tokenizer, tasks: list[str], length: int, samples: int, seed: int) -> list[tuple]:
  """Every (task, index, sample, ids) of a length, ids padded to the length's context length and
  the task's question length."""
  count = lambda text: len(tokenizer.encode(text))
  prompts = [
    (task, index, sample, framed(tokenizer, sample))
    for task in tasks
    for index, sample in enumerate(
      retrieval_tasks.samples(task, count, length, samples, seed, BOOK)
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
