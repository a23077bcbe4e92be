"""RULER's synthetic long-context retrieval tasks, built offline for the KV-cache compression study.

    from data import retrieval_tasks
    count_tokens = lambda text: len(tokenizer.encode(text))
    for name in retrieval_tasks.TASKS:
      for sample in retrieval_tasks.samples(name, count_tokens, 4096, n=50, seed=0, book_path=BOOK):
        prediction = answer(sample.context, sample.tail)  # a press compresses the context
        correct = retrieval_tasks.is_correct(prediction, sample)

The tasks follow NVIDIA's RULER (Hsieh et al., 2024): `needle_noise` is its niah_single_1,
`needle_book` its niah_single_2 and `multikey` its niah_multikey_1 with a book in place of the Paul
Graham essays (which cannot be read offline), `variable_tracking` its vt (one chain of four hops).
A prompt is split as kvpress splits RULER's: `context` is the instruction and the haystack (what a
press compresses), `question` is read after it, then RULER's `answer_prefix`.

Length: the haystack grows while `count_tokens(context) <= length - count_tokens(tail)`, so
context and question together fit in `length` tokens of the caller's tokenizer (the question's
own count is the reserve). Unlike RULER, no room is kept for the answer (RULER subtracts the tokens
to generate from its length): here `length` is the prompt a press compresses. The search calls
`count_tokens` O(log length) times per sample (about ten for 4k tokens), so a slow tokenizer is
fine. Needles sit at a depth drawn from RULER's 40 evenly spaced depths (0%, 3%, ..., 100%), a
fraction of the haystack, so a needle keeps its relative place while the haystack is fitted.
"""

import dataclasses
import functools
import inspect
import random
import re
import string
from typing import Callable

from data.sentences import split_sentences
from data.token_budget import longest_within

NOISE = 'The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.'
NEEDLE = 'One of the special magic numbers for {key} is: {value}.'
NIAH_INSTRUCTION = (
  'A special magic number is hidden within the following text. Make sure to memorize it. '
  'I will quiz you about the number afterwards.\n'
)
NIAH_QUESTION = 'What is the special magic number for {key} mentioned in the provided text?'
NIAH_PREFIX = 'The special magic number for {key} mentioned in the provided text is'
VT_INSTRUCTION = (
  'Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n'
)
VT_QUESTION = 'Question: Find all variables that are assigned the value {value} in the text above.'
VT_PREFIX = (
  'Answer: According to the chain(s) of variable assignment in the text above, {count} '
  'variables are assigned the value {value}, they are:'
)
DEPTHS = tuple(round(100 * i / 39) for i in range(40))
DISTRACTORS = 3  # niah_multikey_1: four keys in the haystack, one asked for.
HOPS = 4  # vt: VAR A = value, then four VAR X = VAR Y assignments.
DEMO_NOISE = 20  # Noise lines in vt's worked example (RULER's is fitted to about 500 tokens).
# Keys are 'adjective-noun' as RULER's (from the wonderwords lists). No word here is a prefix or
# suffix of another in its list, so no key contains another and a key occurs only where put.
ADJECTIVES = (
  'amber brisk cobalt dusty eager fuzzy gentle hollow icy jolly knotty lanky mellow nimble opaque '
  'plucky quaint rusty silky tawny upbeat vivid wobbly zesty bumpy crisp drowsy frosty glossy '
  'hasty leafy murky'
).split()
NOUNS = (
  'anchor badger canyon dolphin engine falcon glacier harbor igloo jackal kettle lantern magnet '
  'nebula orchid pelican quartz rocket saddle teapot umbrella violin walrus zeppelin biscuit '
  'compass dynamo ferret gazebo hammock iguana yacht'
).split()
_CONTROL = re.compile(r'[\x00-\x1f]')


@dataclasses.dataclass(frozen=True)
class Sample:
  """One prompt: `context`, then `question` and the start of the answer, `answer_prefix` (apart,
  so that a chat template can frame the question as a user turn and the prefix as the model's);
  a prediction is right if it contains `answers`."""

  task: str
  context: str
  question: str
  answer_prefix: str
  answers: tuple[str, ...]

  @property
  def tail(self) -> str:
    """What follows the context when no chat template frames it: question, then prefix."""
    return f'{self.question} {self.answer_prefix}'


def _key(rng: random.Random) -> str:
  return f'{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}'


def _number(rng: random.Random) -> str:
  """A 7-digit value, as RULER's needles carry."""
  return str(rng.randint(10**6, 10**7 - 1))


def _distinct(rng: random.Random, draw: Callable[[random.Random], str], count: int) -> list[str]:
  """`count` different draws, in the order drawn: a repeated key or value would be ambiguous."""
  drawn = []
  while len(drawn) < count:
    item = draw(rng)
    if item not in drawn:
      drawn.append(item)
  return drawn


def _insert_at_depths(units: list[str], inserts: list[tuple[int, str]]) -> list[str]:
  """`units` with each (depth %, text) placed before unit `int(len(units) * depth / 100)`.

  Inserts of equal depth keep their order, which keeps a variable chain in order.
  """
  out = list(units)
  for shift, (depth, text) in enumerate(sorted(inserts, key=lambda insert: insert[0])):
    out.insert(len(units) * depth // 100 + shift, text)
  return out


def _noise(n: int, inserts: list[tuple[int, str]]) -> str:
  """RULER's noise haystack: `n` copies of NOISE, one a line, the inserts as lines of their own."""
  return '\n'.join(_insert_at_depths([NOISE] * n, inserts))


@functools.cache
def _read_book(path: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
  """The book's words (whitespace runs made one space, as RULER reads its essays) and the
  indices of the words that begin a sentence. Cached: `samples` reads one book many times."""
  with open(path, encoding='utf-8-sig') as f:
    sentences = split_sentences(' '.join(f.read().split()))
  words, starts = [], []
  for sentence in sentences:
    starts.append(len(words))
    words.extend(sentence.split(' '))
  return tuple(words), tuple(starts)


def _book(words: tuple[str, ...], start: int, n: int, inserts: list[tuple[int, str]]) -> str:
  """`n` words of the book from word `start` (from the top again past its end, as RULER repeats
  its essays), with the inserts placed between its sentences."""
  text = ' '.join(words[(start + i) % len(words)] for i in range(n))
  return ' '.join(_insert_at_depths(split_sentences(text), inserts))


def _fitted(
  task: str,
  count_tokens: Callable[[str], int],
  length: int,
  build: Callable[[int], str],
  question: str,
  prefix: str,
  answers: tuple[str, ...],
) -> Sample:
  """The sample whose context is the longest `build(n)` that leaves room for the question and
  the answer's prefix."""
  reserve = count_tokens(f'{question} {prefix}')
  context = longest_within(count_tokens, build, length - reserve)
  if context is None:
    needed = reserve + count_tokens(build(0))
    raise ValueError(
      f'length={length} is too short for {task}: its instruction, needles and question alone '
      f'take {needed} tokens.'
    )
  return Sample(task, context, question, prefix, answers)


def needle_noise(count_tokens: Callable[[str], int], length: int, seed: int) -> Sample:
  """RULER's niah_single_1: one needle (a word key, a 7-digit value) in repeated noise.

  The simplest retrieval: the needle is the only line that is not noise, so a press that keeps
  anything unusual keeps it.
  """
  rng = random.Random(seed)
  key, value = _key(rng), _number(rng)
  inserts = [(rng.choice(DEPTHS), NEEDLE.format(key=key, value=value))]
  build = lambda n: NIAH_INSTRUCTION + _noise(n, inserts) + '\n'
  question, prefix = NIAH_QUESTION.format(key=key), NIAH_PREFIX.format(key=key)
  return _fitted('needle_noise', count_tokens, length, build, question, prefix, (value,))


def needle_book(
  count_tokens: Callable[[str], int], length: int, seed: int, book_path: str
) -> Sample:
  """RULER's niah_single_2 with a book for its essays: the needle among real prose.

  The haystack is the book's text from a sentence drawn from the seed (RULER always starts at
  its essays' first word; a drawn start varies the prose around the needle), and the needle goes
  between two of its sentences.

  Args:
    count_tokens: the caller's tokenizer, text -> number of tokens.
    length: tokens that context and question together may take.
    seed: draws the key, the value, the depth and the start in the book.
    book_path: a plain-text book (UTF-8), e.g. a Project Gutenberg novel.
  """
  rng = random.Random(seed)
  key, value = _key(rng), _number(rng)
  inserts = [(rng.choice(DEPTHS), NEEDLE.format(key=key, value=value))]
  words, starts = _read_book(book_path)
  start = rng.choice(starts)
  build = lambda n: NIAH_INSTRUCTION + _book(words, start, n, inserts) + '\n'
  question, prefix = NIAH_QUESTION.format(key=key), NIAH_PREFIX.format(key=key)
  return _fitted('needle_book', count_tokens, length, build, question, prefix, (value,))


def multikey(count_tokens: Callable[[str], int], length: int, seed: int, book_path: str) -> Sample:
  """RULER's niah_multikey_1: the asked-for needle among three needles of other keys, in a book.

  The haystack is the book, as RULER's niah_multikey_1 uses its essay haystack (the noise
  haystack is for niah_single_1): in prose the four needles are the only sentences of their
  kind, so the task is telling the right key from the distractors, not finding odd lines. Keys
  and values are all different; the four depths are different draws, in a random order.
  Arguments as `needle_book`'s.
  """
  rng = random.Random(seed)
  keys = _distinct(rng, _key, 1 + DISTRACTORS)
  values = _distinct(rng, _number, 1 + DISTRACTORS)
  depths = rng.sample(DEPTHS, 1 + DISTRACTORS)
  inserts = [(d, NEEDLE.format(key=k, value=v)) for d, k, v in zip(depths, keys, values)]
  words, starts = _read_book(book_path)
  start = rng.choice(starts)
  build = lambda n: NIAH_INSTRUCTION + _book(words, start, n, inserts) + '\n'
  question, prefix = NIAH_QUESTION.format(key=keys[0]), NIAH_PREFIX.format(key=keys[0])
  return _fitted('multikey', count_tokens, length, build, question, prefix, (values[0],))


def _chain(names: list[str], value: int) -> list[str]:
  """VAR A = value, VAR B = VAR A, ...: every name ends up holding `value`."""
  return [f'VAR {names[0]} = {value}'] + [f'VAR {b} = VAR {a}' for a, b in zip(names, names[1:])]


def _chain_inserts(rng: random.Random, names: list[str], value: int) -> list[tuple[int, str]]:
  """The chain's lines at distinct depths drawn from `rng`, in chain order (a name is assigned
  after the name it copies, as in RULER, so reading forward tracks the value)."""
  return list(zip(sorted(rng.sample(DEPTHS, len(names))), _chain(names, value)))


def _name(rng: random.Random, size: int) -> str:
  return ''.join(rng.choices(string.ascii_uppercase, k=size))


def variable_tracking(count_tokens: Callable[[str], int], length: int, seed: int) -> Sample:
  """RULER's vt: which variables does a chain of assignments, hidden in noise, give a value?

  One chain of five 5-letter names and a 5-digit value. As RULER, the context opens with one
  worked example (its own 3-letter names and value, DEMO_NOISE noise lines, the question and its
  answer) so that a base model knows the answer's form. The answers are all five names.
  """
  rng = random.Random(seed)
  names = _distinct(rng, lambda r: _name(r, 5), HOPS + 1)
  value = rng.randint(10000, 99998)
  demo_names = _distinct(rng, lambda r: _name(r, 3), HOPS + 1)
  demo_value = value
  while demo_value == value:
    demo_value = rng.randint(10000, 99998)
  demo_lines = _noise(DEMO_NOISE, _chain_inserts(rng, demo_names, demo_value))
  demo_question = f'{VT_QUESTION} {VT_PREFIX}'.format(value=demo_value, count=len(demo_names))
  demo = f'{VT_INSTRUCTION}{demo_lines}\n{demo_question} {" ".join(demo_names)}\n'
  inserts = _chain_inserts(rng, names, value)
  build = lambda n: demo + VT_INSTRUCTION + _noise(n, inserts) + '\n'
  question = VT_QUESTION.format(value=value)
  prefix = VT_PREFIX.format(value=value, count=len(names))
  return _fitted('variable_tracking', count_tokens, length, build, question, prefix, tuple(names))


TASKS: dict[str, Callable[..., Sample]] = {
  'needle_noise': needle_noise,
  'needle_book': needle_book,
  'multikey': multikey,
  'variable_tracking': variable_tracking,
}


def samples(
  task: str,
  count_tokens: Callable[[str], int],
  length: int,
  n: int,
  seed: int,
  book_path: str | None = None,
) -> list[Sample]:
  """`n` samples of `task`, the i-th from the i-th seed that `seed` draws.

  Args:
    task: a name in TASKS.
    count_tokens: the caller's tokenizer, text -> number of tokens.
    length: tokens that each sample's context and question together may take.
    n: how many samples.
    seed: fixes every sample.
    book_path: the book of the tasks that read one (`needle_book`, `multikey`); others ignore it.
  """
  if task not in TASKS:
    raise ValueError(f'Unknown task {task!r}; the tasks are {", ".join(TASKS)}.')
  if n < 1:
    raise ValueError(f'n={n} must be at least 1.')
  generate = TASKS[task]
  options = {}
  if 'book_path' in inspect.signature(generate).parameters:
    if book_path is None:
      raise ValueError(f'{task} reads a book: pass its path as book_path.')
    options['book_path'] = book_path
  rng = random.Random(seed)
  return [generate(count_tokens, length, rng.getrandbits(63), **options) for _ in range(n)]


def is_correct(prediction: str, sample: Sample) -> bool:
  """Whether `prediction` contains every answer, ignoring case: RULER's string_match_all.

  RULER and kvpress score every needle task and vt with string_match_all (any-answer matching,
  string_match_part, only for QA); a needle task has one answer, so all and any agree, and vt
  needs all five names. RULER averages the share found (4 of 5 names scores 0.8); here that
  sample is wrong. As kvpress, control characters (newlines) are dropped from the prediction.
  """
  text = _CONTROL.sub('', prediction.strip()).lower()
  return all(answer.lower() in text for answer in sample.answers)
