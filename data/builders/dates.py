"""`dates`: human-readable dates in many formats and locales (babel) -> ISO `YYYY-MM-DD`.

The classic attention-alignment task: the model must find day, month and year wherever the
format puts them ("Friday, 31 December 2049", "31. Dezember 2049", "12/31/2049" -> "2049-12-31").
Offline and deterministic. Dates are drawn without replacement from [1950-01-01, 2049-12-31]
and split by date, so no date is in two splits; each example gets a random locale and format.
"""

import dataclasses
import datetime

from babel import dates as babel_dates
import numpy as np
import tensorflow_datasets as tfds

from data.builders.text_pairs import text_pair_info

# babel's localized styles and CLDR patterns (month and weekday names follow the locale). Only
# one all-numeric pattern per separator, so no rendering is ambiguous: dots are day-first,
# slashes month-first. Locale 'short' styles are left out because they disagree on the order.
FORMATS = (
  'medium',
  'long',
  'full',
  'd MMM y',
  'd MMMM y',
  'EEE d MMM y',
  'EEEE d MMMM y',
  'MMMM d, y',
  'dd.MM.y',
  'MM/dd/y',
)
ALL_LOCALES = ('en_US', 'en_GB', 'de_DE', 'fr_FR', 'es_ES', 'it_IT', 'pt_BR', 'nl_NL')


@dataclasses.dataclass(eq=False)
class DatesConfig(tfds.core.BuilderConfig):
  """Locales and split sizes.

  Attributes:
    locales: babel locales the sources are written in.
    train_size: examples in the train split.
    validation_size: examples in the validation split.
    test_size: examples in the test split.
    first_date: earliest date, ISO.
    last_date: latest date, ISO.
    seed: seed of the draw.
  """

  locales: tuple[str, ...] = ALL_LOCALES
  train_size: int = 20_000
  validation_size: int = 1_000
  test_size: int = 1_000
  first_date: str = '1950-01-01'
  last_date: str = '2049-12-31'
  seed: int = 0


def render(date: datetime.date, pattern: str, locale: str) -> str:
  """`date` in babel `pattern` and `locale`, with every kind of space made a plain space."""
  return ' '.join(babel_dates.format_date(date, format=pattern, locale=locale).split())


class Dates(tfds.core.GeneratorBasedBuilder):
  """Dates in many formats and locales -> ISO dates."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.'}
  BUILDER_CONFIGS = [
    DatesConfig(name='multilingual', description=f'Dates in {", ".join(ALL_LOCALES)}.'),
    DatesConfig(name='en', locales=('en_US', 'en_GB'), description='Dates in English.'),
  ]
  DEFAULT_CONFIG_NAME = 'multilingual'

  def _info(self) -> tfds.core.DatasetInfo:
    return text_pair_info(self, __doc__)

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download.
    c = self.builder_config
    first = datetime.date.fromisoformat(c.first_date)
    num_days = (datetime.date.fromisoformat(c.last_date) - first).days + 1
    total = c.test_size + c.validation_size + c.train_size
    if total > num_days:
      raise ValueError(
        f'dates: {total} examples need {total} distinct days, the range has {num_days}.'
      )
    rng = np.random.default_rng(c.seed)
    days = rng.choice(num_days, size=total, replace=False)
    locales = rng.integers(len(c.locales), size=total)
    patterns = rng.integers(len(FORMATS), size=total)
    rows = [
      (first + datetime.timedelta(days=int(day)), FORMATS[pattern], c.locales[locale])
      for day, pattern, locale in zip(days, patterns, locales, strict=True)
    ]
    cut = np.cumsum([c.test_size, c.validation_size])
    return {
      'train': self._generate_examples(rows[cut[1] :]),
      'validation': self._generate_examples(rows[cut[0] : cut[1]]),
      'test': self._generate_examples(rows[: cut[0]]),
    }

  def _generate_examples(self, rows: list[tuple[datetime.date, str, str]]):
    for date, pattern, locale in rows:
      iso = date.isoformat()
      yield iso, {'source': render(date, pattern, locale), 'target': iso}
