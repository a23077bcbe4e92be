"""Attention rollout (Abnar & Zuidema 2020): how much each output token draws on each input token.

One layer's weights say where a token looks in the layer below, not in the input. Rollout follows
the information through the stack: it multiplies the layers' (head-averaged) weight matrices,
each with the identity mixed in for the residual connection that carries a token past attention.
"""

import jax
import jax.numpy as jnp

Array = jax.Array


def attention_rollout(weights: Array, *, residual: bool = True) -> Array:
  """Rolls attention out through a stack of self-attention layers.

  Per layer l the heads are averaged into `A_l`; with `residual`, `A_l = 0.5 A_l + 0.5 I` with
  rows renormalised (rows of zeros, e.g. fully masked queries, become identity rows). The result
  is `A_L ... A_2 A_1`: row i is how much the final state of token i draws on each input token.

  Args:
    weights: attention weights `[..., L, N, T, T]` (layers, heads, queries, keys), first layer
      first, rows summing to one (or zero).
    residual: account for the residual path; False multiplies the averaged weights as they are.

  Returns:
    `[..., T, T]` float32; rows sum to one where every layer's rows did.
  """
  weights = jnp.asarray(weights, jnp.float32)
  if weights.ndim < 4 or weights.shape[-1] != weights.shape[-2]:
    raise ValueError(
      f'attention_rollout: weights must be self-attention [..., L, N, T, T], got '
      f'shape {tuple(weights.shape)}.'
    )
  layers = jnp.mean(weights, axis=-3)  # [..., L, T, T]
  if residual:
    layers = 0.5 * layers + 0.5 * jnp.eye(layers.shape[-1], dtype=layers.dtype)
    layers = layers / jnp.sum(layers, axis=-1, keepdims=True)
  rollout = layers[..., 0, :, :]  # [..., T, T]
  for l in range(1, layers.shape[-3]):
    rollout = jnp.einsum('...ij,...jk->...ik', layers[..., l, :, :], rollout)
  return rollout
