"""benchmarks/ngram_baseline.py: the linear bag-of-n-grams reference on a TSV file's splits."""

import os
import subprocess
import sys

import numpy as np

from benchmarks import ngram_baseline

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _order_corpus(count: int, seed: int) -> tuple[list[str], np.ndarray]:
  """Texts whose class is the order of two words: bags of words cannot tell the classes apart
  (each text has both words and a word of its own), bags of bigrams can."""
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, 2, count)
  texts = [f'{"red blue" if y else "blue red"} item{seed}_{i}' for i, y in enumerate(labels)]
  return texts, labels


def test_the_choice_is_made_on_validation_and_only_it_reads_the_test_split():
  rows = ngram_baseline.select_and_test(
    *(_order_corpus(n, seed) for seed, n in enumerate((200, 60, 60)))
  )
  assert len(rows) == len(ngram_baseline.NGRAM_RANGES) * len(ngram_baseline.COSTS)
  unigrams = [r['validation'] for r in rows if r['ngrams'] == (1, 1)]
  assert max(unigrams) < 0.8  # the words alone carry no signal
  tested = [r for r in rows if 'test' in r]
  assert len(tested) == 1 and tested[0]['ngrams'] != (1, 1)
  assert tested[0]['validation'] == max(r['validation'] for r in rows)
  assert tested[0]['test'] == 1.0


def test_the_command_reads_the_tsv_config_splits(tmp_path):
  texts, labels = _order_corpus(240, 0)
  (tmp_path / 'train.tsv').write_text(
    ''.join(f'{t}\t{"rb" if y else "br"}\n' for t, y in zip(texts, labels))
  )
  run = subprocess.run(
    [
      sys.executable,
      '-m',
      'benchmarks.ngram_baseline',
      f'--config.dataset.tsv_path={tmp_path / "train.tsv"}',
      f'--config.dataset.data_dir={tmp_path / "data"}',
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=300,
    check=True,
  )
  # classification_tsv.py holds out a tenth for validation and 5% for test, by distinct text.
  assert '204 train, 24 validation, 12 test texts of tsv_classification' in run.stdout
  assert 'test accuracy 100.0%' in run.stdout


def test_a_missing_file_is_one_sentence_naming_its_field(tmp_path):
  run = subprocess.run(
    [
      sys.executable,
      '-m',
      'benchmarks.ngram_baseline',
      f'--config.dataset.tsv_path={tmp_path / "missing.tsv"}',
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert run.returncode == 1 and run.stdout == ''
  assert run.stderr.strip().splitlines() == [
    f'benchmarks.ngram_baseline: config.dataset.tsv_path: no such file: '
    f"'{tmp_path / 'missing.tsv'}'."
  ]
