"""Flax NNX models built on `attention/`; `build(config.model, ...)` constructs one by name."""

from collections.abc import Mapping
import inspect
from typing import Any

from flax import nnx

from models.seq2seq import Seq2Seq
from models.transformer import Transformer

MODELS = {
    'seq2seq': Seq2Seq,
    'transformer': Transformer,
}


def build(model_config: Mapping[str, Any], *, input_vocab_size: int, output_vocab_size: int,
          rngs: nnx.Rngs) -> nnx.Module:
  """Constructs `MODELS[model_config['name']]` with the config's other fields as keyword arguments.

  Args:
    model_config: `config.model`: the constructor arguments plus `name`.
    input_vocab_size: source vocabulary size (from the data's tokenizer).
    output_vocab_size: target vocabulary size.
    rngs: parameter initialisation keys.

  Returns:
    The model.

  Raises:
    ValueError: the name is unknown, or the constructor rejects a field.
  """
  kwargs = dict(model_config)
  name = kwargs.pop('name', None)
  if name not in MODELS:
    raise ValueError(f'config.model.name={name!r} is not one of {sorted(MODELS)}.')
  model_class = MODELS[name]
  given_here = {'self', 'rngs', 'input_vocab_size', 'output_vocab_size'}
  accepted = set(inspect.signature(model_class.__init__).parameters) - given_here
  unknown = sorted(set(kwargs) - accepted)
  if unknown:
    raise ValueError(f'config.model.{unknown[0]} is not an argument of {model_class.__name__}; '
                     f'valid fields: {sorted(accepted)}.')
  return model_class(input_vocab_size=input_vocab_size, output_vocab_size=output_vocab_size,
                     **kwargs, rngs=rngs)
