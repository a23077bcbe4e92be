"""A checkpoint reference resolved once (`resolve`), at the entry point, into a typed `Source`.

A `Source` carries everything a command reads of a checkpoint: its config (a workdir's run, or a
pretrained checkpoint's architecture as a config), its tokenizer, the model's shapes built from
the vocabulary alone where it gives the model's sizes (no Task, no training rows read), its
parameters (on the device, on the host, or as named arrays for a fine-tune) and its origin.
Everything below an entry point receives the Source, never the string.
"""

import contextlib
import dataclasses
import functools
import json
import os
import tempfile
from typing import Any

from absl import logging
from flax import nnx
import ml_collections
import numpy as np

from data.pretrained_tokenizer import PretrainedTokenizer
from data.tokenizers import load_tokenizers
import models
from models import pretrained
from sources.reference import Reference, parse
import tasks
from training import layout, restore, sharding
from training import workdir as workdir_lib
from training.checkpoints import Checkpointer, flatten
from training.config import default_config, read_config, swap_notes
from training.pretrained_workdir import save_vocab
from training.setup import readable_state
from training.steps import merge_model

# A pretrained checkpoint's family -> (task, model) of the config its architecture becomes.
_PRETRAINED_CONFIGS = {
  'decoder': ('language_modeling', 'decoder_lm'),
  'encoder': ('language_modeling', 'encoder_mlm'),
}


class ModelShapes:
  """What `training.setup` asks of a task to build a model (`build_model`), from the model's
  data arguments alone (the vocabulary's size and padding id): no Task, no text read."""

  def __init__(self, **args: Any):
    self.args = args

  def build_model(self, model_config, rngs: nnx.Rngs) -> nnx.Module:
    return models.build(model_config, rngs=rngs, **self.args)


@dataclasses.dataclass(frozen=True)
class Source:
  """A resolved checkpoint reference (see the module docstring).

  `config` is the run's (as a command reads it: `restore.eval_config`) or, for a pretrained
  checkpoint, its architecture's under `_PRETRAINED_CONFIGS`; `tokenizer` the ids the model
  reads (None for a run without text); `checkpoint` a pretrained checkpoint as read (its tensors
  read when asked for).
  """

  reference: Reference
  config: ml_collections.ConfigDict
  tokenizer: Any
  average_last: int = 1
  checkpoint: pretrained.Checkpoint | None = None

  @property
  def workdir(self) -> str | None:
    return self.reference.path if self.reference.is_workdir else None

  @property
  def choice(self) -> str:
    """A workdir's checkpoint: 'best', 'latest' or a step; '' for a pretrained checkpoint."""
    return self.reference.choice

  @property
  def name(self) -> str:
    if self.reference.is_workdir:
      return os.path.basename(os.path.normpath(self.reference.path))
    return self.checkpoint.name

  @property
  def model_fields(self) -> dict[str, Any]:
    """The `config.model` fields the parameters were trained with: a workdir's, or the fields of
    a pretrained checkpoint's architecture alone (`pretrained.config_fields`)."""
    if self.checkpoint is not None:
      return pretrained.config_fields(self.checkpoint.config)
    return dict(self.config.model)

  def origin(self) -> str | None:
    """The pretrained checkpoint file or folder the parameters came from, where it still is:
    the checkpoint itself, the one convert.py read (pretrained.json), or the one a fine-tune's
    `init_from` started from (followed through a workdir it names), so that an export keeps
    a GGUF file's metadata."""
    return _origin(self.reference.path if self.reference.is_workdir else '', self.reference.path)

  @property
  def causal(self) -> bool:
    """Whether the model is a causal language model."""
    return (
      self.config.task == 'language_modeling' and models.model_class(self.config.model.name).causal
    )

  @functools.cached_property
  def task(self) -> tasks.Task:
    """The run's whole task (its data read and cut), for a command that reads its examples
    (eval.py); built in a staging copy of the vocabulary, so nothing is written to the workdir."""
    if not self.reference.is_workdir:
      raise ValueError(
        f'{self.reference.flag}={self.reference.text} is a pretrained checkpoint, which holds no '
        'run to evaluate on its data; convert it into a workdir first (convert.py) and give that.'
      )
    with workdir_lib.staging(self.reference.path) as staged:
      return tasks.build(self.config, staged)

  def builder(self):
    """What builds the model's shapes: the vocabulary alone for a causal language model or a
    pretrained checkpoint, else the task."""
    if self.tokenizer is not None and (self.causal or self.checkpoint is not None):
      return ModelShapes(vocab_size=self.tokenizer.vocab_size, pad_id=self.tokenizer.pad_id)
    return self.task

  def restore(self, *, host: bool = False) -> restore.Restored:
    """A workdir's chosen checkpoint read straight into the model's shapes (no random init, no
    optimizer state); with `host`, as NumPy arrays on no device (`restore.read_state`)."""
    if not self.reference.is_workdir:
      raise ValueError(
        f'{self.reference.flag}={self.reference.text} is a pretrained checkpoint, with no train '
        'state to restore; Source.model reads its weights.'
      )
    mesh = sharding.make_mesh(self.config.mesh)
    like = readable_state(self.config, self.builder(), mesh)
    state, step = restore.read_state(
      self.reference.path, self.choice, like, average_last=self.average_last, host=host
    )
    return restore.Restored(self.config, mesh, state, step, self.choice)

  def model(self) -> nnx.Module:
    """The model with the source's parameters: a workdir's chosen checkpoint, or the pretrained
    checkpoint's weights (`models.pretrained`'s family loader)."""
    if self.reference.is_workdir:
      return merge_model(self.restore().state)
    model, _ = pretrained.family(self.checkpoint.config).load(self.checkpoint)
    return model

  def parameters(self, check=lambda shapes: None, *, arrays: bool = True):
    """`(step, {'params.PATH': shape}, {'params.PATH': array} or None)`: the parameters a
    fine-tune starts from, as Attend names them. A workdir's damaged checkpoint is skipped for
    the one before it; `check(shapes)` raises (CheckpointMismatchError) on parameters of another
    model, before any array is read. A pretrained checkpoint is step 0: without `arrays` its
    shapes come from its config alone; with them, from the arrays read (`init_from.check` ran
    the metadata check before), so its model is not traced a second time.

    Raises:
      FileNotFoundError: the workdir holds no checkpoint (or not the chosen step).
    """
    if not self.reference.is_workdir:
      if not arrays:
        shapes = self._pretrained_shapes()
        check(shapes)
        return 0, shapes, None
      params = flatten(dict(params=nnx.to_pure_dict(nnx.state(self.model(), nnx.Param))))
      shapes = {key: tuple(np.shape(value)) for key, value in params.items()}
      check(shapes)
      return 0, shapes, params
    best = self.choice == 'best'
    directory = (layout.best_dir if best else layout.checkpoints_dir)(self.reference.path)
    checkpointer = Checkpointer(directory, max_to_keep=None, create=False, local=not arrays)

    def read(candidate: int):
      shapes = {k: v for k, v in checkpointer.shapes(candidate).items() if k.startswith('params.')}
      check(shapes)
      return shapes, checkpointer.read_arrays(candidate) if arrays else None

    try:
      steps = checkpointer.steps()
      step = int(self.choice) if self.choice.isdigit() else None
      if not steps or (step is not None and step not in steps):
        raise FileNotFoundError(
          f'{self.reference.flag}={self.reference.text} holds no checkpoint'
          f'{f" at step {step}" if step is not None else ""} (saved steps: {steps or "none"}); '
          'name a training workdir, WORKDIR/checkpoints/STEP or a pretrained checkpoint.'
        )
      candidates = [step] if step is not None else steps[::-1]
      step, (shapes, read_arrays) = checkpointer.first_readable(candidates, read)
      return step, shapes, read_arrays
    finally:
      checkpointer.close()

  def _pretrained_shapes(self) -> dict[str, tuple[int, ...]]:
    """The pretrained model's parameter shapes, from its config alone (nothing read)."""
    like = readable_state(self.config, self.builder())
    flat = flatten(dict(params=like.params))
    return {key: tuple(np.shape(value)) for key, value in flat.items()}

  @contextlib.contextmanager
  def vocabulary(self):
    """A directory whose vocab/ a run starting from this source begins with: the workdir itself,
    or a temporary one holding a pretrained checkpoint's tokenizer (its embeddings mean something
    with its own ids only)."""
    if self.reference.is_workdir:
      yield self.reference.path
      return
    with tempfile.TemporaryDirectory(prefix='attend-source-') as directory:
      save_vocab(directory, self.checkpoint)
      yield directory


def resolve(
  text: str,
  *,
  flag: str = '--workdir',
  checkpoint: str = '',
  average_last: int = 1,
  config: ml_collections.ConfigDict | None = None,
  eval_lengths=(),
  newest: bool = False,
) -> Source:
  """The `Source` that `text` names (`sources.reference.parse`), its config and tokenizer read,
  no parameter read yet: what a command checks a request against before the slow load.

  Args:
    text: the reference, as the user gave it.
    flag: the flag or field it came from (every sentence names it).
    checkpoint: a workdir's choice ('best', 'latest', a step, WORKDIR/checkpoints/STEP); ''
      = the best where there is one, else the latest (`restore.choose`), or with `newest` the
      newest readable checkpoint (a fine-tune's start).
    average_last: how many newest checkpoints to average (1 = none).
    config: the config to build a workdir's model with; None = its own.
    eval_lengths: language models: also evaluate rows of these lengths.

  Raises:
    FileNotFoundError: it names nothing, or a workdir without a checkpoint.
    ValueError: a bad choice; a checkpoint that cannot be read, in one sentence naming it.
  """
  reference = parse(text, flag=flag, checkpoint=checkpoint)
  if not reference.is_workdir:
    return _pretrained(reference)
  workdir = reference.path
  if newest and not reference.choice:
    chosen = 'latest'
  else:
    chosen = restore.choose(workdir, reference.choice, average_last)
  restore.check_has_checkpoint(workdir, chosen)
  trained = read_config(workdir)
  config = restore.eval_config(config or trained, eval_lengths)
  for note in swap_notes(trained.model, config.model, config.dataset.get('seq_length')):
    logging.warning('%s', note)
  tokenizers = load_tokenizers(layout.vocab_dir(workdir))
  tokenizer = tokenizers[1] if tokenizers else None
  reference = dataclasses.replace(reference, choice=chosen)
  return Source(reference, config, tokenizer, average_last)


def _pretrained(reference: Reference) -> Source:
  """A pretrained checkpoint read once (config.json and tokenizer; tensors when asked for)."""
  try:
    checkpoint = pretrained.read(reference.path)
    family = pretrained.family(checkpoint.config)
  except ValueError as error:
    raise ValueError(f'{reference.flag}={reference.text}: {error}') from None
  task, model = _PRETRAINED_CONFIGS[family.kind]
  config = default_config(task, model, **pretrained.config_fields(checkpoint.config))
  config.dataset.vocab = 'pretrained'
  tokenizer = PretrainedTokenizer(checkpoint.tokenizer_json, chat_template=checkpoint.chat_template)
  return Source(reference, config, tokenizer, checkpoint=checkpoint)


def _origin(workdir: str, name: str) -> str | None:
  """`Source.origin` of `workdir` ('' = `name` is a pretrained checkpoint)."""
  if workdir:
    path = os.path.join(workdir, layout.PRETRAINED_FILE)
    if os.path.isfile(path):
      with open(path, encoding='utf-8') as f:
        name = json.load(f).get('checkpoint', '')
    else:
      name = read_config(workdir).get('init_from', '')
      if name and layout.holds_checkpoints(name):
        return _origin(name, '')
  if not name:
    return None
  try:
    located = pretrained.locate(name)  # a short name's packaged file, or the path itself
  except ValueError:  # its package is no longer installed
    return None
  return located if os.path.exists(located) else None
