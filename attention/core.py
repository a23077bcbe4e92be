"""Weights from scores, outputs from weights: the generic attention pipeline."""

import functools
from typing import Callable

import jax
import jax.numpy as jnp

from attention.scores import scaled_dot_scores

Array = jax.Array


def check_mask(mask: Array | None, scores_shape: tuple[int, ...], name: str) -> None:
  """Raises ValueError unless `mask` broadcasts to `scores_shape` `[..., T, S]`."""
  if mask is None:
    return
  try:
    out = jnp.broadcast_shapes(tuple(mask.shape), scores_shape)
  except ValueError:
    out = None
  if out != tuple(scores_shape):
    raise ValueError(
      f'{name}: mask of shape {tuple(mask.shape)} does not broadcast to the scores '
      f'[..., T, S] = {tuple(scores_shape)}.'
    )


def check_kv(k: Array, v: Array, name: str) -> None:
  """Raises ValueError unless keys `[..., S, D]` and values `[..., S, Dv]` share the length S."""
  if v.ndim < 2:
    raise ValueError(f'{name}: values need shape [..., S, Dv], got v{tuple(v.shape)}.')
  if k.shape[-2] != v.shape[-2]:
    raise ValueError(
      f'{name}: keys have S={k.shape[-2]} but values have S={v.shape[-2]} '
      f'(k{tuple(k.shape)}, v{tuple(v.shape)}).'
    )


def masked_softmax(scores: Array, mask: Array | None = None, axis: int = -1) -> Array:
  """Softmax over keys that leaves masked keys at exactly zero weight.

  A row whose keys are all masked gets all-zero weights (not NaN, not uniform), and the gradient
  stays finite: masked scores are replaced by a finite minimum before the max-subtraction, and
  the zero row sum is guarded. Low-precision scores are normalised in float32.

  Args:
    scores: `[..., T, S]`.
    mask: boolean, broadcastable to `scores`; True = may attend.
    axis: the key axis.

  Returns:
    Weights of the same shape and dtype as `scores`; unmasked rows sum to 1.
  """
  check_mask(mask, scores.shape, 'masked_softmax')
  x = scores.astype(jnp.promote_types(scores.dtype, jnp.float32))
  if mask is None:
    return jax.nn.softmax(x, axis=axis).astype(scores.dtype)
  return _masked_softmax(x, mask, axis).astype(scores.dtype)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _masked_softmax(x: Array, mask: Array, axis: int) -> Array:
  x = jnp.where(mask, x, jnp.finfo(x.dtype).min)
  e = jnp.where(mask, jnp.exp(x - jnp.max(x, axis=axis, keepdims=True)), 0.0)
  total = jnp.sum(e, axis=axis, keepdims=True)
  return e / jnp.where(total > 0, total, 1.0)


@_masked_softmax.defjvp
def _masked_softmax_jvp(axis, primals, tangents):
  """Softmax's derivative from its output alone, `dw = w * (dx - sum(w * dx))`, as
  `jax.nn.softmax`'s: the backward pass keeps only the weights `w`, not the scores or their
  exponentials (SmolLM2's train step: about 135 MB less). A masked key has `w = 0`, so neither
  its weight nor its gradient moves."""
  (x, mask), (dx, _) = primals, tangents
  w = _masked_softmax(x, mask, axis)
  return w, w * (dx - jnp.sum(w * dx, axis=axis, keepdims=True))


def rms_normalize(x: Array, eps: float = 1e-6) -> Array:
  """`x / rms(x)` over the last axis, in float32 or wider (RMSNorm without its learned scale).

  Queries and keys normalised this way (qk-norm) have scores bounded by the feature size,
  however large the projections grow.
  """
  x = x.astype(jnp.promote_types(x.dtype, jnp.float32))
  return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)


def drop_weights(weights: Array, rate: float, rng: Array | None) -> Array:
  """Dropout on attention weights `[..., T, S]` (kept ones scaled by `1/(1-rate)`); a rate of 0
  returns them unchanged."""
  if rate == 0.0:
    return weights
  keep = jax.random.bernoulli(rng, 1.0 - rate, weights.shape)
  return jnp.where(keep, weights / (1.0 - rate), 0.0).astype(weights.dtype)


def repeat_kv(x: Array, num_heads: int) -> Array:
  """`[B, K, S, H] -> [B, N, S, H]`, each key/value head repeated for its N/K query heads."""
  return jnp.repeat(x, num_heads // x.shape[-3], axis=-3)


def attend(weights: Array, values: Array) -> Array:
  """Weighted sum of values: `[..., T, S] x [..., S, Dv] -> [..., T, Dv]`."""
  if weights.shape[-1] != values.shape[-2]:
    raise ValueError(
      f'attend: weights cover S={weights.shape[-1]} keys but values have '
      f'S={values.shape[-2]} (weights{tuple(weights.shape)}, values{tuple(values.shape)}).'
    )
  return jnp.einsum('...ts,...sv->...tv', weights, values)


def attention(
  q: Array,
  k: Array,
  v: Array,
  *,
  score_fn: Callable[[Array, Array], Array] = scaled_dot_scores,
  mask: Array | None = None,
) -> tuple[Array, Array]:
  """Generic attention: `score_fn` -> masked softmax -> weighted sum of values.

  Args:
    q: queries `[..., T, D]`.
    k: keys `[..., S, D]` (whatever `score_fn` accepts).
    v: values `[..., S, Dv]`.
    score_fn: `(q, k) -> [..., T, S]`; bind extra parameters with `functools.partial`, e.g.
      `partial(general_scores, w=w)`.
    mask: boolean, broadcastable to `[..., T, S]`.

  Returns:
    `(output [..., T, Dv], weights [..., T, S])`.
  """
  check_kv(k, v, 'attention')
  weights = masked_softmax(score_fn(q, k), mask)
  return attend(weights, v), weights


def attention_pooling(
  h: Array, query: Array, mask: Array | None = None, *, keys: Array | None = None
) -> tuple[Array, Array]:
  """Pools a sequence into one vector with a learned query (HAN, Yang et al. 2016).

  `weights = softmax(keys · query)`, `output = Σ_t weights_t h_t`. In HAN the keys are
  `u_t = tanh(W h_t + b)` (computed by the model) and `query` is the context vector `u_w`.

  Args:
    h: states to pool `[..., T, D]`.
    query: context vector `[A]` or `[..., A]`.
    mask: boolean `[..., T]`; True = real position.
    keys: what `query` is compared with, `[..., T, A]`; default `h`.

  Returns:
    `(pooled [..., D], weights [..., T])`.
  """
  keys = h if keys is None else keys
  if keys.shape[:-1] != h.shape[:-1]:
    raise ValueError(
      f'attention_pooling: keys{tuple(keys.shape)} and h{tuple(h.shape)} must agree on [..., T].'
    )
  if query.shape[-1] != keys.shape[-1]:
    raise ValueError(
      f'attention_pooling: query features {query.shape[-1]} differ from key features '
      f'{keys.shape[-1]}.'
    )
  scores = jnp.einsum('...ta,...a->...t', keys, query)  # [..., T]
  weights = masked_softmax(scores, mask)
  return jnp.einsum('...t,...td->...d', weights, h), weights


def split_heads(x: Array, num_heads: int) -> Array:
  """`[..., T, N*H] -> [..., N, T, H]`: heads become a leading (batch-like) dim."""
  if num_heads < 1 or x.shape[-1] % num_heads:
    raise ValueError(
      f'split_heads: features {x.shape[-1]} are not divisible by num_heads={num_heads}.'
    )
  x = x.reshape(*x.shape[:-1], num_heads, x.shape[-1] // num_heads)  # [..., T, N, H]
  return jnp.swapaxes(x, -3, -2)  # [..., N, T, H]


def merge_heads(x: Array) -> Array:
  """`[..., N, T, H] -> [..., T, N*H]`, the inverse of `split_heads`."""
  if x.ndim < 3:
    raise ValueError(f'merge_heads: expected [..., N, T, H], got shape {tuple(x.shape)}.')
  x = jnp.swapaxes(x, -3, -2)  # [..., T, N, H]
  return x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1])
