"""Statistics of attention weights and regularisers on them."""

import jax
import jax.numpy as jnp

Array = jax.Array


def doubly_stochastic_penalty(weights: Array, mask: Array | None = None) -> Array:
  """Show, Attend and Tell's regulariser `Σ_i (1 - Σ_t α_ti)²` (Xu et al. 2015, eq. 14).

  Softmax makes each step's weights sum to one over the regions; the penalty pushes each region's
  weights summed over the caption towards one as well, so that every part of the image gets
  attention at some step instead of the same regions at every step.

  Args:
    weights: attention weights `[..., T, R]` (caption steps, regions).
    mask: boolean, broadcastable to `[..., T]`; True = real step, padding steps contribute
      nothing. None = all steps real.

  Returns:
    The penalty per example, float32 `[...]`.
  """
  weights = jnp.asarray(weights, jnp.float32)
  if weights.ndim < 2:
    raise ValueError(
      f'doubly_stochastic_penalty: weights must be [..., T, R], got shape {tuple(weights.shape)}.'
    )
  if mask is not None:
    mask = jnp.asarray(mask)
    try:
      fits = jnp.broadcast_shapes(mask.shape, weights.shape[:-1]) == weights.shape[:-1]
    except ValueError:
      fits = False
    if not fits:
      raise ValueError(
        f'doubly_stochastic_penalty: mask of shape {tuple(mask.shape)} does not '
        f'broadcast to the steps [..., T] = {tuple(weights.shape[:-1])}.'
      )
    weights = jnp.where(mask[..., None], weights, 0.0)
  per_region = jnp.sum(weights, axis=-2)  # [..., R]
  return jnp.sum((1.0 - per_region) ** 2, axis=-1)  # [...]


def attention_entropy(weights: Array) -> Array:
  """The entropy `-Σ_s α_s log α_s` of each row of attention weights, in nats.

  0 for a row that puts all its weight on one key, `log S` for a uniform row over S keys; masked
  keys (weight exactly 0) add nothing (0 log 0 = 0). The notes' reason for scaling by √d_k is that
  unscaled scores saturate the softmax: rows of near-zero entropy and vanishing gradients.

  Args:
    weights: attention weights `[..., T, S]`, each row summing to one over the keys.

  Returns:
    float32 `[..., T]`.
  """
  weights = jnp.asarray(weights, jnp.float32)
  safe = jnp.where(weights > 0, weights, 1.0)  # log(1) = 0: zero weights contribute exactly 0
  return -jnp.sum(weights * jnp.log(safe), axis=-1)
