"""Attention variants: the one registry an attention layer dispatches through.

A variant is a small contract of pure functions (`Variant`): how a whole sequence attends
(`attend`), the weights it averages the values with (`weights`, what a capture reads), what a
decoder keeps between steps (`init_state`) and how one step, or a block of steps when a prompt is
prefilled, reads and updates it (`step`), and the options it takes (`options`, names from
`OPTIONS`). `VARIANTS` maps the config name (`attention=` of every Transformer-family model) to
one:

- `'softmax'`: `softmax(scores + biases)` over the keys, through `scaled_dot_product_attention`'s
  kernels (or any score of `attention.SCORES`). It decodes from a cache of keys and values
  (`attention.kv_cache`: every position, or with a `window` a ring buffer of the latest ones).
- `'linear'`: `attention.linear_attention` (elu + 1 features, or with `feature_weights` Hedgehog's
  learned ones); its decoding state is the fixed `[F, Dv]` running sum, O(1) per token. It forms
  no scores, so it takes no other option.
- `'sigmoid'`: `attention.sigmoid_attention`, each weight its own sigmoid (no normalisation over
  the keys); it takes a bias, a window and dropout, and decodes with softmax's K/V cache.
- `'differential'`: `attention.differential_attention` (Ye et al. 2025), `(A_n - λ A_{n+N/2})`
  over pair values, RMS-normalised; outputs `[B, N/2, T, 2 Dv]`, weights `[B, N/2, T, S]`. It
  needs the option `differential` (λ, λ_init, eps), which its layer sets.
- `'deltanet'`, `'gated_deltanet'`: the (gated) delta rule (`attention.delta_rule`, Yang et al.
  2024, 2025), a recurrence whose state `[B, H, Dk, Dv]` each token corrects; causal only. It
  needs the options `beta` (write strengths `[B, H, T]`) and, gated, `decay` (log-decays), which
  its layer (`models.delta_net`) computes from the input. Its weights are the attention form.

The options (`bias`, `alibi_slopes`, `window`, `softcap`, `sink`, ...) mean what
`scaled_dot_product_attention` documents. Shapes: queries `[B, N, T, H]`, keys and values
`[B, K, S, H|Dv]` with K key/value heads dividing the N query heads (grouped-query attention,
query head n reads key/value head `n // (N // K)`).
"""

import dataclasses
from typing import Any, Callable

import jax

from attention.core import attend as weighted_sum
from attention.core import drop_weights, repeat_kv
from attention.delta_rule import (
  delta_attend,
  delta_step,
  delta_weights,
  gated_delta_attend,
  gated_delta_weights,
  init_delta_state,
)
from attention.differential import differential_attention, differential_weights
from attention.kv_cache import AttendAt, State, init_kv_cache, kv_step
from attention.linear import (
  ELU_MAPS,
  hedgehog_feature_map,
  init_linear_state,
  linear_attention,
  linear_attention_weights,
)
from attention.sdpa import attention_weights, normalize_scores, scaled_dot_product_attention
from attention.sigmoid import sigmoid_attention, sigmoid_attention_weights

Array = jax.Array


def group_queries(q: Array, kv_heads: int) -> Array:
  """`[B, N, T, H] -> [B, K, N/K, T, H]`: the query heads that share each key/value head."""
  return q.reshape(*q.shape[:-3], kv_heads, q.shape[-3] // kv_heads, *q.shape[-2:])


def _softmax_attend(
  q,
  k,
  v,
  *,
  mask=None,
  is_causal=False,
  scores=None,
  bias=None,
  alibi_slopes=None,
  sink=None,
  window=0,
  softcap=0.0,
  scale=None,
  dropout_rate=0.0,
  dropout_rng=None,
  implementation=None,
):
  """Softmax attention; `scores`, when given, replaces the scaled dot product:
  `(q [B, N, T, H], k [B, N, S, H]) -> [B, N, T, S]`, scaled. `scale` multiplies the dot
  product (default `1/sqrt(H)`), which `scores` replaces."""
  scoring = dict(
    mask=mask,
    is_causal=is_causal,
    bias=bias,
    alibi_slopes=alibi_slopes,
    sink=sink,
    window=window,
    softcap=softcap,
  )
  if scores is None:
    return scaled_dot_product_attention(
      q,
      k,
      v,
      scale=scale,
      dropout_rate=dropout_rate,
      dropout_rng=dropout_rng,
      implementation=implementation,
      **scoring,
    )
  weights = _softmax_weights(q, k, scores=scores, **scoring)
  return weighted_sum(drop_weights(weights, dropout_rate, dropout_rng), repeat_kv(v, q.shape[-3]))


def _softmax_weights(
  q,
  k,
  *,
  mask=None,
  is_causal=False,
  scores=None,
  bias=None,
  alibi_slopes=None,
  sink=None,
  window=0,
  softcap=0.0,
  scale=None,
):
  """The weights `_softmax_attend` averages with, `[B, N, T, S]`."""
  options = dict(
    mask=mask,
    bias=bias,
    alibi_slopes=alibi_slopes,
    is_causal=is_causal,
    window=window,
    softcap=softcap,
    sink=sink,
  )
  if scores is None:
    return attention_weights(q, k, scale=scale, **options)
  return normalize_scores(scores(q, repeat_kv(k, q.shape[-3])), **options)


def _key_mask(mask: Array | None) -> Array | None:
  """Linear attention's key mask `[B, 1, 1, S]` as its kernel takes it, `[B, 1, 1, S]` with the
  group axis; ValueError for a query-dependent mask."""
  if mask is None:
    return None
  if mask.ndim != 4 or mask.shape[1] != 1 or mask.shape[2] != 1:
    raise ValueError(
      "attention='linear' takes a key mask [B, 1, 1, S] only (no query-"
      f'dependent masks); got a mask of shape {tuple(mask.shape)}.'
    )
  return mask[:, :, None, 0, :]


def _feature_maps(feature_weights, num_heads: int, kv_heads: int):
  """The kernel's `(query map, key map)` over grouped heads (`[B, K, G, T, H]` queries,
  `[B, K, 1, S, H]` keys): elu + 1, or Hedgehog's with `feature_weights = (W_q [N, H, F],
  W_k [K, H, F])`, one weight per query head and per key head."""
  if feature_weights is None:
    return ELU_MAPS
  w_q, w_k = feature_weights
  w_q = w_q.reshape(kv_heads, num_heads // kv_heads, *w_q.shape[-2:])  # [K, G, H, F]
  w_k = w_k[:, None]  # [K, 1, H, F]
  return (lambda x: hedgehog_feature_map(x, w_q), lambda x: hedgehog_feature_map(x, w_k))


def _linear_attend(q, k, v, *, mask=None, is_causal=False, feature_weights=None):
  """Linear attention with grouped key/value heads; `mask` is a key mask `[B, 1, 1, S]`."""
  maps = _feature_maps(feature_weights, q.shape[-3], k.shape[-3])
  grouped = group_queries(q, k.shape[-3])  # [B, K, G, T, H]
  k, v = k[..., None, :, :], v[..., None, :, :]  # [B, K, 1, S, H|Dv]
  out = linear_attention(
    grouped, k, v, mask=_key_mask(mask), is_causal=is_causal, feature_maps=maps
  )
  return out.reshape(*q.shape[:-1], v.shape[-1])


def _linear_weights(q, k, *, mask=None, is_causal=False, feature_weights=None):
  """The normalised kernel weights linear attention averages with, `[B, N, T, S]`."""
  maps = _feature_maps(feature_weights, q.shape[-3], k.shape[-3])
  grouped = group_queries(q, k.shape[-3])  # [B, K, G, T, H]
  weights = linear_attention_weights(
    grouped, k[..., None, :, :], mask=_key_mask(mask), is_causal=is_causal, feature_maps=maps
  )
  return weights.reshape(*q.shape[:-1], weights.shape[-1])  # [B, N, T, S]


def _linear_init(
  batch: int,
  kv_heads: int,
  d_k: int,
  d_v: int,
  *,
  max_length: int,
  window: int,
  sink_tokens: int,
  dtype: Any,
) -> State:
  """The running sums `{'s': [B, K, F, Dv], 'z': [B, K, F]}` over `d_k = F` features, whatever
  the length."""
  del max_length, window, sink_tokens, dtype  # a fixed size; the sums stay float32
  return init_linear_state((batch, kv_heads), d_k, d_v)


def _linear_step(
  state: State,
  q: Array,
  k: Array,
  v: Array,
  step: Array,
  *,
  window: int,
  sink_tokens: int,
  attend_at: AttendAt,
  options: dict[str, Any],
) -> tuple[Array, State]:
  """Positions `step ..` of `q [B, N, T, H]` from the running sums, which take in k and v."""
  del step, window, sink_tokens, attend_at  # the state holds everything before this block
  maps = _feature_maps(options.get('feature_weights'), q.shape[-3], k.shape[-3])
  grouped = group_queries(q, k.shape[-3])  # [B, K, G, T, H]
  per_group = {name: value[:, :, None] for name, value in state.items()}  # the G axis
  out, state = linear_attention(
    grouped,
    k[..., None, :, :],
    v[..., None, :, :],
    is_causal=True,
    state=per_group,
    return_state=True,
    feature_maps=maps,
  )
  state = {name: value[:, :, 0] for name, value in state.items()}  # [B, K, F, Dv], [B, K, F]
  return out.reshape(*q.shape[:-1], v.shape[-1]).astype(q.dtype), state


# Every option a variant may take besides `mask` and `is_causal`, as its `attend` and `weights`
# name them (`scaled_dot_product_attention` documents each; `scores` is a score of
# `attention.SCORES` replacing the scaled dot product; `feature_weights` is linear attention's
# learned feature maps, `(W_q [N, H, F], W_k [K, H, F])`; `differential` is differential
# attention's `attention.differential.Differential`; `beta` and `decay` are the delta rule's
# write strengths and log-decays, `[B, H, T]`). `weights` takes them all but RUN_OPTIONS.
OPTIONS = (
  'feature_weights',
  'scores',
  'bias',
  'alibi_slopes',
  'sink',
  'window',
  'softcap',
  'scale',
  'dropout_rate',
  'implementation',
  'differential',
  'beta',
  'decay',
)
RUN_OPTIONS = ('dropout_rate', 'implementation')  # how the output is computed, not the weights


@dataclasses.dataclass(frozen=True)
class Variant:
  """An attention variant; see the module docstring.

  Attributes:
    attend: `(q, k, v, *, mask=None, is_causal=False, **options) -> out [B, N, T, Dv]`.
    weights: `(q, k, *, mask=None, is_causal=False, **options) -> [B, N, T, S]`, the weights
      `attend` averages the values with (before dropout): what a capture reads and an edit
      replaces (the layer then computes `weights @ values`). Takes the options but RUN_OPTIONS.
    init_state: `(batch, kv_heads, d_k, d_v, *, max_length, window, sink_tokens, dtype) ->
      state`, every leaf leading with B (beam search repeats and gathers states along axis 0).
    step: `(state, q, k, v, step, *, window, sink_tokens, attend_at, options) -> (out, state)`
      for the new positions `step .. step+T-1`; `attend_at(q, keys, values, q_positions,
      k_positions)` is the layer's own variant over keys at explicit positions, and `options`
      the layer's options as `attend` takes them, for a step that does not go through attend_at.
    options: the names of OPTIONS that `attend` takes (`dropout_rate` with `dropout_rng`); the
      model configuration refuses a setting that needs any other, naming it.
  """

  attend: Callable[..., Array]
  weights: Callable[..., Array]
  init_state: Callable[..., State]
  step: Callable[..., tuple[Array, State]]
  options: frozenset[str]

  def __post_init__(self):
    unknown = set(self.options) - set(OPTIONS)
    if unknown:
      raise ValueError(f'Variant options {sorted(unknown)} are not among {OPTIONS}.')


VARIANTS: dict[str, Variant] = {
  'softmax': Variant(
    _softmax_attend,
    _softmax_weights,
    init_kv_cache,
    kv_step,
    options=frozenset(OPTIONS) - {'feature_weights', 'differential', 'beta', 'decay'},
  ),
  'linear': Variant(
    _linear_attend,
    _linear_weights,
    _linear_init,
    _linear_step,
    options=frozenset({'feature_weights'}),
  ),
  # Decodes as softmax does: a K/V cache, read by the layer's own variant over explicit positions.
  'sigmoid': Variant(
    sigmoid_attention,
    sigmoid_attention_weights,
    init_kv_cache,
    kv_step,
    options=frozenset({'bias', 'window', 'dropout_rate'}),
  ),
  # `attention.differential`: pairs of softmax maps, `[B, N/2, T, 2 Dv]` outputs and
  # `[B, N/2, T, S]` weights; decodes with softmax's K/V cache. No dropout (the paper defines none).
  'differential': Variant(
    differential_attention,
    differential_weights,
    init_kv_cache,
    kv_step,
    options=frozenset({'differential', 'bias', 'window', 'softcap', 'scale', 'implementation'}),
  ),
  # `attention.delta_rule`: causal only; queries and keys `[B, Hk, T, Dk]` with Hk dividing the
  # value heads H of values `[B, H, T, Dv]`; decodes from a fixed state `[B, H, Dk, Dv]`.
  'deltanet': Variant(
    delta_attend,
    delta_weights,
    init_delta_state,
    delta_step,
    options=frozenset({'beta'}),
  ),
  'gated_deltanet': Variant(
    gated_delta_attend,
    gated_delta_weights,
    init_delta_state,
    delta_step,
    options=frozenset({'beta', 'decay'}),
  ),
}


def get_variant(name: str) -> Variant:
  """`VARIANTS[name]`; an unknown name raises ValueError listing the valid ones."""
  if name not in VARIANTS:
    raise ValueError(
      f'Unknown attention variant {name!r}; valid variants: {", ".join(sorted(VARIANTS))}.'
    )
  return VARIANTS[name]
