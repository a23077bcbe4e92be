"""A converted pretrained checkpoint written as an Attend workdir, for convert.py.

The workdir is step 0 of a training config: its config.json, a checkpoint holding the loaded
model and that config's optimizer state, the checkpoint's own tokenizer in vocab/, and
pretrained.json (what was loaded, initialised and unused). train.py continues it and eval.py
reads it as the frozen model, like any run. Which family the checkpoint is, its config, its
model and the words on its head come from the caller (convert.py, through the family's config
module: configs/minilm_mlm.py, configs/pretrained_lm.py): training/ names no model family.
"""

import json
import os
import tempfile

from data.pretrained_tokenizer import PretrainedTokenizer
from data.tokenizers import save_tokenizers
from models.pretrained import Checkpoint, Conversion
from training import checkpoints, layout, optim, steps
from training.workdir import record_config


def refuse_used(workdir: str) -> None:
  """ValueError unless `workdir` is new or an empty directory (convert.py asks before it reads
  the checkpoint)."""
  if os.path.exists(workdir) and (not os.path.isdir(workdir) or os.listdir(workdir)):
    raise ValueError(
      f'--workdir={workdir} exists and is not an empty directory; convert into a new one.'
    )


def save_vocab(workdir: str, checkpoint: Checkpoint) -> None:
  """The checkpoint's own tokenizer as WORKDIR/vocab/, where a run built in `workdir` reads it
  (config.dataset.vocab='pretrained')."""
  tokenizer = PretrainedTokenizer(checkpoint.tokenizer_json, chat_template=checkpoint.chat_template)
  save_tokenizers(layout.vocab_dir(workdir), tokenizer, tokenizer, dataset=checkpoint.name)


def write_workdir(workdir: str, checkpoint: Checkpoint, conversion: Conversion) -> None:
  """Writes a converted checkpoint as an Attend workdir and prints one sentence saying what was
  loaded: step 0 of `conversion.config` (its config.json and optimizer), the checkpoint's
  tokenizer in vocab/, and `conversion.report` in pretrained.json. eval.py reads it as the frozen
  model; it is the `config.init_from` of a training run.

  Args:
    workdir: the workdir to write; refused unless new or an empty directory.
    checkpoint: the checkpoint as read (`models.pretrained.read`): its name and tokenizer.
    conversion: what the checkpoint's family made of it (configs/minilm_mlm.py's or
      configs/pretrained_lm.py's `converted`).
  """
  refuse_used(workdir)
  config, report = conversion.config, conversion.report
  config.init_from = ''  # its weights are its own step 0
  parent = os.path.dirname(os.path.abspath(workdir))
  os.makedirs(parent, exist_ok=True)
  # Written beside the workdir and moved in whole, so a failure part-way (a full disk, Ctrl-C)
  # leaves no half-written workdir that a second try would refuse.
  with tempfile.TemporaryDirectory(prefix='.attend-convert-', dir=parent) as staged:
    save_vocab(staged, checkpoint)
    saver = checkpoints.Checkpointer(layout.checkpoints_dir(staged), max_to_keep=None)
    # The first batch's position (data.pipeline), so train.py can also continue this run in place.
    saver.save(
      steps.create_train_state(conversion.model, optim.make_optimizer(config)),
      dict(data=dict(epoch=0, batch=0), pretrained=checkpoint.name),
    )
    saver.wait()
    saver.close()
    record_config(staged, config, 0)
    with open(os.path.join(staged, layout.PRETRAINED_FILE), 'w', encoding='utf-8') as f:
      json.dump(dict(checkpoint=checkpoint.name, **report), f, indent=1)
    os.makedirs(workdir, exist_ok=True)
    for name in sorted(os.listdir(staged)):
      os.rename(os.path.join(staged, name), os.path.join(workdir, name))
  print(
    f'Wrote {checkpoint.name} into {workdir}: {len(report["loaded"])} tensors loaded with '
    f'{conversion.head}; unused: {", ".join(report["unused"]) or "none"}.'
  )
