"""A pretrained checkpoint (models/pretrained.py: BERT; models/pretrained_decoders.py: GPT-2 and
the Llama family) written as an Attend workdir, for convert.py.

The workdir is step 0 of a training config: its config.json, a checkpoint holding the loaded
model and that config's optimizer state, the checkpoint's own tokenizer in vocab/, and
pretrained.json (what was loaded, initialised and unused). train.py continues it and eval.py
reads it as the frozen model, like any run. The config comes from the caller (convert.py passes
configs/minilm_mlm.py's or configs/pretrained_lm.py's `get_config`): training/ reads no configs/.
"""

import json
import os
import tempfile
from typing import Callable

import ml_collections

from data.pretrained_tokenizer import PretrainedTokenizer
from data.tokenizers import save_tokenizers
from models import pretrained, pretrained_decoders
from tasks import VOCAB_DIR
from training import checkpoints, optim, steps
from training.workdir import record_config


def write_workdir(
  checkpoint: str, workdir: str, get_config: Callable[[str], ml_collections.ConfigDict]
) -> None:
  """Writes the checkpoint as an Attend workdir: step 0 of `get_config(checkpoint)` (its
  config.json and optimizer; the tokenizer in vocab/; what was loaded or initialised in
  pretrained.json). It is the `config.init_from` of configs/minilm_*.py, and eval.py reads it as
  the frozen model. `workdir` must be new or an empty directory.

  Args:
    checkpoint: `models.pretrained.DEFAULT` or a BERT checkpoint's folder / .zip.
    workdir: the workdir to write; refused before any file is read unless new or empty.
    get_config: the config of the workdir for a checkpoint name (a sentence encoder has no
      masked-LM head, so configs/minilm_mlm.py, the config that trains one, describes it). It
      is called after the refusal, since it reads the checkpoint's config.json.
  """
  if os.path.exists(workdir) and (not os.path.isdir(workdir) or os.listdir(workdir)):
    raise ValueError(
      f'--workdir={workdir} exists and is not an empty directory; convert into a new one.'
    )
  config = get_config(checkpoint)
  config.init_from = ''  # its weights are its own step 0
  read_checkpoint = pretrained.read(checkpoint)
  if read_checkpoint.config.get('model_type') == pretrained.MODEL_TYPE:
    model, report = pretrained.load_model(read_checkpoint, seed=config.seed)
  else:
    model, report = pretrained_decoders.load_decoder(read_checkpoint, seed=config.seed)
  tokenizer = PretrainedTokenizer(read_checkpoint.tokenizer_json)
  parent = os.path.dirname(os.path.abspath(workdir))
  os.makedirs(parent, exist_ok=True)
  # Written beside the workdir and moved in whole, so a failure part-way (a full disk, Ctrl-C)
  # leaves no half-written workdir that a second try would refuse.
  with tempfile.TemporaryDirectory(prefix='.attend-convert-', dir=parent) as staged:
    save_tokenizers(os.path.join(staged, VOCAB_DIR), tokenizer, tokenizer, dataset=checkpoint)
    saver = checkpoints.Checkpointer(os.path.join(staged, 'checkpoints'), max_to_keep=None)
    # The first batch's position (data.pipeline), so train.py can also continue this run in place.
    saver.save(
      steps.create_train_state(model, optim.make_optimizer(config)),
      dict(data=dict(epoch=0, batch=0), pretrained=checkpoint),
    )
    saver.wait()
    saver.close()
    record_config(staged, config, 0)
    with open(os.path.join(staged, 'pretrained.json'), 'w', encoding='utf-8') as f:
      json.dump(dict(checkpoint=checkpoint, **report), f, indent=1)
    os.makedirs(workdir, exist_ok=True)
    for name in sorted(os.listdir(staged)):
      os.rename(os.path.join(staged, name), os.path.join(workdir, name))
  if 'fresh' not in report:  # a decoder: every tensor is its own
    head = 'its output layer'
  elif not report['fresh']:
    head = 'its masked-LM head'
  else:
    head = (
      'a NEW masked-LM head (the checkpoint has no cls.predictions.*; seed '
      f'{config.seed}, decoder tied to the word embeddings: train it with '
      'configs/minilm_mlm.py before reading its predictions)'
    )
  print(
    f'Wrote {checkpoint} into {workdir}: {len(report["loaded"])} tensors loaded with {head}; '
    f'unused: {", ".join(report["unused"]) or "none"}.'
  )
