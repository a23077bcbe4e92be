"""Qwen3-Next (model_type 'qwen3_next') as a hybrid Attend `DecoderLM`: what decoders.py's
`Architecture` for it is made of (`args`, `REFUSED`, `rows`, `config`).

Its layers are Gated DeltaNet layers (`linear_attention`: `models.delta_net.DeltaNet`) and gated
softmax attention (`full_attention`: an output gate, qk-norm, rotary positions on a part of each
head), in `layer_types` order (or every `full_attention_interval`-th layer softmax), which
becomes the stack's `layer_pattern`. Every RMSNorm but the delta layers' gated one scales by
1 + w. Layers with a mixture of experts are refused: the converter converts dense MLPs only.

The checkpoint fuses what Attend keeps apart, per query/key head: `in_proj_qkvz` holds, for each
of the Hk key heads, its query, its key, then the values and output gates of its H/Hk value
heads; `in_proj_ba` the write strengths' then the decays' rows of those value heads; `q_proj` of
a softmax layer each head's query then its gate. The tables here cut them (`Fused`); export
joins them again (`fitting.HFTensors`).
"""

import dataclasses
from typing import Any

import numpy as np

from models.pretrained import decoder_configs, decoder_tables
from models.pretrained.tables import SAME, TRANSPOSED, Row
from models.stack_config import StackConfig

# transformers' Qwen3NextConfig defaults: config.json leaves out what equals them.
DEFAULTS = dict(
  hidden_size=2048,
  intermediate_size=5632,
  num_hidden_layers=48,
  num_attention_heads=16,
  num_key_value_heads=2,
  head_dim=256,
  rms_norm_eps=1e-6,
  max_position_embeddings=32768,
  linear_conv_kernel_dim=4,
  linear_key_head_dim=128,
  linear_value_head_dim=128,
  linear_num_key_heads=16,
  linear_num_value_heads=32,
  decoder_sparse_step=1,
  num_experts=512,
  full_attention_interval=4,
)
# Keys whose other values change the computation in a way the converter does not reproduce: the
# delta layers' convolution runs SiLU whatever `hidden_act` says elsewhere, and qk-norm's epsilon
# is attention.rms_normalize's 1e-6.
REFUSED = {'rope_scaling': None, 'hidden_act': 'silu', 'rms_norm_eps': 1e-6}
KINDS = {'linear_attention': 'gated_deltanet', 'full_attention': 'softmax'}


def _get(config: dict[str, Any], key: str) -> Any:
  value = config.get(key)
  return DEFAULTS[key] if value is None else value


def _layer_types(config: dict[str, Any]) -> list[str]:
  """`layer_types`, or every `full_attention_interval`-th layer full attention; ValueError for a
  kind the converter does not know."""
  layers = _get(config, 'num_hidden_layers')
  every = _get(config, 'full_attention_interval')
  types = config.get('layer_types') or [
    'linear_attention' if (i + 1) % every else 'full_attention' for i in range(layers)
  ]
  unknown = sorted(set(types) - set(KINDS))
  if unknown or len(types) != layers:
    raise ValueError(
      f'config.json has layer_types={types!r}; the converter converts {layers} layers of '
      f'{" or ".join(KINDS)}.'
    )
  return list(types)


def _refuse_experts(config: dict[str, Any]) -> None:
  """ValueError, in one sentence, where some layer's MLP is a mixture of experts: layer i is one
  unless it is in `mlp_only_layers`, `num_experts` is 0 or i + 1 is not a multiple of
  `decoder_sparse_step` (as transformers' Qwen3NextDecoderLayer decides)."""
  dense_only = set(config.get('mlp_only_layers') or [])
  experts, step = _get(config, 'num_experts'), _get(config, 'decoder_sparse_step')
  sparse = [
    i
    for i in range(_get(config, 'num_hidden_layers'))
    if i not in dense_only and experts > 0 and step > 0 and (i + 1) % step == 0
  ]
  if sparse:
    raise ValueError(
      f'config.json (num_experts={experts}, decoder_sparse_step={step}, mlp_only_layers='
      f'{sorted(dense_only)}) gives layer {sparse[0]} a mixture of experts, which the converter '
      'does not convert: it converts Qwen3-Next models whose every layer has a dense MLP.'
    )


def args(config: dict[str, Any]) -> dict[str, Any]:
  """DecoderLM's arguments (but the vocabulary) of a Qwen3-Next config.json."""
  _refuse_experts(config)
  types = _layer_types(config)
  rope = config.get('rope_parameters') or {}
  if rope.get('rope_type', 'default') != 'default':
    raise ValueError(
      f"config.json has rope_parameters={rope!r}; the converter converts rope_type 'default' only."
    )
  head_dim = _get(config, 'head_dim')
  factor = rope.get('partial_rotary_factor', config.get('partial_rotary_factor', 0.25))
  rope_dims = int(head_dim * factor)
  bias = bool(config.get('attention_bias', False))
  stack = StackConfig(
    num_layers=len(types),
    d_model=_get(config, 'hidden_size'),
    num_heads=_get(config, 'num_attention_heads'),
    num_kv_heads=_get(config, 'num_key_value_heads'),
    d_k=head_dim,
    d_v=head_dim,
    d_ff=_get(config, 'intermediate_size'),
    dropout_rate=0.0,
    attention_dropout_rate=float(config.get('attention_dropout', 0.0)),
    norm='pre',
    norm_type='rmsnorm',
    norm_eps=_get(config, 'rms_norm_eps'),
    norm_plus_one=True,
    activation='silu',
    gated_mlp=True,
    mlp_bias=False,
    qkv_bias=bias,
    out_bias=bias,
    qk_norm=True,
    output_gate=True,
    positions='rope',
    rope_base=float(rope.get('rope_theta', config.get('rope_theta', 10000.0))),
    rope_layout='halves',
    rope_dims=None if rope_dims == head_dim else rope_dims,
    layer_pattern=','.join(KINDS[kind] for kind in types),
    delta_heads=_get(config, 'linear_num_value_heads'),
    delta_key_heads=_get(config, 'linear_num_key_heads'),
    delta_key_dim=_get(config, 'linear_key_head_dim'),
    delta_value_dim=_get(config, 'linear_value_head_dim'),
    conv_size=_get(config, 'linear_conv_kernel_dim'),
    max_length=_get(config, 'max_position_embeddings'),
  )
  tied = bool(config.get('tie_word_embeddings', False))
  return dict(stack=stack, tie_output=tied, output_bias=False, scale_embeddings=False)


@dataclasses.dataclass(frozen=True)
class Fused:
  """Rows `[start, stop)` of each of `groups` equal row blocks of a torch `[out, in]` weight,
  joined and transposed to an Attend kernel `[in, rows]` (`kernel=False`: a vector's entries,
  not transposed)."""

  groups: int
  start: int
  stop: int
  kernel: bool = True

  def __call__(self, w: np.ndarray) -> np.ndarray:
    blocks = w.reshape(self.groups, -1, *w.shape[1:])[:, self.start : self.stop]
    joined = blocks.reshape(-1, *w.shape[1:])  # [groups * (stop - start), in]
    return joined.T if self.kernel else joined


def _conv(w: np.ndarray) -> np.ndarray:
  """The depthwise `Conv1d` weight `[C, 1, W]` as Attend's `conv [W, C]`."""
  return w[:, 0, :].T


def _delta_layer(config: dict[str, Any]) -> list[Row]:
  """A `linear_attention` layer's rows (Attend's `self_attn`, a DeltaNet)."""
  hk, dk = _get(config, 'linear_num_key_heads'), _get(config, 'linear_key_head_dim')
  per_key = _get(config, 'linear_num_value_heads') // hk  # value heads per key head
  dv = per_key * _get(config, 'linear_value_head_dim')  # their rows in a key head's block
  qkvz = {'q': (0, dk), 'k': (dk, 2 * dk), 'v': (2 * dk, 2 * dk + dv), 'z': (2 * dk + dv, None)}
  return [
    *[
      (f'self_attn.w_{name}.kernel', 'linear_attn.in_proj_qkvz.weight', Fused(hk, start, stop))
      for name, (start, stop) in qkvz.items()
    ],
    ('self_attn.w_b.kernel', 'linear_attn.in_proj_ba.weight', Fused(hk, 0, per_key)),
    ('self_attn.w_a.kernel', 'linear_attn.in_proj_ba.weight', Fused(hk, per_key, None)),
    ('self_attn.conv', 'linear_attn.conv1d.weight', _conv),
    ('self_attn.a_log', 'linear_attn.A_log', SAME),
    ('self_attn.dt_bias', 'linear_attn.dt_bias', SAME),
    ('self_attn.norm.scale', 'linear_attn.norm.weight', SAME),
    ('self_attn.w_o.kernel', 'linear_attn.out_proj.weight', TRANSPOSED),
  ]


def _softmax_layer(config: dict[str, Any]) -> list[Row]:
  """A `full_attention` layer's rows: `q_proj` holds each head's query then its gate."""
  heads, head_dim = _get(config, 'num_attention_heads'), _get(config, 'head_dim')
  query, gate = Fused(heads, 0, head_dim), Fused(heads, head_dim, None)
  rows = [
    ('self_attn.w_q.kernel', 'self_attn.q_proj.weight', query),
    ('self_attn.w_gate.kernel', 'self_attn.q_proj.weight', gate),
    ('self_attn.w_k.kernel', 'self_attn.k_proj.weight', TRANSPOSED),
    ('self_attn.w_v.kernel', 'self_attn.v_proj.weight', TRANSPOSED),
    ('self_attn.w_o.kernel', 'self_attn.o_proj.weight', TRANSPOSED),
    ('self_attn.q_norm', 'self_attn.q_norm.weight', SAME),
    ('self_attn.k_norm', 'self_attn.k_norm.weight', SAME),
  ]
  if config.get('attention_bias'):
    rows += [
      ('self_attn.w_q.bias', 'self_attn.q_proj.bias', dataclasses.replace(query, kernel=False)),
      ('self_attn.w_gate.bias', 'self_attn.q_proj.bias', dataclasses.replace(gate, kernel=False)),
      *[(f'self_attn.w_{p}.bias', f'self_attn.{p}_proj.bias', SAME) for p in 'kvo'],
    ]
  return rows


def rows(num_layers: int, config: dict[str, Any]) -> list[Row]:
  """The checkpoint's tensor table (decoders.py's `Architecture.rows`): each layer Llama's block
  around its kind's mixer rows."""
  mixers = {'linear_attention': _delta_layer(config), 'full_attention': _softmax_layer(config)}
  layers = [decoder_tables.llama_block(mixers[kind]) for kind in _layer_types(config)[:num_layers]]
  return decoder_tables.model_rows(layers, tied=config.get('tie_word_embeddings', False))


def config(model_args: dict[str, Any]) -> dict[str, Any]:
  """The way back: DecoderLM's arguments -> Qwen3NextForCausalLM's config.json, every layer a
  dense MLP (`mlp_only_layers`)."""
  stack: StackConfig = model_args['stack']
  kinds = {variant: kind for kind, variant in KINDS.items()}
  head_dim = stack.head_size
  return {
    'model_type': 'qwen3_next',
    **decoder_configs.common_keys(model_args, 'Qwen3NextForCausalLM'),
    'attention_bias': stack.qkv_bias,
    'hidden_act': stack.activation,
    'rope_parameters': {
      'rope_type': 'default',
      'rope_theta': stack.rope_base,
      'partial_rotary_factor': (stack.rope_dims or head_dim) / head_dim,
    },
    'layer_types': [kinds[stack.layer_config(i).attention] for i in range(stack.num_layers)],
    'linear_num_value_heads': stack.delta_heads or stack.num_heads,
    'linear_num_key_heads': stack.delta_key_heads or stack.delta_heads or stack.num_heads,
    'linear_key_head_dim': stack.delta_key_dim or head_dim,
    'linear_value_head_dim': stack.delta_value_dim or stack.value_size,
    'linear_conv_kernel_dim': stack.conv_size,
    'mlp_only_layers': list(range(stack.num_layers)),
    'num_experts': 0,
  }
