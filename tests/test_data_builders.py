"""The offline TFDS builders: deterministic, disjoint splits with the expected contents."""

import datetime
import logging

import numpy as np
import pytest
import tensorflow_datasets as tfds

import data  # noqa: F401  (registers the builders)
from data.builders import dates, number_words
from data.readers import tsv_parallel


def _read(builder: tfds.core.DatasetBuilder) -> dict[str, list[tuple[str, str]]]:
  builder.download_and_prepare()
  out = {}
  for split in ('train', 'validation', 'test'):
    source = builder.as_data_source(split=split)
    out[split] = [
      (source[i]['source'].decode(), source[i]['target'].decode()) for i in range(len(source))
    ]
  return out


def test_builders_are_registered():
  """Importing `data` registers the three builders under their TFDS names."""
  names = tfds.list_builders(with_community_datasets=False)
  assert {'number_words', 'dates', 'tsv_parallel'} <= set(names)
  assert tfds.builder_cls('number_words').DEFAULT_CONFIG_NAME == 'en_de'
  assert {'en_de', 'en_fr', 'digits_en'} <= set(tfds.builder_cls('number_words').builder_configs)


def test_num2words_spellings():
  """German puts units before tens; output is num2words' own (lower case)."""
  assert number_words.render(321, 'de') == 'dreihunderteinundzwanzig'
  assert number_words.render(321, 'en') == 'three hundred and twenty-one'
  assert number_words.render(21, 'fr') == 'vingt et un'
  assert number_words.render(7, 'digits') == '7'


def test_allocate_fills_small_strata_then_shares():
  """Water filling: strata below their share give all they have; the rest split evenly."""
  assert number_words.allocate(32_000, [10, 90, 900, 9_000, 90_000, 900_000]) == [
    10,
    90,
    900,
    9_000,
    11_000,
    11_000,
  ]
  assert number_words.allocate(7, [1, 100]) == [1, 6]
  assert number_words.allocate(10, [90, 10]) == [5, 5]
  assert number_words.allocate(10, [100, 2, 3]) == [5, 2, 3]
  assert number_words.allocate(101, [1, 100]) == [1, 100]
  with pytest.raises(ValueError, match='102 distinct'):
    number_words.allocate(102, [1, 100])


def test_default_number_draw_is_stratified_distinct_and_fixed():
  """The default config's 32000 numbers: distinct, per digit count as allocated, reproducible."""
  numbers = number_words.sample_numbers(32_000, 10**6, seed=0)
  assert len(np.unique(numbers)) == 32_000
  digits = np.bincount([len(str(n)) for n in numbers], minlength=7)[1:]
  np.testing.assert_array_equal(digits, [10, 90, 900, 9_000, 11_000, 11_000])
  np.testing.assert_array_equal(numbers, number_words.sample_numbers(32_000, 10**6, seed=0))
  assert not np.array_equal(numbers, number_words.sample_numbers(32_000, 10**6, seed=1))


def test_number_words_tiny_build(tmp_path):
  """Sizes as configured, splits disjoint, targets spell the source digits, order reproducible."""
  config = number_words.NumberWordsConfig(
    name='tiny_digits_de',
    source='digits',
    target='de',
    train_size=40,
    validation_size=6,
    test_size=4,
  )
  splits = _read(
    number_words.NumberWords(
      config=config, data_dir=str(tmp_path / 'a'), file_format='array_record'
    )
  )
  assert {k: len(v) for k, v in splits.items()} == {'train': 40, 'validation': 6, 'test': 4}
  numbers = {k: {int(s) for s, _ in v} for k, v in splits.items()}
  assert not numbers['train'] & numbers['validation']
  assert not numbers['train'] & numbers['test']
  assert not numbers['validation'] & numbers['test']
  assert numbers['test'] == set(number_words.sample_numbers(50, 10**6, 0)[:4].tolist())
  for source, target in splits['train']:
    assert target == number_words.render(int(source), 'de')
  again = _read(
    number_words.NumberWords(
      config=config, data_dir=str(tmp_path / 'b'), file_format='array_record'
    )
  )
  assert again == splits


def test_dates_render():
  """babel renders the patterns in the locale; numeric patterns are locale-independent."""
  day = datetime.date(2049, 12, 31)
  assert dates.render(day, 'full', 'de_DE') == 'Freitag, 31. Dezember 2049'
  assert dates.render(day, 'long', 'fr_FR') == '31 décembre 2049'
  assert dates.render(datetime.date(2020, 1, 5), 'MM/dd/y', 'fr_FR') == '01/05/2020'
  assert dates.render(datetime.date(2020, 1, 5), 'dd.MM.y', 'en_US') == '05.01.2020'


def test_dates_tiny_build(tmp_path):
  """ISO targets in range, disjoint by date across splits, sources in several formats."""
  config = dates.DatesConfig(name='tiny', train_size=60, validation_size=5, test_size=5)
  splits = _read(dates.Dates(config=config, data_dir=str(tmp_path), file_format='array_record'))
  assert {k: len(v) for k, v in splits.items()} == {'train': 60, 'validation': 5, 'test': 5}
  targets = {k: {t for _, t in v} for k, v in splits.items()}
  assert sum(len(t) for t in targets.values()) == 70  # every date once, in one split
  for _, target in splits['train']:
    assert '1950-01-01' <= target <= '2049-12-31'
    assert datetime.date.fromisoformat(target).isoformat() == target
  sources = [s for s, _ in splits['train']]
  assert any('/' in s for s in sources) and any(s[0].isalpha() for s in sources)


_TSV = (
  b'Go.\tGeh.\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272\n'
  b'no tab here\n'
  b'Go.\tLauf!\tattribution\n'
  b'\n'
  b'Run!\t \tattribution\n'
  b'Hi.\tHallo!\n'
  b'\xff\xfe broken\tbytes\n'
  b'Who?\tWer?\r\n'
)


def test_tsv_read_pairs_skips_and_reports_malformed_lines_once(tmp_path, caplog):
  """No tab, empty side and bad UTF-8 are skipped, counted in one warning; blank lines ignored."""
  path = tmp_path / 'deu.txt'
  path.write_bytes(_TSV)
  with caplog.at_level(logging.WARNING):
    pairs = tsv_parallel.read_pairs(str(path))
  assert pairs == [
    (1, 'Go.', 'Geh.'),
    (3, 'Go.', 'Lauf!'),
    (6, 'Hi.', 'Hallo!'),
    (8, 'Who?', 'Wer?'),
  ]
  warnings = [r.getMessage() for r in caplog.records if 'malformed' in r.getMessage()]
  assert len(warnings) == 1
  assert 'skipped 3 malformed' in warnings[0] and 'the first is line 2' in warnings[0]
  assert '1 with no tab' in warnings[0] and '1 with an empty column' in warnings[0]


def test_tsv_split_keeps_sources_together():
  """All translations of a source share a split; 5% (at least 1) of sources go to each holdout."""
  pairs = [(i, f'Sentence {i // 2}.', f'Satz {i}.') for i in range(40)]  # 20 sources, 2 each
  splits = tsv_parallel.split_by_source(pairs)
  assert {k: len(v) for k, v in splits.items()} == {'test': 2, 'validation': 2, 'train': 36}
  sources = {k: {s for _, s, _ in v} for k, v in splits.items()}
  assert len(sources['test']) == len(sources['validation']) == 1
  assert not sources['train'] & (sources['test'] | sources['validation'])
  assert sorted(p for v in splits.values() for p in v) == pairs
  with pytest.raises(ValueError, match='at least 3 distinct'):
    tsv_parallel.split_by_source(pairs[:4])


def test_tsv_config_names_file_and_contents(tmp_path):
  """The config name follows the file name and changes with its contents; no file -> the path."""
  path = tmp_path / 'deu.txt'
  path.write_bytes(b'a\tb\n')
  first = tsv_parallel.config_for_path(str(path)).name
  assert first.startswith('deu_txt_') and len(first) == len('deu_txt_') + 12
  path.write_bytes(b'a\tc\n')
  assert tsv_parallel.config_for_path(str(path)).name != first
  missing = str(tmp_path / 'nope.tsv')
  with pytest.raises(FileNotFoundError, match='nope.tsv'):
    tsv_parallel.config_for_path(missing)
