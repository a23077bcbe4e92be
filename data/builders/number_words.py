"""`number_words`: numbers written out in words (num2words), between languages or from digits.

Offline and deterministic. Numbers in [0, 10^6) are drawn without replacement from a fixed seed,
stratified by digit count (every stratum gets an equal share, small strata all they have), then
split by number, so train, validation and test never share a number. German puts units before tens
("dreihunderteinundzwanzig" = 321), so en->de needs a non-monotonic alignment: a task where
attention visibly matters.
"""

import dataclasses

from num2words import num2words
import numpy as np
import tensorflow_datasets as tfds

from data.builders.text_pairs import text_pair_info

LANGUAGES = ('digits', 'en', 'de', 'fr', 'es')


@dataclasses.dataclass(eq=False)
class NumberWordsConfig(tfds.core.BuilderConfig):
  """A language pair and split sizes.

  Attributes:
    source: language of the source text, one of `LANGUAGES` ('digits' = "321").
    target: language of the target text, one of `LANGUAGES`.
    train_size: examples in the train split.
    validation_size: examples in the validation split.
    test_size: examples in the test split.
    max_number: numbers are drawn from [0, max_number).
    seed: seed of the draw.
  """

  source: str = 'en'
  target: str = 'de'
  train_size: int = 30_000
  validation_size: int = 1_000
  test_size: int = 1_000
  max_number: int = 10**6
  seed: int = 0


def _pair(source: str, target: str) -> NumberWordsConfig:
  return NumberWordsConfig(
    name=f'{source}_{target}',
    source=source,
    target=target,
    description=f'{source} -> {target} number words.',
  )


def render(number: int, language: str) -> str:
  """`number` in `language`: digits, or num2words' spelling as is (lower case)."""
  return str(number) if language == 'digits' else num2words(number, lang=language)


def allocate(total: int, capacities: list[int]) -> list[int]:
  """Splits `total` as evenly as possible over strata that hold at most `capacities` each.

  Water filling: strata are visited from the smallest, each taking an equal share of what is
  left or all it has, so small strata are exhausted and the rest is shared evenly.
  """
  if total > sum(capacities):
    raise ValueError(f'Cannot draw {total} distinct numbers from {sum(capacities)}.')
  counts = [0] * len(capacities)
  order = sorted(range(len(capacities)), key=lambda i: capacities[i])
  for visited, i in enumerate(order):
    counts[i] = min(capacities[i], total // (len(order) - visited))
    total -= counts[i]
  return counts


def sample_numbers(total: int, max_number: int, seed: int) -> np.ndarray:
  """`total` distinct numbers in [0, max_number), stratified by digit count, in random order."""
  bounds = []
  low = 0
  while low < max_number:
    high = min(max_number, max(10, low * 10))
    bounds.append((low, high))
    low = high
  rng = np.random.default_rng(seed)
  counts = allocate(total, [high - low for low, high in bounds])
  draws = [
    low + rng.choice(high - low, size=k, replace=False)
    for (low, high), k in zip(bounds, counts, strict=True)
  ]
  return rng.permutation(np.concatenate(draws))


class NumberWords(tfds.core.GeneratorBasedBuilder):
  """Numbers <-> number words in several languages."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.'}
  BUILDER_CONFIGS = [
    _pair('en', 'de'),
    _pair('de', 'en'),
    _pair('en', 'fr'),
    _pair('en', 'es'),
    _pair('digits', 'en'),
    _pair('digits', 'de'),
    _pair('en', 'digits'),
  ]
  DEFAULT_CONFIG_NAME = 'en_de'

  def _info(self) -> tfds.core.DatasetInfo:
    config = self.builder_config
    for language in (config.source, config.target):
      if language not in LANGUAGES:
        raise ValueError(f'number_words language must be one of {LANGUAGES}, got {language!r}.')
    return text_pair_info(self, __doc__)

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download.
    c = self.builder_config
    numbers = sample_numbers(c.test_size + c.validation_size + c.train_size, c.max_number, c.seed)
    cut = np.cumsum([c.test_size, c.validation_size])
    test, validation, train = np.split(numbers, cut)
    return {
      'train': self._generate_examples(train),
      'validation': self._generate_examples(validation),
      'test': self._generate_examples(test),
    }

  def _generate_examples(self, numbers: np.ndarray):
    c = self.builder_config
    for number in numbers.tolist():
      yield number, {'source': render(number, c.source), 'target': render(number, c.target)}
