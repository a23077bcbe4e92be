"""Pretrained checkpoints as Attend models: one `read`, then the family's own table.

    from models import pretrained
    checkpoint = pretrained.read('SmolLM2-135M-Instruct')  # a short name, folder, .zip or .gguf
    model, report = pretrained.load_decoder(checkpoint)     # or load_encoder for a BERT
    model, tokenizer_json = pretrained.load('my_bert')      # both at once, any family

- files.py reads any checkpoint as one `Checkpoint` (config.json, tensors, tokenizer.json):
  `PACKAGES` (short names of checkpoints that ship in registry packages), a Hugging Face folder
  or `.zip`, whole or sharded, or a GGUF file (gguf_file.py, gguf_checkpoint.py,
  gguf_tokenizer.py).
- bert.py and decoders.py (its tensor tables in decoder_tables.py) are the families' tables:
  config.json -> the model's arguments, and each tensor -> an Attend parameter. They share
  tables.py and never import each other.
- `ARCHITECTURES` here is the registry of every architecture Attend reads, by config.json's
  `model_type`, each with its family; `family(config)` refuses any other, naming them.

Nothing else in models/ imports this package: it reads files into models, not the reverse.
"""

import dataclasses
from typing import Any, Callable

from flax import nnx

from models.pretrained import bert, decoders, tables
from models.pretrained.bert import load_encoder
from models.pretrained.decoders import load_decoder
from models.pretrained.files import (
  DEFAULT,
  PACKAGES,
  Checkpoint,
  Conversion,
  locate,
  read,
  read_config,
)

__all__ = [
  'ARCHITECTURES',
  'DEFAULT',
  'PACKAGES',
  'Checkpoint',
  'Conversion',
  'Family',
  'config_fields',
  'family',
  'load',
  'load_decoder',
  'load_encoder',
  'locate',
  'read',
  'read_config',
]


@dataclasses.dataclass(frozen=True)
class Family:
  """How one family turns a checkpoint into a model: `kind` 'encoder' (a BERT, the step 0 of
  configs/minilm_mlm.py) or 'decoder' (configs/pretrained_lm.py); `args`: config.json -> the
  model's arguments; `load`: a read checkpoint -> (the model, what was loaded)."""

  kind: str
  args: Callable[[dict[str, Any]], dict[str, Any]]
  load: Callable[..., tuple[nnx.Module, dict[str, list[str]]]]


ENCODER = Family('encoder', bert.model_args, load_encoder)
DECODER = Family('decoder', lambda config: decoders.decoder_args(config)[0], load_decoder)
# config.json's model_type -> its family: every architecture Attend reads.
ARCHITECTURES = {bert.MODEL_TYPE: ENCODER, **dict.fromkeys(decoders.ARCHITECTURES, DECODER)}


def family(config: dict[str, Any]) -> Family:
  """The family of a checkpoint's config.json; ValueError naming its model_type if Attend does
  not read it."""
  model_type = config.get('model_type')
  if model_type not in ARCHITECTURES:
    raise ValueError(
      f'config.json has model_type={model_type!r}; Attend reads {", ".join(ARCHITECTURES)}.'
    )
  return ARCHITECTURES[model_type]


def config_fields(config: dict[str, Any], **overrides: Any) -> dict[str, Any]:
  """`config.model` fields of a checkpoint's architecture (its config.json: `read_config`, or a
  read checkpoint's `config`), flat as `models.default_config` takes them; `overrides` change
  some (dropout, say)."""
  return tables.config_fields(family(config).args(config), **overrides)


def load(checkpoint: str = DEFAULT, **kwargs: Any) -> tuple[nnx.Module, str]:
  """`(model, tokenizer.json text)` of a checkpoint of any family (see `read`); `kwargs` go to
  the family's loader (`load_encoder`, `load_decoder`). The text is the tokenizer of
  `data.pretrained_tokenizer.PretrainedTokenizer(text)` (models/ imports no data/)."""
  read_checkpoint = read(checkpoint)
  model, _ = family(read_checkpoint.config).load(read_checkpoint, **kwargs)
  return model, read_checkpoint.tokenizer_json
