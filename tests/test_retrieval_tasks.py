"""data/retrieval_tasks.py: RULER's retrieval tasks, checked by reading the text they build.

Tokens are counted by whitespace-separated words (and, for the length bound, by characters).
The length bound is checked to within one haystack unit, the most a fitted context can fall
short: a noise line (19 words, 89 characters with its newline) or one word of the book.
"""

import math
import os
import pathlib
import re

import pytest

from data import retrieval_tasks
from data.retrieval_tasks import NEEDLE, NOISE, Sample, is_correct, samples

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REAL_BOOK = os.path.join(ROOT, '..', 'shared', 'data', 'books', 'pride_and_prejudice.txt')
NEEDLE_RE = re.compile(r'One of the special magic numbers for (\S+) is: (\d+)\.')
BOOK_TASKS = ('needle_book', 'multikey')
NEEDLE_TASKS = ('needle_noise', 'needle_book', 'multikey')


def words(text: str) -> int:
  return len(text.split())


def characters(text: str) -> int:
  return len(text)


@pytest.fixture(scope='module')
def book(tmp_path_factory) -> str:
  """A small made-up book: 180 different sentences, no digits, no hyphens."""
  names = ('Anne', 'Bertram', 'Clara', 'Dorian', 'Edith', 'Francis')
  verbs = ('walked to', 'wrote from', 'dreamed of', 'rode past', 'painted', 'spoke of')
  places = ('the mill', 'the old rectory', 'the harbour', 'the long meadow', 'the abbey')
  sentences = [f'{n} {v} {p} that evening.' for n in names for v in verbs for p in places]
  path = tmp_path_factory.mktemp('book') / 'book.txt'
  path.write_text('\n'.join(' '.join(sentences[i : i + 4]) for i in range(0, 180, 4)))
  return str(path)


def asked_key(question: str) -> str:
  return re.fullmatch(r'What is the special magic number for (\S+) mentioned.*', question)[1]


def make(task: str, book: str, length: int = 1000, seed: int = 0, count=words) -> Sample:
  options = {'book_path': book} if task in BOOK_TASKS else {}
  return retrieval_tasks.TASKS[task](count, length, seed, **options)


def test_registry_names_the_four_tasks():
  assert list(retrieval_tasks.TASKS) == [
    'needle_noise',
    'needle_book',
    'multikey',
    'variable_tracking',
  ]


@pytest.mark.parametrize('task', list(retrieval_tasks.TASKS))
def test_same_seed_same_sample_other_seed_other_sample(task, book):
  sample = make(task, book, seed=3)
  assert sample.task == task
  assert make(task, book, seed=3) == sample
  other = make(task, book, seed=4)
  assert other.context != sample.context
  assert other.answers != sample.answers


@pytest.mark.parametrize('count', [words, characters])
@pytest.mark.parametrize('task', list(retrieval_tasks.TASKS))
def test_context_and_question_fill_the_length_to_within_one_unit(task, count, book):
  unit = count(NOISE + '\n')
  if task in BOOK_TASKS:
    unit = max(count(' ' + word) for word in pathlib.Path(book).read_text().split())
  for length, seed in ((600, 0), (1500, 1)) if count is words else ((5000, 2),):
    sample = make(task, book, length, seed, count)
    used = count(sample.context) + count(sample.tail)
    assert length - unit < used <= length


@pytest.mark.parametrize('task', list(retrieval_tasks.TASKS))
def test_a_4k_context_counts_tokens_a_logarithmic_number_of_times(task, book):
  calls = []
  count = lambda text: calls.append(text) or words(text)
  sample = make(task, book, 4096, 5, count)
  assert words(sample.context) + words(sample.tail) > 4096 - 19
  assert len(calls) <= 2 * math.log2(4096)


@pytest.mark.parametrize('task', NEEDLE_TASKS)
def test_the_asked_needle_is_in_the_context_once_and_its_value_is_the_answer(task, book):
  for seed in range(5):
    sample = make(task, book, seed=seed)
    key = asked_key(sample.question)
    (value,) = sample.answers
    assert re.fullmatch(r'\d{7}', value)
    assert sample.context.count(key) == 1
    assert sample.context.count(value) == 1
    assert sample.context.count(NEEDLE.format(key=key, value=value)) == 1
    assert sample.answer_prefix == (
      'The special magic number for ' + key + ' mentioned in the provided text is'
    )


@pytest.mark.parametrize('task', NEEDLE_TASKS)
def test_the_needle_depth_varies_with_the_seed(task, book):
  depths = set()
  for seed in range(8):
    sample = make(task, book, seed=seed)
    depths.add(round(sample.context.index(NEEDLE[:20]) / len(sample.context), 1))
  assert len(depths) >= 3


def test_needle_noise_haystack_is_noise_lines_and_the_needle_line():
  sample = make('needle_noise', '', seed=2)
  lines = sample.context.split('\n')[1:-1]
  assert sum(line == NOISE for line in lines) == len(lines) - 1
  assert NEEDLE_RE.fullmatch(next(line for line in lines if line != NOISE))


@pytest.mark.parametrize('task', BOOK_TASKS)
def test_book_needles_sit_between_sentences_of_a_drawn_passage(task, book):
  starts = set()
  for seed in range(6):
    sample = make(task, book, seed=seed)
    haystack = sample.context.split('\n')[1]
    starts.add(haystack.split('.')[0])
    for match in NEEDLE_RE.finditer(haystack):
      before, after = haystack[: match.start()], haystack[match.end() :]
      assert before == '' or before.endswith('. ')
      assert after == '' or re.match(r' [A-Z]', after)
    prose = NEEDLE_RE.sub('', haystack).split()
    assert prose and all(word.isalpha() or word == 'evening.' for word in prose)
  assert len(starts) >= 3


def test_multikey_hides_three_distractors_of_other_keys(book):
  for seed in range(5):
    sample = make('multikey', book, seed=seed)
    key = asked_key(sample.question)
    needles = NEEDLE_RE.findall(sample.context)
    keys = [k for k, _ in needles]
    assert len(needles) == 4
    assert len(set(keys)) == 4 and len({v for _, v in needles}) == 4
    assert keys.count(key) == 1
    assert dict(needles)[key] == sample.answers[0]


def resolve(context: str) -> dict[str, str]:
  """Every variable's value, by following the context's assignments in reading order."""
  values = {}
  for name, source in re.findall(r'^VAR ([A-Z]+) = (VAR [A-Z]+|\d+)$', context, re.M):
    assert name not in values, f'{name} is assigned twice'
    values[name] = values[source[4:]] if source.startswith('VAR ') else source
  return values


def test_variable_tracking_answers_are_exactly_the_variables_holding_the_value():
  for seed in range(5):
    sample = make('variable_tracking', '', 1500, seed)
    value = re.search(r'assigned the value (\d{5}) in the text above', sample.question)[1]
    values = resolve(sample.context)
    assert len(sample.answers) == 5
    assert {name for name, held in values.items() if held == value} == set(sample.answers)
    assert len(values) == 10  # The worked example's chain holds another value.
    assert sample.answer_prefix.endswith(f'5 variables are assigned the value {value}, they are:')


def test_samples_are_n_reproducible_different_samples():
  drawn = samples('needle_noise', words, 800, 4, seed=7)
  assert drawn == samples('needle_noise', words, 800, 4, seed=7)
  assert len({s.context for s in drawn}) == 4
  assert drawn != samples('needle_noise', words, 800, 4, seed=8)


def test_samples_pass_the_book_to_the_tasks_that_read_one(book):
  (sample,) = samples('multikey', words, 800, 1, seed=0, book_path=book)
  assert 'that evening.' in sample.context
  with pytest.raises(ValueError, match='multikey reads a book'):
    samples('multikey', words, 800, 1, seed=0)
  (noise,) = samples('needle_noise', words, 800, 1, seed=0, book_path=book)
  assert 'evening' not in noise.context


def test_is_correct_matches_substrings_ignoring_case():
  needle = Sample('needle_noise', '', '', '', ('1234567',))
  assert is_correct(' 1234567.', needle)
  assert not is_correct(' 1234568.', needle)
  chain = Sample('variable_tracking', '', '', '', ('ABCDE', 'FGHIJ'))
  assert is_correct('abcde, fghij', chain)
  assert is_correct('ABC\nDE FGHIJ', chain)  # Control characters are dropped, as kvpress does.
  assert not is_correct('ABCDE and more', chain)


def test_errors_say_what_is_wrong(book):
  with pytest.raises(ValueError, match=r'length=40 is too short for needle_noise'):
    make('needle_noise', book, 40)
  with pytest.raises(ValueError, match=r'too short for variable_tracking'):
    make('variable_tracking', book, 300)
  with pytest.raises(ValueError, match=r"Unknown task 'niah'; the tasks are needle_noise, "):
    samples('niah', words, 1000, 1, 0)
  with pytest.raises(ValueError, match=r'n=0 must be at least 1'):
    samples('needle_noise', words, 1000, 0, 0)


def test_the_real_book_makes_a_4k_needle_sample():
  if not os.path.exists(REAL_BOOK):
    pytest.skip('Pride and Prejudice is not at ../shared/data/books/ beside the repository.')
  calls = []
  count = lambda text: calls.append(text) or words(text)
  sample = retrieval_tasks.needle_book(count, 4096, 0, REAL_BOOK)
  haystack = sample.context.split('\n')[1]
  assert words(sample.context) + words(sample.tail) == 4096
  assert len(calls) <= 2 * math.log2(4096)
  assert haystack.count(NEEDLE[:30]) == 1
  with open(REAL_BOOK, encoding='utf-8') as f:
    text = ' '.join(f.read().split())
  prose = re.sub(r' ?One of the special magic numbers for \S+ is: \d+\.', '', haystack).split()
  assert ' '.join(prose[:200]) in text and ' '.join(prose[-200:]) in text
