"""HAN on a local file of `text<TAB>label` lines (the common export format of labelling tools).

Classes are the distinct labels of the training file; lines without a tab or with an empty side
are skipped and counted. The splits (data/tsv_classification.py, docs/real_corpora.md):
- `dataset.tsv_path`: the training file. `dataset.validation_path` and `dataset.test_path` name
  files of their own where the corpus has them (an official test set);
- a split without a file is cut from tsv_path: `dataset.validation_fraction` and
  `dataset.test_fraction` of its distinct texts (5% each by default), by `dataset.split_seed`;
- `dataset.num_folds=10 dataset.fold=0..9`: k-fold cross-validation of one file, fold `fold` as
  the test split (sweep.py over the folds; compare.py reports mean and std over them).

Command:
  python train.py --config=configs/classification_tsv.py \
      --config.dataset.tsv_path=reviews.tsv --workdir=runs/classification_tsv
  python eval.py --workdir=runs/classification_tsv
Result: not measured here (needs a file of your own).
"""

from configs import han


def get_config(arg: str | None = None):
  """`arg` is unused."""
  del arg
  config = han.get_config()
  config.dataset.update(name='tsv_classification', builder_config='', tsv_path='',
                        key_sentences_key='')
  config.num_train_steps = 3000
  return config
