"""What a checkpoint reference names, decided in one place for every command.

A reference is the text a user gives (`--workdir`, `--checkpoint`, `config.init_from`):

- a training workdir (a folder with checkpoints/, or an Attend config.json whose run has not
  saved one yet), with a checkpoint choice: '' (the best where there is one, else the latest),
  'best', 'latest' or a step;
- WORKDIR/checkpoints/STEP: that workdir at that step;
- a pretrained checkpoint: a short name of `models.pretrained.PACKAGES`, a Hugging Face folder
  or `.zip`, or a `.gguf` file.

Anything else is refused with `unknown`'s one sentence, whichever command was given it.
"""

import dataclasses
import json
import os

from models import pretrained
from training import layout

WORKDIR = 'workdir'
PRETRAINED = 'pretrained'


@dataclasses.dataclass(frozen=True)
class Reference:
  """A parsed reference: `kind` (`WORKDIR` or `PRETRAINED`), `path` (the workdir, or the
  checkpoint's short name or path), a workdir's checkpoint `choice` ('', 'best', 'latest' or a
  step) and the `flag` it came from, which every sentence about it names."""

  text: str
  flag: str
  kind: str
  path: str
  choice: str = ''

  @property
  def is_workdir(self) -> bool:
    return self.kind == WORKDIR


def _forms() -> str:
  """What a reference may be, as every sentence about one says it."""
  return (
    'a training workdir (or WORKDIR/checkpoints/STEP), a packaged checkpoint '
    f'({", ".join(pretrained.PACKAGES)}), a Hugging Face folder or .zip, or a .gguf file'
  )


def unknown(flag: str, text: str) -> str:
  """The one sentence every command gives for a reference that names nothing."""
  return f'{flag}={text} names nothing Attend reads: give {_forms()}.'


def parse(text: str, *, flag: str = '--workdir', checkpoint: str = '') -> Reference:
  """The reference `text` names, with a workdir's `checkpoint` choice (a step, 'best',
  'latest', or WORKDIR/checkpoints/STEP of the same workdir).

  Raises:
    FileNotFoundError: `text` names nothing (`unknown`).
    ValueError: a checkpoint choice for a pretrained checkpoint, or one of another workdir.
  """
  if not text:
    raise ValueError(f'{flag} is empty; give {_forms()}.')
  workdir, step = layout.checkpoint_step(text)
  chosen_dir, chosen_step = layout.checkpoint_step(checkpoint) if checkpoint else ('', None)
  if chosen_step is not None:  # --checkpoint=WORKDIR/checkpoints/STEP
    if os.path.abspath(chosen_dir) != os.path.abspath(workdir):
      raise ValueError(f'--checkpoint={checkpoint} is not a checkpoint of {flag}={text}.')
    checkpoint = str(chosen_step)
  if step is not None:
    if checkpoint and checkpoint != str(step):
      raise ValueError(f'{flag}={text} names step {step}; --checkpoint={checkpoint} another.')
    checkpoint = str(step)
  if _is_workdir(workdir):
    return Reference(text, flag, WORKDIR, workdir, checkpoint)
  if step is None and (text in pretrained.PACKAGES or os.path.exists(os.path.expanduser(text))):
    if checkpoint:
      raise ValueError(
        f'--checkpoint={checkpoint} chooses among the checkpoints of a training workdir; '
        f'{flag}={text} is a pretrained checkpoint, read whole.'
      )
    return Reference(text, flag, PRETRAINED, text)
  raise FileNotFoundError(unknown(flag, text))


def _is_workdir(path: str) -> bool:
  """A folder with checkpoints/, or with an Attend config.json (it names a task; a Hugging Face
  config.json names a model_type): a run that may not have saved a checkpoint yet."""
  if layout.holds_checkpoints(path):
    return True
  config = os.path.join(path, layout.CONFIG_FILE)
  if not os.path.isfile(config):
    return False
  try:
    with open(config, encoding='utf-8') as f:
      return 'task' in json.load(f)
  except (OSError, ValueError):
    return False
