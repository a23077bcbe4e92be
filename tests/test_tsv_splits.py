"""tsv_classification's splits: files of their own, seeded fractions, k-fold cross-validation."""

import os

import numpy as np
import pytest

from data import classification
from data.readers import tsv_classification

ROWS = [(i + 1, f'text number {i}', 'pos' if i % 3 else 'neg') for i in range(30)]


def _config(**split):
  return tsv_classification.TsvClassificationConfig(name='test', **split)


def _texts(rows):
  return {text for _, text, _ in rows}


def test_seeded_fractions_are_disjoint_and_reproducible():
  """10% test, 20% validation of 30 texts: 3 and 6, disjoint, the same for the same seed only."""
  splits = tsv_classification.split_rows(ROWS, _config(test_fraction=0.1, validation_fraction=0.2))
  assert [len(splits[s]) for s in ('train', 'validation', 'test')] == [21, 6, 3]
  assert _texts(splits['train']) | _texts(splits['validation']) | _texts(splits['test']) == _texts(
    ROWS
  )
  assert not _texts(splits['train']) & _texts(splits['test'])
  again = tsv_classification.split_rows(ROWS, _config(test_fraction=0.1, validation_fraction=0.2))
  other = tsv_classification.split_rows(
    ROWS, _config(test_fraction=0.1, validation_fraction=0.2, split_seed=1)
  )
  assert again == splits and _texts(other['test']) != _texts(splits['test'])


def test_folds_partition_the_texts():
  """5 folds: the test splits are disjoint and cover every text once; validation is cut from
  the rest, never from the fold."""
  tests = []
  for fold in range(5):
    splits = tsv_classification.split_rows(
      ROWS, _config(num_folds=5, fold=fold, validation_fraction=0.1)
    )
    assert len(splits['test']) == 6 and len(splits['validation']) == 3
    assert not _texts(splits['test']) & (_texts(splits['train']) | _texts(splits['validation']))
    tests.append(_texts(splits['test']))
  assert sorted(t for fold in tests for t in fold) == sorted(_texts(ROWS))


def test_files_of_their_own_are_used_as_they_are(tmp_path):
  """validation_path and test_path: those files are the splits; train is the whole tsv_path."""
  (tmp_path / 'train.tsv').write_text(''.join(f'{t}\t{l}\n' for _, t, l in ROWS))
  (tmp_path / 'test.tsv').write_text('a new one\tpos\ntext number 1\tpos\n')
  config = {
    **classification.default_config().to_dict(),
    'name': 'tsv_classification',
    'tsv_path': str(tmp_path / 'train.tsv'),
    'test_path': str(tmp_path / 'test.tsv'),
    'data_dir': str(tmp_path / 'd'),
    'layout': 'sentence',
  }
  labeled = classification.build(config, str(tmp_path / 'v'))
  sizes = {s: len(labeled.examples(s)) for s in ('train', 'validation', 'test')}
  assert sizes == {'train': 28, 'validation': 2, 'test': 2}  # 5% of 30 texts: 2 validation
  assert [e.text for e in labeled.examples('test')] == ['a new one', 'text number 1']
  fold = classification.build(
    {**config, 'test_path': '', 'num_folds': 3, 'fold': 2}, str(tmp_path / 'v3')
  )
  assert len(fold.examples('test')) == 10 and fold.name != labeled.name


@pytest.mark.parametrize(
  'overrides, message',
  [
    ({'num_folds': 1}, 'num_folds=1 must be 0 .off. or at least 2'),
    ({'num_folds': 5, 'fold': 5}, r'fold=5 must be in 0 \.\. 4'),
    (
      {'num_folds': 5, 'test_path': 't.tsv'},
      "test_path must be '' with config.dataset.num_folds=5",
    ),
    ({'validation_fraction': 1.0}, r'validation_fraction=1.0 must be in \(0, 1\)'),
    ({'test_path': '/no/such.tsv'}, 'config.dataset.test_path: no such file'),
  ],
)
def test_bad_split_fields(tmp_path, overrides, message):
  """Each bad split field is one error naming it."""
  (tmp_path / 'train.tsv').write_text(''.join(f'{t}\t{l}\n' for _, t, l in ROWS))
  config = {
    **classification.default_config().to_dict(),
    'name': 'tsv_classification',
    'tsv_path': str(tmp_path / 'train.tsv'),
    'data_dir': str(tmp_path / 'd'),
    **overrides,
  }
  with pytest.raises((ValueError, FileNotFoundError), match=message):
    classification.build(config, str(tmp_path / 'v'))


def test_unknown_test_label_is_refused():
  """A test label that train lacks is named (the model could never predict it)."""
  with pytest.raises(
    ValueError,
    match=r"\['odd'\] have no example in the train split .they "
    r'are in test',
  ):
    tsv_classification.split_rows(ROWS, files={'test': [(1, 'x', 'odd')]})
  assert np.isclose(len(tsv_classification.split_rows(ROWS)['test']), 2)


def test_compare_averages_over_folds(tmp_path):
  """Runs that differ only in dataset.fold are one setting: mean and sample std over the folds."""
  import json
  import os  # pylint: disable=import-outside-toplevel,multiple-imports

  from reports import runs as runs_lib  # pylint: disable=import-outside-toplevel

  for fold, accuracy in enumerate((0.90, 0.86, 0.88)):
    run = tmp_path / f'fold={fold}'
    os.makedirs(run)
    (run / 'config.json').write_text(
      json.dumps({'seed': 0, 'dataset': {'fold': fold, 'num_folds': 3}})
    )
    (run / 'metrics.jsonl').write_text(
      json.dumps({'step': 9, 'split': 'validation', 'accuracy': accuracy}) + '\n'
    )
  runs = [runs_lib.load_run(path) for path in runs_lib.find_runs([str(tmp_path)])]
  fields, [setting] = runs_lib.group_settings(runs)
  assert fields == [] and len(setting.runs) == 3
  stat = runs_lib.aggregate([runs_lib.summarize_run(r, ['accuracy']) for r in setting.runs])
  assert stat['accuracy'].mean == pytest.approx(0.88) and stat['accuracy'].std == pytest.approx(
    0.02
  )


SHARED = os.path.join(
  os.path.dirname(os.path.dirname(os.path.abspath(__file__))), '..', 'shared', 'data'
)


@pytest.mark.skipif(
  not os.path.isfile(os.path.join(SHARED, 'trec', 'test.tsv')),
  reason='the TREC corpus is not in ../shared/data/trec (see docs/real_corpora.md)',
)
def test_trec_official_test_and_a_tenth_of_train_for_validation(tmp_path):
  """TREC as configs/classification_tsv.py reads it: the 500 official test questions, 10% of the
  5,452 training questions (by distinct text) for validation, the six coarse classes."""
  config = {
    **classification.default_config().to_dict(),
    'name': 'tsv_classification',
    'tsv_path': os.path.join(SHARED, 'trec', 'train.tsv'),
    'test_path': os.path.join(SHARED, 'trec', 'test.tsv'),
    'validation_fraction': 0.1,
    'data_dir': str(tmp_path / 'd'),
    'layout': 'sentence',
  }
  labeled = classification.build(config, str(tmp_path / 'v'))
  sizes = {s: len(labeled.examples(s)) for s in ('train', 'validation', 'test')}
  assert sizes['test'] == 500 and sizes['train'] + sizes['validation'] == 5452
  assert 530 <= sizes['validation'] <= 560  # 10% of 5,381 distinct texts: 538 groups
  assert labeled.label_names == ['ABBR', 'DESC', 'ENTY', 'HUM', 'LOC', 'NUM']
