"""Which Hugging Face architecture holds an Attend decoder exactly, and its tensors under that
architecture's names: the first half of writing a model out (writer.py, gguf_writer.py).

A decoder's arguments (`decoder_arguments`: the workdir's `config.model` and the vocabulary)
fit a `model_type` of decoders.ARCHITECTURES when its config.json, written by the way back
(`Architecture.config`, decoder_configs.py), is read by the way in (`decoders.decoder_args`) as
the same computation: every layer's attention, norms, feed-forward and positions, and the
output options. Fields that only train (dropout, the kernel, the cache's dtype) do not count.
`fit` tries the architectures in `ORDER` and takes the first that fits; where none does, it
refuses in one sentence naming the field, before anything is written.

Rotary positions in Attend's own 'pairs' layout fit too: the query and key rows (and a
qk-norm's scales) are reordered into Hugging Face's halves (`HFTensors`), as llama.cpp's
converter reorders them the other way.
"""

from collections.abc import Mapping
import dataclasses
import math
from typing import Any

import numpy as np

from models.pretrained.decoders import ARCHITECTURES, decoder_args
from models.pretrained.gguf_checkpoint import unpermute
from models.pretrained.tables import PAD_ID, Gathered
from models.stack_config import StackConfig

# The order architectures are tried in: the plainest first, so that a Llama is written as Llama
# and not as Mistral with no window.
ORDER = ('llama', 'mistral', 'qwen2', 'gemma3_text', 'gpt2')
# export.py's --format names and what each writes (formats.py gives each its writer).
FORMATS = {'hf': 'a Hugging Face folder', 'gguf': 'a GGUF file'}
_AS = ' or '.join(f'{what} (--format={name})' for name, what in FORMATS.items())
# Fields that decide how the model trains or runs, not what it computes.
_TRAINING_ONLY = dict(
  dropout_rate=0.0, attention_dropout_rate=0.0, attention_impl=None, cache_dtype='float32'
)
# Variants no written architecture computes, refused by name before any architecture is tried:
# field -> (its value when off, where such a model could live instead).
_NO_HOME = 'only an Attend workdir holds it'
_VARIANTS = {
  'attention': ('softmax', f'no transformers or llama.cpp architecture computes it; {_NO_HOME}'),
  'feature_map': ('elu', f'a learned feature map has no config.json or GGUF field; {_NO_HOME}'),
  'sink_tokens': (0, f'kept first tokens have no config.json or GGUF field; {_NO_HOME}'),
  'sink': (
    False,
    f"transformers' gpt_oss has learned sinks, which is not written here; {_NO_HOME}",
  ),
  'score': ('scaled_dot', f'only the scaled dot product is written; {_NO_HOME}'),
}
_POSITION_HOMES = {
  'alibi': "transformers' Bloom, MPT and Falcon have ALiBi, which are not written here",
  't5': "a T5 bias lives in transformers' T5 encoder-decoders only",
}


@dataclasses.dataclass(frozen=True)
class Fit:
  """An Attend decoder as an architecture: its `model_type`, config.json and tensor table."""

  model_type: str
  config: dict[str, Any]
  rows: list
  pairs: bool  # rotary positions in Attend's 'pairs' layout: q/k rows are reordered


def decoder_arguments(fields: Mapping[str, Any], vocab_size: int) -> dict[str, Any]:
  """DecoderLM's arguments (as `decoders.decoder_args` gives them) of a workdir's `config.model`
  (its flat fields) and the vocabulary size; ValueError unless the model is a `decoder_lm`."""
  if fields.get('name') != 'decoder_lm':
    raise ValueError(
      f"config.model.name={fields.get('name')!r}: a decoder language model ('decoder_lm') is "
      f'what exports as {_AS}.'
    )
  names = {field.name for field in dataclasses.fields(StackConfig)}
  stack = StackConfig(**{key: value for key, value in fields.items() if key in names})
  options = dict(tie_output=True, output_bias=True, scale_embeddings=True)
  options.update({key: fields[key] for key in options if key in fields})
  return dict(vocab_size=vocab_size, pad_id=PAD_ID, stack=stack, **options)


def _layer(stack: StackConfig, i: int) -> dict[str, Any]:
  """Layer i's computation as comparable fields: its own window and rotary base (`layer_config`),
  defaults made explicit, the fields that only train set aside."""
  layer = stack.layer_config(i)
  fields = dataclasses.asdict(layer) | _TRAINING_ONLY
  fields.update(
    global_every=0,
    rope_base_global=None,
    d_k=layer.head_size,
    d_v=layer.value_size,
    num_kv_heads=layer.kv_heads(layer.num_heads),
    query_scale=layer.query_scale or layer.head_size**-0.5,
  )
  if layer.positions == 'rope':
    fields['rope_layout'] = 'halves'  # 'pairs' is reordered on the way out
  else:
    fields.update(rope_base=None, rope_layout=None)
  return fields


def _same(a: Any, b: Any) -> bool:
  if isinstance(a, float) and isinstance(b, (int, float)):
    return math.isclose(a, b, rel_tol=1e-12)
  return a == b


def differences(ours: dict[str, Any], theirs: dict[str, Any]) -> list[tuple[str, Any, Any]]:
  """`(field, our value, theirs)` for each way two decoders' arguments compute differently."""
  found = []
  for option in ('tie_output', 'scale_embeddings', 'output_bias', 'vocab_size'):
    if option == 'output_bias' and ours['tie_output']:
      continue  # a tied head has no bias either way
    if ours[option] != theirs[option]:
      found.append((option, ours[option], theirs[option]))
  a, b = ours['stack'], theirs['stack']
  if a.num_layers != b.num_layers:
    return [*found, ('num_layers', a.num_layers, b.num_layers)]
  for i in range(a.num_layers):
    layer_a, layer_b = _layer(a, i), _layer(b, i)
    for field, value in layer_a.items():
      if not _same(value, layer_b[field]) and field not in [f for f, _, _ in found]:
        found.append((field, value, layer_b[field]))
  return found


def _tried(model_type: str, args: dict[str, Any]) -> tuple[dict[str, Any], list]:
  """The config.json of `args` as `model_type`, and how its reading differs from `args`."""
  config = ARCHITECTURES[model_type].config(args)
  try:
    back, _ = decoder_args(config)
  except ValueError as error:  # a value the reader refuses (an activation it has no name for)
    return config, [('config.json', str(error), None)]
  return config, differences(args, back)


def _refuse_variants(stack: StackConfig) -> None:
  for field, (off, home) in _VARIANTS.items():
    if getattr(stack, field) != off:
      raise ValueError(
        f'config.model.{field}={getattr(stack, field)!r} cannot be written as {_AS}: {home}.'
      )
  if stack.positions in _POSITION_HOMES:
    raise ValueError(
      f'config.model.positions={stack.positions!r} cannot be written as {_AS}: '
      f'{_POSITION_HOMES[stack.positions]}; {_NO_HOME}.'
    )


def fit(args: dict[str, Any]) -> Fit:
  """The first architecture of `ORDER` that computes the decoder of `args` exactly.

  Raises:
    ValueError: one sentence naming the field no architecture holds (a variant by name; else
      the first field where the nearest architecture differs) and where it could live.
  """
  stack: StackConfig = args['stack']
  _refuse_variants(stack)
  tried = {model_type: _tried(model_type, args) for model_type in ORDER}
  for model_type, (config, missed) in tried.items():
    if not missed:
      rows = ARCHITECTURES[model_type].rows(stack.num_layers, config)
      pairs = stack.positions == 'rope' and stack.rope_layout == 'pairs'
      return Fit(model_type, config, rows, pairs)
  nearest = min(ORDER, key=lambda model_type: len(tried[model_type][1]))
  field, ours, theirs = tried[nearest][1][0]
  if field == 'config.json':
    raise ValueError(f'The nearest architecture, {nearest}, cannot hold this model: {ours}')
  raise ValueError(
    f'config.model.{field}={ours!r} fits none of {", ".join(ORDER)} (the nearest, {nearest}, '
    f'has {field}={theirs!r}), so the model cannot be written as {_AS}; {_NO_HOME}.'
  )


class HFTensors(Mapping):
  """A model's tensors under its fit's Hugging Face names (`Gathered`), each computed when asked
  for, with 'pairs' rotary rows reordered into halves."""

  def __init__(self, model, fit_: Fit):
    self._gathered = Gathered(model, fit_.rows)
    config = fit_.config
    heads = config.get('num_attention_heads', config.get('n_head'))
    kv_heads = config.get('num_key_value_heads', heads)
    # Rows of each head, halves after pairs: a projection by its heads, a qk-norm's one head.
    self._heads = {'q_proj': heads, 'k_proj': kv_heads, 'q_norm': 1, 'k_norm': 1}
    self._pairs = fit_.pairs

  def _reorder(self, name: str, value: np.ndarray) -> np.ndarray:
    module = name.split('.')[-2]
    if not self._pairs or module not in self._heads:
      return value
    return unpermute(value, self._heads[module])

  def __getitem__(self, name: str) -> np.ndarray:
    return np.ascontiguousarray(self._reorder(name, self._gathered[name]))

  def shape(self, name: str) -> tuple[int, ...]:
    return self._gathered.shape(name)

  def __iter__(self):
    return iter(self._gathered)

  def __len__(self) -> int:
    return len(self._gathered)
