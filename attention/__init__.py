"""Attend's attention kernels: pure, jit/vmap/grad-safe JAX functions.

Shapes: queries `[..., T, D]`, keys `[..., S, D]`, values `[..., S, Dv]`; leading dims (batch,
heads) are free. Masks broadcast to `[..., T, S]` with True = may attend.
"""

from attention import addressing  # the NTM's steps: attention.addressing.address, read, write
from attention.biases import (
  T5_MAX_DISTANCE,
  T5_NUM_BUCKETS,
  alibi_bias,
  alibi_bias_at,
  alibi_slopes,
  relative_positions,
  t5_bias,
  t5_bias_at,
  t5_buckets,
)
from attention.chunked import chunked_attention
from attention.core import (
  attend,
  attention,
  attention_pooling,
  drop_weights,
  masked_softmax,
  merge_heads,
  repeat_kv,
  rms_normalize,
  split_heads,
)
from attention.kv_cache import (
  cache_offsets,
  evict,
  evict_again,
  kept_mask,
  kept_rotary_scores,
  kept_step,
  window_mask,
)
from attention.linear import (
  elu_feature_map,
  hedgehog_feature_map,
  linear_attention,
  linear_attention_weights,
)
from attention.masks import (
  causal_mask,
  combine_masks,
  padding_mask,
  padding_mask_from_ids,
  sliding_window_mask,
)
from attention.penalties import attention_entropy, doubly_stochastic_penalty
from attention.pointer import copy_logits
from attention.positions import (
  rotary_embedding,
  sentence_position_encoding,
  sinusoidal_embedding,
  sinusoidal_positions,
  sinusoidal_positions_2d,
)
from attention.presses import PRESSES, Press, get_press
from attention.rollout import attention_rollout
from attention.scores import (
  SCORES,
  KeyPrep,
  Score,
  ScoreParam,
  ScoreSizes,
  additive_scores,
  cosine_scores,
  dot_scores,
  general_scores,
  get_score,
  get_score_fn,
  project_keys,
  scaled_dot_scores,
)
from attention.sdpa import (
  KERNELS,
  attention_weights,
  normalize_scores,
  scaled_dot_product_attention,
)
from attention.sigmoid import sigmoid_attention, sigmoid_attention_weights
from attention.variants import (
  OPTIONS,
  RUN_OPTIONS,
  VARIANTS,
  Variant,
  get_variant,
  group_queries,
)

__all__ = [
  'KERNELS',
  'KeyPrep',
  'OPTIONS',
  'PRESSES',
  'Press',
  'RUN_OPTIONS',
  'SCORES',
  'Score',
  'ScoreParam',
  'ScoreSizes',
  'T5_MAX_DISTANCE',
  'T5_NUM_BUCKETS',
  'VARIANTS',
  'Variant',
  'additive_scores',
  'addressing',
  'alibi_bias',
  'alibi_bias_at',
  'alibi_slopes',
  'attend',
  'attention',
  'attention_entropy',
  'attention_pooling',
  'attention_rollout',
  'attention_weights',
  'cache_offsets',
  'causal_mask',
  'chunked_attention',
  'combine_masks',
  'copy_logits',
  'cosine_scores',
  'dot_scores',
  'doubly_stochastic_penalty',
  'drop_weights',
  'elu_feature_map',
  'evict',
  'evict_again',
  'general_scores',
  'get_press',
  'get_score',
  'get_score_fn',
  'get_variant',
  'group_queries',
  'kept_mask',
  'kept_rotary_scores',
  'kept_step',
  'hedgehog_feature_map',
  'linear_attention',
  'linear_attention_weights',
  'masked_softmax',
  'merge_heads',
  'normalize_scores',
  'padding_mask',
  'padding_mask_from_ids',
  'project_keys',
  'relative_positions',
  'repeat_kv',
  'rms_normalize',
  'rotary_embedding',
  'scaled_dot_product_attention',
  'scaled_dot_scores',
  'sentence_position_encoding',
  'sigmoid_attention',
  'sigmoid_attention_weights',
  'sinusoidal_embedding',
  'sinusoidal_positions',
  'sinusoidal_positions_2d',
  'sliding_window_mask',
  'split_heads',
  't5_bias',
  't5_bias_at',
  't5_buckets',
  'window_mask',
]
