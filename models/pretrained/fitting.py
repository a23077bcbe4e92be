"""Which Hugging Face architecture holds an Attend decoder exactly, and its tensors under that
architecture's names: the first half of writing a model out (writer.py, gguf_writer.py).

A decoder's arguments (`decoder_arguments`: the workdir's `config.model` and the vocabulary)
fit a `model_type` of decoders.ARCHITECTURES when its config.json, written by the way back
(`Architecture.config`, decoder_configs.py), is read by the way in (`decoders.decoder_args`) as
the same computation: every layer's attention, norms, feed-forward and positions, and the
output options. Fields that only train (dropout, the kernel, the cache's dtype) do not count.
A 2025 mechanism has one architecture (`_candidates`): differential attention DiffLlama, latent
attention DeepSeek-V3 (with DeepSeek Sparse Attention's indexer DeepSeek-V3.2), a stack with
Gated DeltaNet layers Qwen3-Next (its softmax layers gated, qk-normed, norms 1 + w); any other
model is tried as each architecture of `ORDER` in turn, the first that fits taken. Where none
fits, `fit` refuses in one sentence naming the field, before anything is written; variants no
architecture computes (plain DeltaNet, linear or sigmoid attention, ...) are refused by name.

Rotary positions in Attend's own 'pairs' layout fit too: the query and key rows (and a
qk-norm's scales) are reordered into Hugging Face's halves (`HFTensors`), as llama.cpp's
converter reorders them the other way; Qwen3-Next's only on the rotated first `rope_dims` of
each head, the query's half of its fused query and gate. DeepSeek states its own layout
(`rope_interleave`: pairs), so its rows stay as they are and the layouts must agree. Fused
tensors Attend keeps apart (Qwen3-Next's `in_proj_qkvz`, `in_proj_ba`, query and gate) are
joined back, its convolution reshaped as torch's.
"""

from collections.abc import Mapping
import dataclasses
import math
from typing import Any

import numpy as np

from models.pretrained.decoders import ARCHITECTURES, decoder_args
from models.pretrained.qwen3_next import Fused
from models.pretrained.tables import PAD_ID, SAME, Gathered
from models.stack_config import StackConfig

# The order architectures are tried in: the plainest first, so that a Llama is written as Llama
# and not as Mistral with no window.
ORDER = ('llama', 'mistral', 'qwen2', 'gemma3_text', 'gpt2')
# Architectures whose config.json states the rotary layout (DeepSeek's rope_interleave): no row
# is reordered, so the layouts must agree.
_OWN_LAYOUT = ('deepseek_v3', 'deepseek_v32')
# The attention variants some architecture computes (`attention`, or `layer_pattern`'s names).
_WRITTEN = ('softmax', 'differential', 'gated_deltanet')
# export.py's --format names and what each writes (formats.py gives each its writer).
FORMATS = {'hf': 'a Hugging Face folder', 'gguf': 'a GGUF file'}
_AS = ' or '.join(f'{what} (--format={name})' for name, what in FORMATS.items())
# Fields that decide how the model trains or runs, not what it computes.
_TRAINING_ONLY = dict(
  dropout_rate=0.0, attention_dropout_rate=0.0, attention_impl=None, cache_dtype='float32'
)
_NO_HOME = 'only an Attend workdir holds it'
_NO_ARCHITECTURE = f'no transformers or llama.cpp architecture computes it; {_NO_HOME}'
# Variants no written architecture computes, refused by name before any architecture is tried:
# field -> (its value when off, where such a model could live instead).
_VARIANTS = {
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
  # Modules whose rows go from Attend's rotary pairs to halves: name -> (heads, rows rotated at
  # the start of each head); empty where nothing is reordered.
  halves: dict[str, tuple[int, int]]


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


def _layer(stack: StackConfig, i: int, reordered: bool = True) -> dict[str, Any]:
  """Layer i's computation as comparable fields: its own window, rotary base and depth
  (`layer_config`), defaults made explicit, the fields that only train or that nothing reads set
  aside; `reordered`: 'pairs' rows are reordered on the way out, so either layout fits."""
  layer = stack.layer_config(i)
  fields = dataclasses.asdict(layer) | _TRAINING_ONLY
  delta_heads = layer.delta_heads or layer.num_heads
  fields.update(
    global_every=0,
    rope_base_global=None,
    layer_index=i,  # the depth (differential attention's λ_init), set by a pattern or not
    d_k=layer.head_size,
    d_v=layer.value_size,
    num_kv_heads=layer.kv_heads(layer.num_heads),
    query_scale=layer.query_scale or layer.head_size**-0.5,
    delta_heads=delta_heads,
    delta_key_heads=layer.delta_key_heads or delta_heads,
    delta_key_dim=layer.delta_key_dim or layer.head_size,
    delta_value_dim=layer.delta_value_dim or layer.value_size,
  )
  if not layer.index_topk:  # no indexer reads its sizes
    fields.update(index_heads=None, index_head_dim=None)
  if layer.positions != 'rope':
    fields.update(rope_base=None, rope_layout=None, rope_dims=None)
    return fields
  if layer.rope_dims == layer.head_size:
    fields['rope_dims'] = None  # every feature, as None says
  if reordered:
    fields['rope_layout'] = 'halves'  # 'pairs' is reordered on the way out
  return fields


def _same(a: Any, b: Any) -> bool:
  if isinstance(a, float) and isinstance(b, (int, float)):
    return math.isclose(a, b, rel_tol=1e-12)
  return a == b


def differences(
  ours: dict[str, Any], theirs: dict[str, Any], *, reordered: bool = True
) -> list[tuple[str, Any, Any]]:
  """`(field, our value, theirs)` for each way two decoders' arguments compute differently
  (`reordered`: rotary pairs are reordered into halves on the way out, so either layout fits)."""
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
    layer_a, layer_b = _layer(a, i, reordered), _layer(b, i, reordered)
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
  return config, differences(args, back, reordered=model_type not in _OWN_LAYOUT)


def _refuse_variants(stack: StackConfig) -> None:
  unwritten = [name for name in stack.pattern if name not in _WRITTEN]
  if unwritten and not stack.layer_pattern:
    raise ValueError(
      f'config.model.attention={stack.attention!r} cannot be written as {_AS}: {_NO_ARCHITECTURE}.'
    )
  if unwritten:
    raise ValueError(
      f'config.model.layer_pattern={stack.layer_pattern!r} cannot be written as {_AS}: no '
      f'transformers or llama.cpp architecture computes its {unwritten[0]!r} layers; {_NO_HOME}.'
    )
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


def _candidates(stack: StackConfig) -> tuple[str, ...]:
  """The architectures that may hold the stack: its 2025 mechanism's one, else `ORDER`."""
  if 'gated_deltanet' in stack.pattern:
    return ('qwen3_next',)
  if 'differential' in stack.pattern:
    return ('diffllama',)
  if stack.kv_lora_rank:
    return ('deepseek_v32',) if stack.index_topk else ('deepseek_v3',)
  return ORDER


def _halves(model_type: str, stack: StackConfig, config: dict[str, Any]) -> dict:
  """`Fit.halves`: where the architecture rotates halves, a 'pairs' model's query and key
  projections and qk-norms, per head their first `rope_dims` rows (without, all a head's)."""
  if stack.positions != 'rope' or stack.rope_layout != 'pairs' or model_type in _OWN_LAYOUT:
    return {}
  heads = config.get('num_attention_heads', config.get('n_head'))
  kv_heads = config.get('num_key_value_heads', heads)
  rotated = stack.rope_dims or stack.head_size
  norm = (1, rotated)  # a qk-norm's scales: one head's
  return {'q_proj': (heads, rotated), 'k_proj': (kv_heads, rotated), 'q_norm': norm, 'k_norm': norm}


def fit(args: dict[str, Any]) -> Fit:
  """The first architecture (of the mechanism's, else of `ORDER`) that computes the decoder of
  `args` exactly.

  Raises:
    ValueError: one sentence naming the field no architecture holds (a variant by name; else
      the first field where the nearest architecture differs) and where it could live.
  """
  stack: StackConfig = args['stack']
  _refuse_variants(stack)
  candidates = _candidates(stack)
  tried = {model_type: _tried(model_type, args) for model_type in candidates}
  for model_type, (config, missed) in tried.items():
    if not missed:
      rows = ARCHITECTURES[model_type].rows(stack.num_layers, config)
      return Fit(model_type, config, rows, _halves(model_type, stack, config))
  nearest = min(candidates, key=lambda model_type: len(tried[model_type][1]))
  field, ours, theirs = tried[nearest][1][0]
  if field == 'config.json':
    raise ValueError(f'The nearest architecture, {nearest}, cannot hold this model: {ours}')
  if len(candidates) == 1:
    raise ValueError(
      f'config.model.{field}={ours!r} does not fit {nearest}, the one architecture of this '
      f'attention (it has {field}={theirs!r}), so the model cannot be written as {_AS}; '
      f'{_NO_HOME}.'
    )
  raise ValueError(
    f'config.model.{field}={ours!r} fits none of {", ".join(ORDER)} (the nearest, {nearest}, '
    f'has {field}={theirs!r}), so the model cannot be written as {_AS}; {_NO_HOME}.'
  )


def pairs_to_halves(value: np.ndarray, heads: int, rotated: int) -> np.ndarray:
  """Rows `[heads * R, ...]` of a projection (or its bias, or a qk-norm's scales) with each
  head's first `rotated` rows taken from Attend's rotary pairs (x0, y0, x1, y1, ...) to Hugging
  Face's halves (x0, x1, ..., y0, y1, ...); the head's other rows (features not rotated, or
  Qwen3-Next's gate after its query) stay as they are."""
  rest = value.shape[1:]
  per_head = value.reshape(heads, -1, *rest)  # [N, R, ...]
  pairs = per_head[:, :rotated].reshape(heads, rotated // 2, 2, *rest)  # [N, r/2, 2, ...]
  halves = pairs.swapaxes(1, 2).reshape(heads, rotated, *rest)  # [N, 2, r/2, ...] -> [N, r, ...]
  return np.concatenate([halves, per_head[:, rotated:]], axis=1).reshape(value.shape)


# Attend's delta-rule convolution `conv [W, C]`, which goes out as torch's depthwise Conv1d
# weight `[C, 1, W]`.
_CONV = 'self_attn.conv'


class HFTensors(Mapping):
  """A model's tensors under its fit's Hugging Face names (`Gathered`), each computed when asked
  for: the tensors a table cuts (`Fused` parts, Qwen3-Next's convolution) joined back, and
  'pairs' rotary rows reordered into halves (`Fit.halves`)."""

  def __init__(self, model, fit_: Fit):
    plain, self._parts = [], {}
    for ours, theirs, transform in fit_.rows:
      if isinstance(transform, Fused) or ours.endswith(_CONV):
        self._parts.setdefault(theirs, []).append((ours, transform))
      else:
        plain.append((ours, theirs, transform))
    self._gathered = Gathered(model, plain)
    # The cut tensors' Attend parameters as they are, by Attend's own paths.
    self._ours = Gathered(model, [(o, o, SAME) for parts in self._parts.values() for o, _ in parts])
    self._names = list(dict.fromkeys(theirs for _, theirs, _ in fit_.rows))  # the table's order
    self._halves = fit_.halves

  def _joined(self, name: str, read) -> np.ndarray:
    """The tensor `name` of the parameters `read(ours)` returns: the convolution transposed, or
    each group's row blocks of the `Fused` parts, in their order, joined."""
    parts = self._parts[name]
    if not isinstance(parts[0][1], Fused):
      ((ours, _),) = parts
      return read(ours).T[:, None, :]  # [W, C] -> [C, 1, W]
    blocks = []
    for ours, fused in sorted(parts, key=lambda part: part[1].start):
      value = read(ours)
      rows = value.T if fused.kernel else value  # [groups * n, in] or [groups * n]
      blocks.append(rows.reshape(fused.groups, -1, *rows.shape[1:]))  # [groups, n, ...]
    joined = np.concatenate(blocks, axis=1)  # [groups, block, ...]
    return joined.reshape(-1, *joined.shape[2:])  # [groups * block, ...]

  def _reorder(self, name: str, value: np.ndarray) -> np.ndarray:
    module = name.split('.')[-2]
    if module not in self._halves:
      return value
    return pairs_to_halves(value, *self._halves[module])

  def __getitem__(self, name: str) -> np.ndarray:
    if name in self._parts:
      value = self._joined(name, self._ours.__getitem__)
    else:
      value = self._gathered[name]
    return np.ascontiguousarray(self._reorder(name, value))

  def shape(self, name: str) -> tuple[int, ...]:
    if name not in self._parts:
      return self._gathered.shape(name)
    # One byte an entry, not float32's four: only the shape is kept.
    empty = lambda ours: np.broadcast_to(np.False_, self._ours.shape(ours))
    return self._joined(name, empty).shape

  def __iter__(self):
    return iter(self._names)

  def __len__(self) -> int:
    return len(self._names)
