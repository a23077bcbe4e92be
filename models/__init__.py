"""Flax NNX models built on `attention/`; `build(config.model, ...)` constructs one by name."""

from collections.abc import Mapping
import inspect
import types
from typing import Any

from flax import nnx
import ml_collections
from ml_collections import config_dict

from models.captioning import Captioner
from models.classifiers import HAN, TransformerClassifier
from models.interfaces import (Classifier, EncoderDecoder, ImageCaptioner, ImageClassifier,
                               LanguageModel, QuestionAnswerer, SequenceModel)
from models.language import DecoderLM, EncoderMLM
from models.memory import MemN2N
from models.ntm import NTM, LSTMBaseline
from models.seq2seq import Seq2Seq
from models.transformer import Transformer
from models.vision import ViT

MODELS = {
    'captioner': Captioner,
    'decoder_lm': DecoderLM,
    'encoder_mlm': EncoderMLM,
    'han': HAN,
    'lstm': LSTMBaseline,
    'memn2n': MemN2N,
    'ntm': NTM,
    'seq2seq': Seq2Seq,
    'transformer': Transformer,
    'transformer_classifier': TransformerClassifier,
    'vit': ViT,
}


def model_class(name: Any) -> type[nnx.Module]:
  """`MODELS[name]`; an unknown name raises ValueError listing the valid ones."""
  if name not in MODELS:
    raise ValueError(f'config.model.name={name!r} is not one of {sorted(MODELS)}.')
  return MODELS[name]


def fitting(interface: type) -> list[str]:
  """The names of the registered models whose class implements the Protocol `interface`."""
  return sorted(name for name, cls in MODELS.items() if issubclass(cls, interface))


def _config_value(parameter: inspect.Parameter) -> Any:
  """A parameter's default as a config value; `X | None = None` becomes an overridable X field."""
  if parameter.default is not None:
    return parameter.default
  kinds = [t for t in getattr(parameter.annotation, '__args__', ()) if t is not types.NoneType]
  return config_dict.placeholder(kinds[0]) if len(kinds) == 1 else None


def default_config(name: str, **overrides: Any) -> ml_collections.ConfigDict:
  """`config.model` for `MODELS[name]`: every constructor argument that has a default, at it.

  The arguments without a default (vocabulary sizes, special ids) come from the task's data and
  are left out. Every field is present, so `--config.model.FIELD=value` works for all of them.

  Args:
    name: a key of `MODELS`.
    **overrides: the experiment's values, where it differs from the defaults.

  Raises:
    ValueError: the name is unknown, or an override is not an argument with a default.
  """
  parameters = inspect.signature(model_class(name).__init__).parameters
  fields = {key: _config_value(p) for key, p in parameters.items()
            if p.default is not inspect.Parameter.empty and key != 'rngs'}
  unknown = sorted(set(overrides) - set(fields))
  if unknown:
    raise ValueError(f'config.model.{unknown[0]} is not a configurable argument of '
                     f'{model_class(name).__name__}; valid fields: {sorted(fields)}.')
  config = ml_collections.ConfigDict(dict(name=name, **fields))
  config.update(overrides)
  return config


def build(model_config: Mapping[str, Any], *, rngs: nnx.Rngs, **data_args: Any) -> nnx.Module:
  """Constructs `MODELS[model_config['name']]` with the config's other fields as keyword arguments.

  Args:
    model_config: `config.model`: the constructor arguments plus `name`.
    rngs: parameter initialisation keys.
    **data_args: the arguments a task derives from its data rather than from the config, e.g.
      `input_vocab_size`, `output_vocab_size` and `pad_id` from its tokenizers. A config field
      the data also sets is unset if it is None: configs list every argument with a default, so
      an optional data argument (`EncoderMLM`'s `num_classes`) sits in every config as None.

  Returns:
    The model.

  Raises:
    ValueError: the name is unknown, or a field is not an argument of the model or is set (not
      None) although the data decides it.
  """
  kwargs = dict(model_config)
  model_cls = model_class(kwargs.pop('name', None))
  accepted = set(inspect.signature(model_cls.__init__).parameters) - {'self', 'rngs'}
  for key in set(kwargs) & set(data_args):
    if kwargs[key] is None:
      del kwargs[key]
  from_data = sorted(set(kwargs) & set(data_args))
  if from_data:
    raise ValueError(f'config.model.{from_data[0]} is set from the data ({from_data[0]}='
                     f'{data_args[from_data[0]]!r}); remove it from the config.')
  unknown = sorted(set(kwargs) - accepted)
  if unknown:
    raise ValueError(f'config.model.{unknown[0]} is not an argument of {model_cls.__name__}; '
                     f'valid fields: {sorted(accepted - set(data_args))}.')
  return model_cls(**data_args, **kwargs, rngs=rngs)


__all__ = ['HAN', 'LSTMBaseline', 'MODELS', 'NTM', 'Captioner', 'Classifier', 'DecoderLM',
           'EncoderDecoder', 'EncoderMLM', 'ImageCaptioner', 'ImageClassifier', 'LanguageModel',
           'MemN2N', 'QuestionAnswerer', 'Seq2Seq', 'SequenceModel', 'Transformer',
           'TransformerClassifier', 'ViT', 'build', 'default_config', 'fitting', 'model_class']
