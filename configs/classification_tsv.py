"""HAN on a local file of `text<TAB>label` lines (the common export format of labelling tools).

Classes are the distinct labels of the file; lines without a tab or with an empty side are
skipped and counted. 5% of the lines are held out for validation and 5% for test.

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
