"""DeepSeek-V3 and DeepSeek-V3.2 (`model_type` 'deepseek_v3', 'deepseek_v32') as `DecoderLM`s with
multi-head latent attention (`models.latent_attention`): the parts of decoders.py's
`Architecture` entries for them (`*_args`, `*_REFUSED`, `*_rows`, `*_config`).

Both are Llama-layout decoders (pre-norm RMSNorms, SwiGLU, untied head by default) whose
attention is latent: `q_a_proj` -> `q_a_layernorm` -> `q_b_proj` (or one `q_proj` without a
query latent), `kv_a_proj_with_mqa` to the latent and the shared rotary key, `kv_a_layernorm`,
`kv_b_proj` to each head's key and value, `o_proj`. DeepSeek-V3.2 adds the lightning indexer of
DeepSeek Sparse Attention (`indexer.wq_b`, `wk`, `k_norm`, `weights_proj`).

DeepSeek's `rope_interleave=True` (V3.2: always) rotates adjacent feature pairs and writes the
result in halves; queries and keys are permuted alike, so the scores are Attend's
`rope_layout='pairs'` on the checkpoint's own features, and no weight is reordered.

Only dense layers are converted: a config whose layer lists hold a mixture-of-experts layer
(`first_k_dense_replace` below `num_hidden_layers`, or 'sparse' in `mlp_layer_types`) is
refused, whatever its expert counts say. Rotary scaling (YaRN, which DeepSeek's released configs
use) is refused too.
"""

from typing import Any

from models.pretrained import decoder_tables
from models.pretrained.tables import SAME, TRANSPOSED, Row
from models.stack_config import StackConfig

V3_REFUSED = {'rope_scaling': None, 'pretraining_tp': 1}
V32_REFUSED = {'rope_scaling': None}
_FIRST_DENSE = 3  # transformers' default first_k_dense_replace


def _dense_layers(config: dict[str, Any]) -> None:
  """Refuses a config with a mixture-of-experts layer, read from its layer lists."""
  layers = config['num_hidden_layers']
  types = config.get('mlp_layer_types')
  if types is None:
    first = config.get('first_k_dense_replace')
    first = _FIRST_DENSE if first is None else first
    types = ['dense' if i < first else 'sparse' for i in range(layers)]
  sparse = [i for i, kind in enumerate(types) if kind == 'sparse']
  if sparse:
    raise ValueError(
      f'config.json makes layer {sparse[0]} a mixture-of-experts layer (first_k_dense_replace, '
      'mlp_layer_types); the converter converts dense feed-forward layers only.'
    )


def _rope_base(config: dict[str, Any]) -> float:
  """The rotary base; a rope_type other than 'default' (YaRN) is refused."""
  parameters = config.get('rope_parameters') or {}
  if parameters.get('rope_type', 'default') != 'default':
    raise ValueError(
      f'config.json has rope_parameters={parameters!r}; the converter converts rope_type '
      "'default' only (no YaRN scaling)."
    )
  return float(parameters.get('rope_theta', config.get('rope_theta', 10000.0)))


def _stack(config: dict[str, Any], **latent: Any) -> StackConfig:
  """The stack both versions share; `latent` adds their own latent and indexer fields."""
  _dense_layers(config)
  if config.get('hidden_act', 'silu') != 'silu':
    raise ValueError(
      f"config.json has hidden_act={config['hidden_act']!r}; DeepSeek's converter takes 'silu'."
    )
  bias = bool(config.get('attention_bias', False))
  return StackConfig(
    num_layers=config['num_hidden_layers'],
    d_model=config['hidden_size'],
    num_heads=config['num_attention_heads'],
    d_k=config['qk_nope_head_dim'],
    d_v=config['v_head_dim'],
    d_ff=config['intermediate_size'],
    dropout_rate=0.0,
    attention_dropout_rate=float(config.get('attention_dropout') or 0.0),
    norm='pre',
    norm_type='rmsnorm',
    norm_eps=config.get('rms_norm_eps', 1e-6),
    activation='silu',
    gated_mlp=True,
    mlp_bias=False,
    qkv_bias=bias,  # on q_a_proj and kv_a_proj_with_mqa, as DeepSeek's attention_bias
    out_bias=bias,
    positions='rope',
    rope_base=_rope_base(config),
    kv_lora_rank=config['kv_lora_rank'],
    rope_head_dim=config['qk_rope_head_dim'],
    max_length=config.get('max_position_embeddings', 4096),
    **latent,
  )


def _outputs(config: dict[str, Any]) -> dict[str, Any]:
  tied = bool(config.get('tie_word_embeddings', False))
  return dict(tie_output=tied, output_bias=False, scale_embeddings=False)


def v3_args(config: dict[str, Any]) -> dict[str, Any]:
  """DeepseekV3ForCausalLM's config.json -> DecoderLM's arguments (dense layers only)."""
  interleave = config.get('rope_interleave', True)
  stack = _stack(
    config,
    q_lora_rank=config.get('q_lora_rank') or 0,
    rope_layout='pairs' if interleave else 'halves',
  )
  return dict(stack=stack, **_outputs(config))


def v32_args(config: dict[str, Any]) -> dict[str, Any]:
  """DeepseekV32ForCausalLM's config.json -> DecoderLM's arguments: V3's, always with a query
  latent and interleaved rotary pairs, and the indexer."""
  if not config.get('q_lora_rank'):
    raise ValueError(
      f"config.json has q_lora_rank={config.get('q_lora_rank')!r}; DeepSeek-V3.2's attention "
      'and indexer read a query latent, so it must be > 0.'
    )
  stack = _stack(
    config,
    q_lora_rank=config['q_lora_rank'],
    rope_layout='pairs',
    index_topk=config.get('index_topk', 2048),
    index_heads=config.get('index_n_heads', 64),
    index_head_dim=config.get('index_head_dim', 128),
  )
  return dict(stack=stack, **_outputs(config))


def _attention_rows(config: dict[str, Any]) -> list[Row]:
  """The latent attention's rows, `self_attn.` on both sides."""
  bias = bool(config.get('attention_bias', False))
  if config.get('q_lora_rank'):
    rows = [
      ('w_qa.kernel', 'q_a_proj.weight', TRANSPOSED),
      ('q_norm.scale', 'q_a_layernorm.weight', SAME),
      ('w_qb.kernel', 'q_b_proj.weight', TRANSPOSED),
      *([('w_qa.bias', 'q_a_proj.bias', SAME)] if bias else []),
    ]
  else:
    rows = [('w_q.kernel', 'q_proj.weight', TRANSPOSED)]
  rows += [
    ('w_kva.kernel', 'kv_a_proj_with_mqa.weight', TRANSPOSED),
    ('kv_norm.scale', 'kv_a_layernorm.weight', SAME),
    ('w_kvb.kernel', 'kv_b_proj.weight', TRANSPOSED),
    ('w_o.kernel', 'o_proj.weight', TRANSPOSED),
  ]
  if bias:
    rows += [('w_kva.bias', 'kv_a_proj_with_mqa.bias', SAME), ('w_o.bias', 'o_proj.bias', SAME)]
  return [(f'self_attn.{ours}', f'self_attn.{theirs}', t) for ours, theirs, t in rows]


_INDEXER_ROWS = [
  ('w_q.kernel', 'wq_b.weight', TRANSPOSED),
  ('w_k.kernel', 'wk.weight', TRANSPOSED),
  ('k_norm.scale', 'k_norm.weight', SAME),
  ('k_norm.bias', 'k_norm.bias', SAME),
  ('w_weights.kernel', 'weights_proj.weight', TRANSPOSED),
]


def _rows(num_layers: int, config: dict[str, Any], attention: list[Row]) -> list[Row]:
  """A whole checkpoint's table: every layer Llama's block around `attention`'s rows."""
  layers = [decoder_tables.llama_block(attention)] * num_layers
  return decoder_tables.model_rows(layers, tied=config.get('tie_word_embeddings', False))


def v3_rows(num_layers: int, config: dict[str, Any]) -> list[Row]:
  return _rows(num_layers, config, _attention_rows(config))


def v32_rows(num_layers: int, config: dict[str, Any]) -> list[Row]:
  indexer = [
    (f'self_attn.indexer.{ours}', f'self_attn.indexer.{theirs}', t)
    for ours, theirs, t in _INDEXER_ROWS
  ]
  return _rows(num_layers, config, [*_attention_rows(config), *indexer])


def _config(args: dict[str, Any], model_type: str, architecture: str) -> dict[str, Any]:
  """The keys both versions write: sizes, norms, rotary base, the latent, dense layers only."""
  stack: StackConfig = args['stack']
  return {
    'model_type': model_type,
    'architectures': [architecture],
    'vocab_size': args['vocab_size'],
    'hidden_size': stack.d_model,
    'intermediate_size': stack.d_ff,
    'num_hidden_layers': stack.num_layers,
    'num_attention_heads': stack.num_heads,
    'num_key_value_heads': stack.num_heads,
    'qk_nope_head_dim': stack.head_size,
    'v_head_dim': stack.value_size,
    'qk_rope_head_dim': stack.rope_head_dim,
    'kv_lora_rank': stack.kv_lora_rank,
    'q_lora_rank': stack.q_lora_rank or None,
    'hidden_act': stack.activation,
    'attention_bias': stack.qkv_bias,
    'attention_dropout': stack.attention_dropout_rate,
    'rms_norm_eps': stack.norm_eps,
    'max_position_embeddings': stack.max_length,
    'rope_parameters': {'rope_type': 'default', 'rope_theta': stack.rope_base},
    'first_k_dense_replace': stack.num_layers,
    'tie_word_embeddings': args['tie_output'],
  }


def v3_config(args: dict[str, Any]) -> dict[str, Any]:
  """DeepseekV3ForCausalLM's config.json of DecoderLM's arguments (the way back of `v3_args`)."""
  return {
    **_config(args, 'deepseek_v3', 'DeepseekV3ForCausalLM'),
    'rope_interleave': args['stack'].rope_layout == 'pairs',
  }


def v32_config(args: dict[str, Any]) -> dict[str, Any]:
  """DeepseekV32ForCausalLM's config.json (the way back of `v32_args`)."""
  stack: StackConfig = args['stack']
  return {
    **_config(args, 'deepseek_v32', 'DeepseekV32ForCausalLM'),
    'mlp_layer_types': ['dense'] * stack.num_layers,
    'index_topk': stack.index_topk,
    'index_n_heads': stack.index_heads,
    'index_head_dim': stack.index_head_dim,
  }
