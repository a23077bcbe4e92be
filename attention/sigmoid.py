"""Sigmoid attention (Ramapuram et al. 2025, "Theory, Analysis, and Best Practices for Sigmoid
Self-Attention").

Softmax makes the weights of a query compete: they are normalised over its keys. Sigmoid attention
weighs each key on its own,

    w_ij = σ(q_i·k_j / sqrt(H) + bias_ij + b_i),    out_i = Σ_j w_ij v_j,

so the weights of a row need not sum to 1 and no maximum over keys is taken. The paper shows that
without a bias the output norm grows with the sequence length, and uses b = -log(n) for sequences
of length n: at initialisation (scores near 0) each weight is then about 1/n, as a softmax row's.
Attend takes n per query, the number of keys that query may see (with a causal mask query i sees
i + 1), so causal and windowed rows start normalised too, and a decoding step, which sees the
same keys, computes the same weights as the whole sequence.

Shapes: queries `[..., T, H]`, keys `[..., S, H]`, values `[..., S, Dv]`; leading dims broadcast,
and keys and values with fewer heads (axis -3) than the queries are grouped-query heads, each
read by `N / K` query heads (`attention.repeat_kv`). Masks broadcast to `[..., T, S]` with
True = may attend; a masked key gets weight exactly 0.
"""

import jax
import jax.numpy as jnp

from attention.core import attend, drop_weights, repeat_kv
from attention.masks import causal_mask, combine_masks, sliding_window_mask

Array = jax.Array


def sigmoid_attention_weights(
  q: Array,
  k: Array,
  *,
  mask: Array | None = None,
  is_causal: bool = False,
  bias: Array | None = None,
  window: int = 0,
) -> Array:
  """The weights `σ(q kᵀ / sqrt(H) + bias - log(visible keys))`, zero where masked, `[..., T, S]`
  in q's dtype.

  Args:
    q: queries `[..., T, H]`.
    k: keys `[..., S, H]`.
    mask: boolean, broadcastable to `[..., T, S]`; True = may attend.
    is_causal: also apply `causal_mask(T, S)`.
    bias: added to the scores (e.g. ALiBi or T5 terms), broadcastable to `[..., T, S]`.
    window: if > 0, query i sees key j only if `|i - j| < window` (causal: the last `window`).
  """
  t, s = q.shape[-2], k.shape[-2]
  k = _ungrouped(k, q)
  scores = jnp.einsum('...td,...sd->...ts', q, k, preferred_element_type=jnp.float32)
  scores = scores * q.shape[-1] ** -0.5
  if bias is not None:
    scores = scores + bias.astype(scores.dtype)
  if is_causal:
    mask = combine_masks(mask, causal_mask(t, s))
  if window:
    mask = combine_masks(mask, sliding_window_mask(t, s, window=window))
  visible = jnp.ones(scores.shape, bool) if mask is None else jnp.broadcast_to(mask, scores.shape)
  count = jnp.maximum(jnp.sum(visible, axis=-1, keepdims=True), 1)  # [..., T, 1]
  weights = jnp.where(visible, jax.nn.sigmoid(scores - jnp.log(count)), 0.0)
  return weights.astype(q.dtype)


def sigmoid_attention(
  q: Array,
  k: Array,
  v: Array,
  *,
  mask: Array | None = None,
  is_causal: bool = False,
  bias: Array | None = None,
  window: int = 0,
  dropout_rate: float = 0.0,
  dropout_rng: Array | None = None,
) -> Array:
  """`sigmoid_attention_weights(q, k, ...) @ v`, `[..., T, Dv]`, with dropout on the weights
  (`dropout_rate > 0` needs `dropout_rng`)."""
  weights = sigmoid_attention_weights(
    q, k, mask=mask, is_causal=is_causal, bias=bias, window=window
  )
  return attend(drop_weights(weights, dropout_rate, dropout_rng), _ungrouped(v, q))


def _ungrouped(x: Array, q: Array) -> Array:
  """Keys or values `[..., K, S, D]` repeated to q's N heads where K < N (grouped-query)."""
  if q.ndim < 3 or x.ndim < 3 or x.shape[-3] == q.shape[-3]:
    return x
  return repeat_kv(x, q.shape[-3])
