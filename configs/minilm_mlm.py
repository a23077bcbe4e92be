"""Continues the masked-LM training of the pretrained all-MiniLM-L6-v2 encoder
(models/pretrained.py) on a local plain-text file, with the checkpoint's own WordPiece tokenizer
and [MASK].

The default text is the Python Language Reference's topic pages that every CPython installation
ships (`pydoc_data/topics.py`, as configs/gpt_text.py); `--config.dataset.text_path=FILE` reads
another. The file is cut into windows of 62 pieces, each read as in BERT's pretraining,
`[CLS] pieces [SEP]`; 15% of the pieces (never [CLS], [SEP], [PAD], [UNK] or [MASK]) are picked
for prediction. Its last 10% is held out (validation, then test, 5% each).

`config.init_from` is the checkpoint written as an Attend workdir by `python convert.py`, whose
config.json is this config (`arg` names the checkpoint, as `--checkpoint` there, so another
local BERT folder converts and trains the same way). all-MiniLM-L6-v2 is a sentence encoder
without BERT's masked-LM head (`cls.predictions.*`): the conversion initialises a new one (dense,
LayerNorm, output bias; seed 0), says so and records it in WORKDIR/pretrained.json; its decoder is
the word embedding matrix, tied as in BERT. This run trains that head with the encoder.

Command:
  python convert.py --workdir=runs/minilm                # once; eval.py reads it frozen, too
  python train.py --config=configs/minilm_mlm.py --workdir=runs/minilm_mlm
  python eval.py --workdir=runs/minilm_mlm
  python eval.py --workdir=runs/minilm                   # the frozen checkpoint, new head
Result (2 cores of an AMD EPYC, CPU, shared with other runs; 60 steps of batch 16, 5 min 4 s of
wall time, 248 s of CPU time, for training with its two validations): masked-token accuracy on
the validation tail 0% -> 35.5% (loss 11.15 -> 3.83; 0% is the new head); eval.py on the test
tail 43.5% (loss 3.40). The default text is 40% quotes, escapes and table rules (easy masks); on
Pride and Prejudice (../shared/data/books) the same run gives 0% -> 8.1% (loss 10.94 -> 6.18) in
4 min 14 s: the short run trains mostly the new head. Details: docs/pretrained.md.
"""

import os
import pydoc_data.topics
from typing import Any

from configs.minilm_classifier import BERT_ADAMW
from models import pretrained
from training.config import default_config


def get_config(arg: str | None = None):
  """`arg`: the checkpoint whose architecture this is ('all-MiniLM-L6-v2', the default, or a
  local BERT folder / .zip, as `python convert.py --checkpoint`)."""
  return _config(pretrained.read_config(arg or pretrained.DEFAULT))


def converted(checkpoint: pretrained.Checkpoint) -> pretrained.Conversion:
  """A BERT checkpoint, read once (`pretrained.read`), as convert.py writes it: step 0 of
  this config, with the checkpoint's masked-LM head or, if it has none, a new one (seeded by
  `config.seed`) that the printed sentence names."""
  config = _config(checkpoint.config)
  model, report = pretrained.load_encoder(checkpoint, seed=config.seed)
  if not report['fresh']:
    head = 'its masked-LM head'
  else:
    head = (
      'a NEW masked-LM head (the checkpoint has no cls.predictions.*; seed '
      f'{config.seed}, decoder tied to the word embeddings: train it with '
      'configs/minilm_mlm.py before reading its predictions)'
    )
  return pretrained.Conversion(config, model, report, head)


def _config(checkpoint_config: dict[str, Any]):
  """This config for the architecture of a BERT checkpoint's config.json."""
  config = default_config(
    'language_modeling', 'encoder_mlm', **pretrained.config_fields(checkpoint_config)
  )
  config.dataset.update(
    name='text_file',
    text_path=os.path.abspath(pydoc_data.topics.__file__),
    vocab='pretrained',
    packing='stream',
    seq_length=64,
    held_out=0.05,
    batch_size=16,
    eval_batch_size=64,
  )
  config.init_from = 'runs/minilm'
  config.eval_at_start = True  # the converted checkpoint's metrics: the before
  config.num_train_steps = 60  # a short run: about 5 minutes on 2 CPU cores
  config.eval_every_steps = 60
  config.checkpoint_every_steps = 60
  config.num_eval_decode = 8  # rows whose filled-in masks validation shows
  config.learning_rate = 2e-4
  config.warmup_steps = 6
  config.update(BERT_ADAMW)
  return config
