"""A causal language model and its tokenizer, from any source, for the commands and studies that
look inside it or continue a prompt."""

import dataclasses
import time
from typing import Any

from flax import nnx

from sources.source import Source, resolve


@dataclasses.dataclass(frozen=True)
class Decoder:
  """A causal language model and the tokenizer of its ids."""

  model: nnx.Module
  tokenizer: Any  # encode, encode_pieces, decode, tokens (data.pretrained_tokenizer)
  name: str


def require_causal(source: Source, reader: str = 'this command') -> Source:
  """`source`, or ValueError in one sentence naming `reader` unless it is a causal language
  model's."""
  if not source.causal:
    raise ValueError(
      f'{source.reference.flag}={source.reference.text} holds a {source.config.task} run of '
      f'{source.config.model.name}; {reader} reads a causal language model '
      '(configs/pretrained_lm.py, configs/gpt_text.py, ...).'
    )
  return source


def load_decoder(reference: str, *, flag: str = '--checkpoint', log=print) -> Decoder:
  """The causal language model `reference` names (any form `sources.resolve` takes), restored
  straight into the model's shapes, and a line with the time it took.

  Raises:
    ValueError: a model that is not a causal language model, or a checkpoint that cannot be read.
    FileNotFoundError: nothing of that name.
  """
  started = time.perf_counter()
  source = require_causal(resolve(reference, flag=flag))
  decoder = Decoder(source.model(), source.tokenizer, source.name)
  log(f'loaded {reference}: {time.perf_counter() - started:.1f} s')
  return decoder
