"""The classic reference point for a text classifier: a linear SVM on binary bags of n-grams.

It reads a classification config's dataset exactly as train.py does (the same files, the same
seeded validation and test cuts or fold, the same lower-casing and punctuation splitting), fits
scikit-learn's LinearSVC on the train split for each n-gram range and cost C of a small grid,
picks the pair with the best validation accuracy and evaluates the test split once with it. A
from-scratch attention classifier should beat this; Zhang & Lee (2003) report 87.4% for an SVM on
bags of n-grams on TREC's coarse classes.

Command (TREC, split as configs/classification_tsv.py splits it):
  python -m benchmarks.ngram_baseline --config=configs/classification_tsv.py \\
      --config.dataset.tsv_path=../shared/data/trec/train.tsv \\
      --config.dataset.test_path=../shared/data/trec/test.tsv
Result (2 cores of an AMD EPYC, CPU): TREC, unigrams and bigrams with C = 1 best on validation
(86.9% of 550), test accuracy 89.8%, in 31 s. Subj, the ten folds of configs/classification_tsv.py
(`--config.dataset.num_folds=10 --config.dataset.fold=K`): 91.4 +- 1.2%, 15 to 25 s a fold.
"""

import tempfile

from absl import app
from ml_collections import config_flags
import numpy as np
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.svm import LinearSVC

from data import classification
from training import failures

PROGRAM = 'benchmarks.ngram_baseline'
with failures.flag_errors(PROGRAM):  # the config file is read here
  _CONFIG = config_flags.DEFINE_config_file(
    'config', 'configs/classification_tsv.py', 'A classification config; only its dataset is read.'
  )
NGRAM_RANGES = ((1, 1), (1, 2), (1, 3))
COSTS = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0)


def texts_and_labels(
  labeled: classification.LabeledText, split: str
) -> tuple[list[str], np.ndarray]:
  """The preprocessed texts of `split` (sentences joined by spaces) and their label ids."""
  examples = labeled.examples(split)
  return [' '.join(e.sentences) for e in examples], np.array([e.label for e in examples])


def select_and_test(train, validation, test) -> list[dict]:
  """Validation accuracy of every (n-gram range, C); the best pair's test accuracy is added to
  its row (`test`), and only to its row: the test split is read once."""
  rows, best = [], None
  for ngrams in NGRAM_RANGES:
    # Pieces are the pipeline's words: split on whitespace, punctuation already separated.
    vectorizer = CountVectorizer(
      ngram_range=ngrams, token_pattern=r'\S+', lowercase=False, binary=True
    ).fit(train[0])
    features = [vectorizer.transform(split[0]) for split in (train, validation)]
    for cost in COSTS:
      svm = LinearSVC(C=cost, max_iter=20000).fit(features[0], train[1])
      rows.append(dict(ngrams=ngrams, C=cost, validation=svm.score(features[1], validation[1])))
      if best is None or rows[-1]['validation'] > best[0]['validation']:
        best = rows[-1], vectorizer, svm
  row, vectorizer, svm = best
  row['test'] = svm.score(vectorizer.transform(test[0]), test[1])
  return rows


def report(dataset) -> None:
  """Prints the validation table of `dataset` (a config's) and the chosen pair's test accuracy."""
  with tempfile.TemporaryDirectory() as vocab_dir:  # build() saves a vocabulary; none is kept
    labeled = classification.build(dataset, vocab_dir)
  splits = [
    texts_and_labels(labeled, getattr(dataset, f'{name}_split'))
    for name in ('train', 'eval', 'test')
  ]
  print(
    f'{len(splits[0][0])} train, {len(splits[1][0])} validation, {len(splits[2][0])} test '
    f'texts of {dataset.name}; accuracy on validation (C across):'
  )
  rows = select_and_test(*splits)
  print('n-grams  ' + ' '.join(f'{c:>6g}' for c in COSTS))
  for ngrams in NGRAM_RANGES:
    cells = [f'{100 * r["validation"]:6.1f}' for r in rows if r['ngrams'] == ngrams]
    print(f'{ngrams[0]}-{ngrams[1]}      ' + ' '.join(cells))
  chosen = next(r for r in rows if 'test' in r)
  print(
    f'Best on validation: {chosen["ngrams"][0]}-{chosen["ngrams"][1]}-grams, C = '
    f'{chosen["C"]:g} ({100 * chosen["validation"]:.1f}%); test accuracy '
    f'{100 * chosen["test"]:.1f}%.'
  )


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  failures.run(PROGRAM, lambda: report(_CONFIG.value.dataset))  # a user's mistake: one sentence


if __name__ == '__main__':
  app.run(main, flags_parser=failures.parse_flags)
