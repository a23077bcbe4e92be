"""A causal language model and its tokenizer, read once, for the commands and studies that look
inside it.

`language_source` resolves a workdir (its config, tokenizer and chosen checkpoint, nothing read
yet: a command checks its flags against them first). `load_decoder` takes what the studies'
`--checkpoint` names: a workdir (a fine-tuned or converted run, read as eval.py reads it) or
anything `models.pretrained.read` reads (a short name such as SmolLM2-135M-Instruct, a Hugging
Face folder or `.zip`, a `.gguf` file), each restored straight into the model's shapes.
"""

import dataclasses
import os
import time
from typing import Any

from flax import nnx

from data.pretrained_tokenizer import PretrainedTokenizer
from models import pretrained
from training import layout, restore
from training.steps import merge_model


def language_source(workdir: str, checkpoint: str = '') -> restore.Source:
  """The workdir's checkpoint chosen and its run's config and tokenizer, nothing read yet
  (`restore.restored` reads it); ValueError unless it is a causal language model's."""
  source = restore.resolve(workdir, checkpoint=checkpoint)
  check_causal(source)
  return source


def check_causal(source: restore.Source, reader: str = 'this command') -> None:
  """ValueError, one sentence naming `reader`, unless `source` is a causal language model's."""
  if not getattr(source.task, 'causal', False):
    raise ValueError(
      f'--workdir={source.workdir} holds a {source.config.task} run of '
      f'{source.config.model.name}; {reader} reads a causal language model '
      '(configs/pretrained_lm.py, configs/gpt_text.py, ...).'
    )


@dataclasses.dataclass(frozen=True)
class Decoder:
  """A causal language model and the tokenizer of its ids."""

  model: nnx.Module
  tokenizer: Any  # encode, encode_pieces, decode, tokens (data.pretrained_tokenizer)
  name: str


def load_decoder(checkpoint: str, *, log=print) -> Decoder:
  """The causal language model `checkpoint` names (see the module docstring), and a line with
  the time it took.

  Raises:
    ValueError: a workdir of another kind of model, or a checkpoint that cannot be read.
    FileNotFoundError: nothing of that name.
  """
  started = time.perf_counter()
  if layout.holds_checkpoints(checkpoint):
    source = language_source(checkpoint)
    model = merge_model(restore.restored(source).state)
    decoder = Decoder(model, source.task.tokenizer, os.path.basename(checkpoint.rstrip('/')))
  else:
    read = pretrained.read(checkpoint)
    model, _ = pretrained.load_decoder(read)
    tokenizer = PretrainedTokenizer(read.tokenizer_json, chat_template=read.chat_template)
    decoder = Decoder(model, tokenizer, read.name)
  log(f'loaded {checkpoint}: {time.perf_counter() - started:.1f} s')
  return decoder
