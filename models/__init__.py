"""Flax NNX models built on `attention/`; `build(config.model, ...)` constructs one by name."""

from collections.abc import Mapping
import dataclasses
import inspect
import types
from typing import Any

from flax import nnx
import ml_collections
from ml_collections import config_dict

from models.captioning import Captioner
from models.classifiers import HAN, TransformerClassifier
from models.interfaces import (
  Classifier,
  EncoderDecoder,
  ImageCaptioner,
  ImageClassifier,
  LanguageModel,
  QuestionAnswerer,
  SequenceModel,
)
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


def _config_value(default: Any, annotation: Any) -> Any:
  """A default as a config value; `X | None = None` becomes an overridable X placeholder."""
  if default is not None:
    return default
  kinds = [t for t in getattr(annotation, '__args__', ()) if t is not types.NoneType]
  return config_dict.placeholder(kinds[0]) if len(kinds) == 1 else None


def _groups(cls: type) -> dict[str, Any]:
  """{argument: default instance} for the constructor's config dataclasses (e.g. `stack`), whose
  fields are plain fields of `config.model`."""
  parameters = inspect.signature(cls.__init__).parameters
  return {key: p.default for key, p in parameters.items() if dataclasses.is_dataclass(p.default)}


def _fields(cls: type) -> dict[str, Any]:
  """Every configurable field of `cls` at its default: the constructor's arguments that have a
  default, with each config dataclass replaced by its fields at the declared default."""
  fields = {}
  for key, parameter in inspect.signature(cls.__init__).parameters.items():
    if parameter.default is inspect.Parameter.empty or key == 'rngs':
      continue
    if dataclasses.is_dataclass(parameter.default):
      fields.update(
        {
          field.name: _config_value(getattr(parameter.default, field.name), field.type)
          for field in dataclasses.fields(parameter.default)
        }
      )
    else:
      fields[key] = _config_value(parameter.default, parameter.annotation)
  return fields


def default_config(name: str, **overrides: Any) -> ml_collections.ConfigDict:
  """`config.model` for `MODELS[name]`: every configurable field (see `_fields`) at its default.

  The arguments without a default (vocabulary sizes, special ids) come from the task's data and
  are left out. Every field is present, so `--config.model.FIELD=value` works for all of them.

  Args:
    name: a key of `MODELS`.
    **overrides: the experiment's values, where it differs from the defaults.

  Raises:
    ValueError: the name is unknown, or an override is not a field.
  """
  fields = _fields(model_class(name))
  unknown = sorted(set(overrides) - set(fields))
  if unknown:
    raise ValueError(
      f'config.model.{unknown[0]} is not a configurable argument of '
      f'{model_class(name).__name__}; valid fields: {sorted(fields)}.'
    )
  config = ml_collections.ConfigDict(dict(name=name, **fields))
  config.update(overrides)
  return config


def traced_rngs(seed: int) -> nnx.Rngs:
  """`nnx.Rngs(seed)` for a model built under a trace (`jax.eval_shape`, `jax.jit`): the same
  keys, drawn from counters held in array refs. A plain counter, stepped under a trace, makes
  flax compare the new count's `sharding` with the old one's, and a tracer's missing `sharding`
  raises an error whose message walks the whole trace so far: once per parameter, two thirds of
  SmolLM2's `jax.eval_shape` under cProfile."""
  with nnx.var_defaults(ref=True):
    return nnx.Rngs(seed)


def build(model_config: Mapping[str, Any], *, rngs: nnx.Rngs, **data_args: Any) -> nnx.Module:
  """Constructs `MODELS[model_config['name']]` from the config's other fields.

  Fields of a config dataclass argument (`stack`) become that dataclass, starting from the
  constructor's default instance; the others are keyword arguments.

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
    ValueError: the name is unknown, or a field is not one of the model's or is set (not None)
      although the data decides it, or a value is invalid (the message names the field).
  """
  kwargs = dict(model_config)
  model_cls = model_class(kwargs.pop('name', None))
  for key in set(kwargs) & set(data_args):
    if kwargs[key] is None:
      del kwargs[key]
  from_data = sorted(set(kwargs) & set(data_args))
  if from_data:
    raise ValueError(
      f'config.model.{from_data[0]} is set from the data ({from_data[0]}='
      f'{data_args[from_data[0]]!r}); remove it from the config.'
    )
  fields = set(_fields(model_cls))
  unknown = sorted(set(kwargs) - fields)
  if unknown:
    raise ValueError(
      f'config.model.{unknown[0]} is not an argument of {model_cls.__name__}; '
      f'valid fields: {sorted(fields - set(data_args))}.'
    )
  for group, default in _groups(model_cls).items():
    names = {field.name for field in dataclasses.fields(default)}
    values = {key: kwargs.pop(key) for key in sorted(names & set(kwargs))}
    kwargs[group] = dataclasses.replace(default, **values)
  return model_cls(**data_args, **kwargs, rngs=rngs)


__all__ = [
  'HAN',
  'LSTMBaseline',
  'MODELS',
  'NTM',
  'Captioner',
  'Classifier',
  'DecoderLM',
  'EncoderDecoder',
  'EncoderMLM',
  'ImageCaptioner',
  'ImageClassifier',
  'LanguageModel',
  'MemN2N',
  'QuestionAnswerer',
  'Seq2Seq',
  'SequenceModel',
  'Transformer',
  'TransformerClassifier',
  'ViT',
  'build',
  'default_config',
  'fitting',
  'model_class',
]
