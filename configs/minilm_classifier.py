"""Fine-tunes the pretrained all-MiniLM-L6-v2 encoder (models/pretrained.py) with a classification
head on a `text<TAB>label` file, with the checkpoint's own WordPiece tokenizer.

The dataset fields are those of configs/classification_tsv.py (`dataset.tsv_path`,
`dataset.validation_path`, `dataset.test_path`, the held-out fractions). `arg` picks a corpus of
../shared/data: 'trec' (default: its train file, 5% of it held out for validation, its test
file) or 'subj' (one file: 5% validation, 10% test). `config.init_from` is the pretrained
checkpoint written as an Attend workdir by `python convert.py` (the package's weights by
default; `--checkpoint=FOLDER` converts another local BERT checkpoint, whose architecture
`MODEL_CHECKPOINT` here must then name too). The head (mean of the final states, tanh layer,
linear) is new; WORKDIR/best keeps the checkpoint of best validation accuracy.

Command:
  python convert.py --workdir=runs/minilm
  python train.py --config=configs/minilm_classifier.py --workdir=runs/minilm_trec
  python eval.py --workdir=runs/minilm_trec
  python train.py --config=configs/minilm_classifier.py:subj --workdir=runs/minilm_subj
Result (2 cores of an AMD EPYC, CPU): TREC test accuracy 96.8% (macro-F1 96.5%; WORKDIR/best =
step 400, validation 95.6%), Kim 2014's best 93.6%; 5 min 38 s of wall time for training. Subj
(:subj, 10% test split of the one file): test accuracy 95.9% (WORKDIR/best = step 500, validation
95.2%), Kim's best 93.4%; 8 min 59 s of wall time for training. Details: docs/pretrained.md.
"""

from models import pretrained
from training.config import default_config

MODEL_CHECKPOINT = pretrained.DEFAULT  # the architecture; its weights come from init_from
# BERT's fine-tuning optimizer (Devlin et al. 2019): AdamW, beta2 0.999, eps 1e-8, decay 0.01,
# here with a cosine decay and no label smoothing; configs/minilm_mlm.py trains with it too.
BERT_ADAMW = dict(schedule='cosine', beta2=0.999, eps=1e-8, weight_decay=0.01, label_smoothing=0.0)
CORPORA = {
  'trec': dict(tsv_path='../shared/data/trec/train.tsv', test_path='../shared/data/trec/test.tsv'),
  'subj': dict(tsv_path='../shared/data/subj/subj.tsv', test_fraction=0.1),
}


def get_config(arg: str | None = None):
  """`arg`: 'trec' (default) or 'subj', the corpus of ../shared/data."""
  corpus = arg or 'trec'
  if corpus not in CORPORA:
    raise ValueError(f'configs/minilm_classifier.py:{corpus} is not one of {sorted(CORPORA)}.')
  config = default_config(
    'classification',
    'encoder_mlm',
    **pretrained.config_fields(pretrained.read_config(MODEL_CHECKPOINT)),
  )
  config.dataset.update(
    name='tsv_classification',
    builder_config='',
    key_sentences_key='',
    layout='sentence',
    max_length=64,
    batch_size=32,
    eval_batch_size=128,
    **CORPORA[corpus],
  )
  config.init_from = 'runs/minilm'
  config.num_train_steps = 500
  config.eval_every_steps = 100
  config.checkpoint_every_steps = 100
  config.num_eval_decode = 0
  config.learning_rate = 1e-4
  config.warmup_steps = 50
  config.update(BERT_ADAMW)
  return config
