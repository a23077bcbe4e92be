"""Attention variants: the one registry an attention layer dispatches through.

A variant is a small contract of pure functions (`Variant`): how a whole sequence attends
(`attend`), the weights it averages the values with (`weights`, what a capture reads), what a
decoder keeps between steps (`init_state`) and how one step, or a block of steps when a prompt is
prefilled, reads and updates it (`step`), and the options it takes (`options`, names from
`OPTIONS`). `VARIANTS` maps the config name (`attention=` of every Transformer-family model) to
one:

- `'softmax'`: `softmax(scores + biases)` over the keys, through `scaled_dot_product_attention`'s
  kernels (or any score of `attention.SCORES`). Its decoding state is a K/V buffer of every
  position, or with a `window` a ring buffer of the last `window` positions (after the first
  `sink_tokens`, kept for good), so the memory of a windowed decoder does not grow with its
  length.
- `'linear'`: `attention.linear_attention` (elu + 1 features); its decoding state is the fixed
  `[H, Dv]` running sum, O(1) per token. It takes no options: it forms no scores.
- `'sigmoid'`: `attention.sigmoid_attention`, each weight its own sigmoid (no normalisation over
  the keys); it takes a bias, a window and dropout, and decodes with softmax's K/V cache.

The options (`bias`, `alibi_slopes`, `window`, `softcap`, `sink`, ...) mean what
`scaled_dot_product_attention` documents. Shapes: queries `[B, N, T, H]`, keys and values
`[B, K, S, H|Dv]` with K key/value heads dividing the N query heads (grouped-query attention,
query head n reads key/value head `n // (N // K)`).
"""

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

from attention.core import attend as weighted_sum
from attention.core import drop_weights
from attention.linear import init_linear_state, linear_attention, linear_attention_weights
from attention.sdpa import attention_weights, normalize_scores, scaled_dot_product_attention
from attention.sigmoid import sigmoid_attention, sigmoid_attention_weights

Array = jax.Array
State = dict[str, Array]
# `(q [B, N, T, H], keys [B, K, S, H], values [B, K, S, Dv], q_positions [T], k_positions [S])
# -> out [B, N, T, Dv]`: the layer's variant over explicit positions, for decoding steps.
AttendAt = Callable[[Array, Array, Array, Array, Array], Array]


def group_queries(q: Array, kv_heads: int) -> Array:
  """`[B, N, T, H] -> [B, K, N/K, T, H]`: the query heads that share each key/value head."""
  return q.reshape(*q.shape[:-3], kv_heads, q.shape[-3] // kv_heads, *q.shape[-2:])


def repeat_kv(x: Array, num_heads: int) -> Array:
  """`[B, K, S, H] -> [B, N, S, H]`, each key/value head repeated for its N/K query heads."""
  return jnp.repeat(x, num_heads // x.shape[-3], axis=-3)


def window_mask(q_positions: Array, k_positions: Array, window: int, sink_tokens: int = 0) -> Array:
  """Causal visibility by explicit positions, `[T, S]`: key j visible iff `0 <= j <= i` and, with
  a window, `i - j < window` or `j < sink_tokens` (the first tokens kept past the window:
  StreamingLLM's attention sinks). Negative key positions are empty cache slots."""
  distance = q_positions[:, None] - k_positions[None, :]  # [T, S]
  visible = (distance >= 0) & (k_positions[None, :] >= 0)
  if not window:
    return visible
  return visible & ((distance < window) | (k_positions[None, :] < sink_tokens))


def cache_offsets(
  q_positions: Array, k_positions: Array, window: int, sink_tokens: int = 0
) -> Array:
  """`j - i` per query and key as a streaming cache sees them, `[T, S]`: the kept first tokens
  sit right before the window, so key j < sink_tokens is at most `window + sink_tokens - 1 - j`
  away, however far the stream has gone (StreamingLLM numbers positions within its cache;
  with the relative position biases that is this offset). Other keys: their true offset."""
  relative = k_positions[None, :] - q_positions[:, None]  # [T, S]
  if not sink_tokens:
    return relative
  in_cache = k_positions[None, :] - (window + sink_tokens - 1)
  return jnp.where(k_positions[None, :] < sink_tokens, jnp.maximum(relative, in_cache), relative)


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
  dropout_rate=0.0,
  dropout_rng=None,
  implementation=None,
):
  """Softmax attention; `scores`, when given, replaces the scaled dot product:
  `(q [B, N, T, H], k [B, N, S, H]) -> [B, N, T, S]`, scaled."""
  if scores is None:
    return scaled_dot_product_attention(
      q,
      k,
      v,
      mask=mask,
      bias=bias,
      alibi_slopes=alibi_slopes,
      sink=sink,
      window=window,
      softcap=softcap,
      is_causal=is_causal,
      dropout_rate=dropout_rate,
      dropout_rng=dropout_rng,
      implementation=implementation,
    )
  weights = _softmax_weights(
    q,
    k,
    mask=mask,
    is_causal=is_causal,
    scores=scores,
    bias=bias,
    alibi_slopes=alibi_slopes,
    sink=sink,
    window=window,
    softcap=softcap,
  )
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
    return attention_weights(q, k, **options)
  return normalize_scores(scores(q, repeat_kv(k, q.shape[-3])), **options)


def _kv_init(
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
  """Zeroed K/V slots `{'k': [B, K, L, H], 'v': [B, K, L, Dv]}`: L = max_length positions, or
  with a window the `sink_tokens` first positions (slot p) and a ring buffer of the `window`
  latest later ones (position p in slot `sink_tokens + (p - sink_tokens) % window`)."""
  slots = sink_tokens + window if window else max_length
  return {
    'k': jnp.zeros((batch, kv_heads, slots, d_k), dtype),
    'v': jnp.zeros((batch, kv_heads, slots, d_v), dtype),
  }


def _slot_positions(step: Array, window: int, sink_tokens: int) -> Array:
  """The position each slot of a windowed cache holds before `step` is written, -1 if empty:
  the first-token slots hold 0 .. sink_tokens-1, ring slot s the latest p < step with
  p >= sink_tokens and `(p - sink_tokens) % window == s`. `[sink_tokens + window]`."""
  first = jnp.arange(sink_tokens)
  ring = step - 1 - jnp.mod(step - 1 - sink_tokens - jnp.arange(window), window)
  return jnp.concatenate(
    [jnp.where(first < step, first, -1), jnp.where(ring >= sink_tokens, ring, -1)]
  )


def _kv_step(
  state: State,
  q: Array,
  k: Array,
  v: Array,
  step: Array,
  *,
  window: int,
  sink_tokens: int,
  attend_at: AttendAt,
) -> tuple[Array, State]:
  """Positions `step .. step+T-1`: write their keys/values, attend to every visible one.

  The full buffer is written first and read whole, masked by position. A windowed cache is read
  together with the new block (the block's first rows may be overwritten by its last ones when
  T > window), then keeps the block's first tokens and its last `window` positions.
  """
  t = q.shape[-2]
  positions = step + jnp.arange(t)  # [T]
  new = {'k': k.astype(state['k'].dtype), 'v': v.astype(state['v'].dtype)}
  if not window:
    state = {
      name: jax.lax.dynamic_update_slice_in_dim(state[name], new[name], step, axis=2)
      for name in ('k', 'v')
    }
    k_positions = jnp.arange(state['k'].shape[2])
    return attend_at(q, state['k'], state['v'], positions, k_positions), state
  keys = jnp.concatenate([state['k'], new['k']], axis=2)  # [B, K, L+T, H]
  values = jnp.concatenate([state['v'], new['v']], axis=2)
  k_positions = jnp.concatenate([_slot_positions(step, window, sink_tokens), positions])
  out = attend_at(q, keys, values, positions, k_positions)
  # A first token goes to its own slot, the last `window` of the others to the ring (distinct
  # slots either way); the rest go to slot `past`, one extra slot cut off after writing. (Not
  # mode="drop": XLA:GPU can write an update of the index just past the end into the last slot,
  # jax issue #21708.)
  kept, past = min(t, window), sink_tokens + window
  first = jnp.where(positions < sink_tokens, positions, past)
  latest = positions[t - kept :]
  ring = jnp.where(latest >= sink_tokens, sink_tokens + jnp.mod(latest - sink_tokens, window), past)

  def write(buffer: Array, rows: Array) -> Array:
    padded = jnp.pad(buffer, ((0, 0), (0, 0), (0, 1), (0, 0)))  # [B, K, past + 1, H]
    padded = padded.at[:, :, first].set(rows).at[:, :, ring].set(rows[:, :, t - kept :])
    return padded[:, :, :past]

  return out, {name: write(state[name], new[name]) for name in ('k', 'v')}


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


def _linear_attend(q, k, v, *, mask=None, is_causal=False):
  """Linear attention with grouped key/value heads; `mask` is a key mask `[B, 1, 1, S]`."""
  grouped = group_queries(q, k.shape[-3])  # [B, K, G, T, H]
  k, v = k[..., None, :, :], v[..., None, :, :]  # [B, K, 1, S, H|Dv]
  out = linear_attention(grouped, k, v, mask=_key_mask(mask), is_causal=is_causal)
  return out.reshape(*q.shape[:-1], v.shape[-1])


def _linear_weights(q, k, *, mask=None, is_causal=False):
  """The normalised kernel weights linear attention averages with, `[B, N, T, S]`."""
  grouped = group_queries(q, k.shape[-3])  # [B, K, G, T, H]
  weights = linear_attention_weights(
    grouped, k[..., None, :, :], mask=_key_mask(mask), is_causal=is_causal
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
  """The running sums `{'s': [B, K, H, Dv], 'z': [B, K, H]}`, whatever the length."""
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
) -> tuple[Array, State]:
  """Positions `step ..` of `q [B, N, T, H]` from the running sums, which take in k and v."""
  del step, window, sink_tokens, attend_at  # the state holds everything before this block
  grouped = group_queries(q, k.shape[-3])  # [B, K, G, T, H]
  per_group = {name: value[:, :, None] for name, value in state.items()}  # the G axis
  out, state = linear_attention(
    grouped,
    k[..., None, :, :],
    v[..., None, :, :],
    is_causal=True,
    state=per_group,
    return_state=True,
  )
  state = {name: value[:, :, 0] for name, value in state.items()}  # [B, K, H, Dv], [B, K, H]
  return out.reshape(*q.shape[:-1], v.shape[-1]).astype(q.dtype), state


def _sigmoid_attend(q, k, v, *, mask=None, is_causal=False, bias=None, window=0, **dropout):
  """Sigmoid attention with grouped key/value heads; `dropout`: `dropout_rate`, `dropout_rng`."""
  heads = q.shape[-3]
  return sigmoid_attention(
    q,
    repeat_kv(k, heads),
    repeat_kv(v, heads),
    mask=mask,
    is_causal=is_causal,
    bias=bias,
    window=window,
    **dropout,
  )


def _sigmoid_weights(q, k, *, mask=None, is_causal=False, bias=None, window=0):
  """The weights `_sigmoid_attend` averages with, `[B, N, T, S]`."""
  k = repeat_kv(k, q.shape[-3])
  return sigmoid_attention_weights(q, k, mask=mask, is_causal=is_causal, bias=bias, window=window)


# Every option a variant may take besides `mask` and `is_causal`, as its `attend` and `weights`
# name them (`scaled_dot_product_attention` documents each; `scores` is a score of
# `attention.SCORES` replacing the scaled dot product). `weights` takes them all but the last two.
OPTIONS = (
  'scores',
  'bias',
  'alibi_slopes',
  'sink',
  'window',
  'softcap',
  'dropout_rate',
  'implementation',
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
    step: `(state, q, k, v, step, *, window, sink_tokens, attend_at) -> (out, state)` for the
      new positions `step .. step+T-1`; `attend_at(q, keys, values, q_positions, k_positions)`
      is the layer's own variant over keys at explicit positions.
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
    _softmax_attend, _softmax_weights, _kv_init, _kv_step, options=frozenset(OPTIONS)
  ),
  'linear': Variant(
    _linear_attend, _linear_weights, _linear_init, _linear_step, options=frozenset()
  ),
  # Decodes as softmax does: a K/V cache, read by the layer's own variant over explicit positions.
  'sigmoid': Variant(
    _sigmoid_attend,
    _sigmoid_weights,
    _kv_init,
    _kv_step,
    options=frozenset({'bias', 'window', 'dropout_rate'}),
  ),
}


def get_variant(name: str) -> Variant:
  """`VARIANTS[name]`; an unknown name raises ValueError listing the valid ones."""
  if name not in VARIANTS:
    raise ValueError(
      f'Unknown attention variant {name!r}; valid variants: {", ".join(sorted(VARIANTS))}.'
    )
  return VARIANTS[name]
