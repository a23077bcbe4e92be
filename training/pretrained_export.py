"""A workdir's decoder written out as a Hugging Face folder or a GGUF file, for export.py: the way
back of pretrained_workdir.py.

The checkpoint is chosen as eval.py chooses it (the best, else the latest; or 'best', 'latest',
a step, or a path WORKDIR/checkpoints/STEP) and its parameters are restored straight into the
model's shapes. The model's shapes need the vocabulary alone, so the run's text is not read
(it may have moved since). What can be refused is refused before the parameters are read: an
output that exists and is not empty, a workdir without a checkpoint, a preprocessing no
tokenizer.json expresses (data.tokenizer_json), a model no architecture holds exactly
(models.pretrained.fitting).
"""

import dataclasses
import json
import os

from data import language
from data.tokenizer_json import tokenizer_json
from data.tokenizers import load_tokenizers
import models
from models import pretrained
from models.pretrained import fitting, gguf_writer, locate, writer
from models.pretrained.gguf_file import is_gguf
from training import layout, restore
from training.config import read_config
from training.steps import merge_model

FORMATS = ('hf', 'gguf')


@dataclasses.dataclass(frozen=True)
class Request:
  """What export.py asks for: the workdir, its checkpoint ('' = the best, else the latest), the
  format (`FORMATS`), the output path and, for GGUF, the tensors' type (gguf_writer.TYPES)."""

  workdir: str
  out: str
  format: str = 'hf'
  checkpoint: str = ''
  dtype: str = 'f32'


class _Vocabulary:
  """The model's data arguments from the workdir's tokenizer alone (what `readable_state` asks
  of a task): no text is read."""

  def __init__(self, tokenizer):
    self.tokenizer = tokenizer

  def build_model(self, model_config, rngs):
    args = dict(vocab_size=self.tokenizer.vocab_size, pad_id=self.tokenizer.pad_id)
    return models.build(model_config, rngs=rngs, **args)


def _workdir_and_checkpoint(request: Request) -> tuple[str, str]:
  """`(workdir, checkpoint choice)`; a path WORKDIR/checkpoints/STEP names both."""
  workdir, step = layout.checkpoint_step(request.checkpoint) if request.checkpoint else ('', None)
  if step is None:
    return request.workdir, request.checkpoint
  if request.workdir and os.path.abspath(workdir) != os.path.abspath(request.workdir):
    raise ValueError(f'--checkpoint={request.checkpoint} is not a checkpoint of --workdir.')
  return workdir, str(step)


def _source(request: Request) -> restore.Source:
  """The workdir's checkpoint chosen, its config read, nothing restored yet."""
  workdir, checkpoint = _workdir_and_checkpoint(request)
  if not workdir or not os.path.isdir(workdir):
    raise FileNotFoundError(f'--workdir={workdir} does not exist; give a training workdir.')
  chosen = restore.choose(workdir, checkpoint)
  if chosen != 'best':
    checkpoints = restore.reader(layout.checkpoints_dir(workdir))
    try:
      if not checkpoints.steps():
        raise FileNotFoundError(f'{workdir} holds no checkpoint to export; train or convert first.')
      if chosen.isdigit() and int(chosen) not in checkpoints.steps():
        raise FileNotFoundError(
          f'{workdir} has no checkpoint of step {chosen}; it has {checkpoints.steps()}.'
        )
    finally:
      checkpoints.close()
  tokenizers = load_tokenizers(layout.vocab_dir(workdir))
  if tokenizers is None:
    raise FileNotFoundError(
      f'{workdir} holds no vocabulary (vocab/); it is not a training workdir.'
    )
  return restore.Source(workdir, read_config(workdir), _Vocabulary(tokenizers[0]), chosen)


def _origin(workdir: str) -> str | None:
  """The checkpoint the workdir's weights came from, if it is still there: the one convert.py
  read (pretrained.json), or the one train.py's `init_from` started from (followed through a
  workdir it names), so that a fine-tuned GGUF model keeps its file's metadata."""
  path = os.path.join(workdir, layout.PRETRAINED_FILE)
  if os.path.isfile(path):
    with open(path, encoding='utf-8') as f:
      name = json.load(f).get('checkpoint', '')
  else:
    name = read_config(workdir).get('init_from', '')
    if name and layout.holds_checkpoints(name):
      return _origin(name)
  if not name:
    return None
  try:
    located = locate(name)  # a short name's packaged file, or the path itself
  except ValueError:  # its package is no longer installed
    return None
  return located if os.path.exists(located) else None


def _vocabulary(tokenizer, origin: str | None, dataset) -> writer.Vocabulary:
  """The writer's view of the workdir's tokenizer. Attend's own vocabulary (character, word,
  SentencePiece) becomes a tokenizer.json that applies the run's preprocessing
  (`config.dataset`), with Attend's special ids. A checkpoint's own (a
  data.pretrained_tokenizer.PretrainedTokenizer) is written as it is, its special ids those of
  the origin's config.json where it is readable (a GGUF's metadata names them; the tokenizer's
  own guess is by the tokens' spelling)."""
  if tokenizer.kind != 'pretrained':
    preprocess = language.text_options(language.validate_config(dataset))
    text = tokenizer_json(tokenizer, preprocess)
    return writer.Vocabulary(text, '', tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id)
  ids = dict(
    bos=tokenizer.bos_id, eos=tokenizer.eos_id, pad=tokenizer.pad_id if tokenizer.has_pad else None
  )
  if origin is not None:
    try:
      config = pretrained.read_config(origin)
    except (ValueError, OSError):
      config = {}
    ids |= {k: config[f'{k}_token_id'] for k in ids if config.get(f'{k}_token_id') is not None}
  return writer.Vocabulary(
    tokenizer.tokenizer_json, tokenizer.chat_template, ids['bos'], ids['eos'], ids['pad']
  )


def export(request: Request) -> str:
  """Writes the workdir's chosen checkpoint as `request.format` at `request.out` and returns
  the sentence it prints.

  Raises:
    ValueError, FileNotFoundError: one sentence (see the module docstring); nothing is written.
  """
  if request.format not in FORMATS:
    raise ValueError(f'--format={request.format!r} must be one of {", ".join(FORMATS)}.')
  writer.refuse_existing(request.out)
  if request.format == 'gguf':
    gguf_writer.check_dtype(request.dtype)
  source = _source(request)
  tokenizer = source.task.tokenizer
  args = fitting.decoder_arguments(source.config.model, tokenizer.vocab_size)
  fit = fitting.fit(args)
  origin = _origin(source.workdir)
  vocabulary = _vocabulary(tokenizer, origin, source.config.dataset)
  if origin is not None and not is_gguf(origin):
    origin = None  # only a GGUF origin's metadata is copied
  if request.format == 'gguf':
    gguf_writer.check(fit, vocabulary, origin)
  else:
    writer.check_tokenizer(fit, vocabulary)
  restored = restore.restored(source, host=True)  # read, not computed with: no device copy
  model = merge_model(restored.state)
  if request.format == 'hf':
    with writer.staged(request.out, folder=True) as folder:
      writer.write_folder(folder, fit, model, vocabulary)
  else:
    with writer.staged(request.out, folder=False) as path:
      gguf_writer.write_gguf(path, fit, model, vocabulary, request.dtype, origin)
  what = 'a Hugging Face folder' if request.format == 'hf' else f'a {request.dtype} GGUF file'
  return (
    f'Wrote step {restored.step} of {source.workdir} as {what} of a {fit.model_type} model '
    f'into {request.out}.'
  )
