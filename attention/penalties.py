"""Regularisers on attention weights."""

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
    raise ValueError(f"doubly_stochastic_penalty: weights must be [..., T, R], got shape "
                     f"{tuple(weights.shape)}.")
  if mask is not None:
    mask = jnp.asarray(mask)
    try:
      fits = jnp.broadcast_shapes(mask.shape, weights.shape[:-1]) == weights.shape[:-1]
    except ValueError:
      fits = False
    if not fits:
      raise ValueError(f"doubly_stochastic_penalty: mask of shape {tuple(mask.shape)} does not "
                       f"broadcast to the steps [..., T] = {tuple(weights.shape[:-1])}.")
    weights = jnp.where(mask[..., None], weights, 0.0)
  per_region = jnp.sum(weights, axis=-2)                                  # [..., R]
  return jnp.sum((1.0 - per_region) ** 2, axis=-1)                        # [...]
