"""Losses shared by the tasks."""

import functools
from typing import Callable

import jax
import jax.numpy as jnp


def cross_entropy(
  logits: jax.Array,
  labels: jax.Array,
  label_smoothing: float = 0.0,
  *,
  where: jax.Array | None = None,
) -> jax.Array:
  """Per-position cross-entropy against label-smoothed targets.

  The smoothed loss has its minimum entropy subtracted, so a perfect model scores 0 for any
  smoothing (as in the Transformer paper's set-up, where perplexity is reported unsmoothed).

  Args:
    logits: float `[..., V]`.
    labels: int `[...]`, the correct classes.
    label_smoothing: probability mass spread uniformly over the V - 1 wrong classes.
    where: bool `[...]`, the positions that count (e.g. not padding); the others get loss 0.

  Returns:
    `[...]` losses, float32 (float64 for float64 logits).
  """
  vocab = logits.shape[-1]
  logits = logits.astype(jnp.promote_types(logits.dtype, jnp.float32))  # float64 stays float64
  on = 1.0 - label_smoothing
  off = label_smoothing / (vocab - 1)
  soft = jax.nn.one_hot(labels, vocab, dtype=logits.dtype) * (on - off) + off  # [..., V]
  min_entropy = -(on * jnp.log(on) + (vocab - 1) * off * jnp.log(off + 1e-20))
  # -sum(soft * log_softmax(logits)), written with log_softmax = logits - logsumexp(logits) and
  # sum(soft) = 1: two reductions of the logits, no [..., V] array of log-probabilities.
  losses = jax.nn.logsumexp(logits, axis=-1) - jnp.sum(soft * logits, axis=-1) - min_entropy
  return losses if where is None else jnp.where(where, losses, 0.0)


# Rows of logits a chunk of `summed_cross_entropy` makes at once: 16M numbers (64 MB in float32),
# e.g. 341 rows of a 49k-word vocabulary, 64 of Gemma 3's 262k.
CHUNK_LOGITS = 2**24


def summed_cross_entropy(
  project: Callable[[jax.Array], jax.Array],
  states: jax.Array,
  labels: jax.Array,
  weights: jax.Array,
  label_smoothing: float = 0.0,
) -> tuple[jax.Array, jax.Array]:
  """`(sum(weights * cross_entropy(project(states), labels)), argmax == labels)`, computed a
  chunk of rows at a time, with no `[..., V]` logits kept for the backward pass.

  A language model's output layer makes logits far larger than the rest of its activations
  (SmolLM2, 8 x 128 tokens: 200 MB a copy; Gemma 3's 262k words: 1 GB), and autodiff keeps
  them and their gradient. Here each chunk's loss and its gradient with respect to the states
  and to the output layer's parameters are taken together in the forward pass (its logits are
  then dropped); the backward pass only scales them by the incoming cotangent. Same FLOPs as
  autodiff, as in Liger-Kernel's fused linear cross-entropy (Hsu et al. 2024). Not
  differentiated (an evaluation), it computes the chunks' losses only.

  Args:
    project: states `[R, D]` -> logits `[R, V]` (a model's output layer; the parameters it reads
      get their gradients through `jax.closure_convert`).
    states: `[..., D]`; labels int `[...]` and weights float or bool `[...]` (0 = not scored).
    label_smoothing: as `cross_entropy`.
  """
  x = states.reshape(-1, states.shape[-1])  # [N, D]
  count = -(-x.shape[0] // max(1, CHUNK_LOGITS // jax.eval_shape(project, x[:1]).shape[-1]))
  rows = -(-x.shape[0] // count)  # as even as they come: 1024 rows in 4 of 256, not 3 + 1 of 341
  converted, params = jax.closure_convert(project, x[:rows])  # traced at a chunk's shape
  return _summed(
    converted, label_smoothing, rows, x, labels.reshape(-1), weights.reshape(-1), *params
  )


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _summed(project, label_smoothing, rows, x, labels, weights, *params):
  # Not differentiated (an evaluation): the chunks' losses only.
  out, _ = _chunked(project, label_smoothing, rows, x, labels, weights, params, grads=False)
  return out


def _summed_forward(project, label_smoothing, rows, x, labels, weights, *params):
  return _chunked(project, label_smoothing, rows, x, labels, weights, params, grads=True)


def _chunked(project, label_smoothing, rows, x, labels, weights, params, *, grads: bool):
  """`((loss sum, right [N]), (dloss/dx [N, D], dloss/dparams) or None)`, `rows` at a time
  (`lax.scan`), the gradients where `grads`."""
  n = x.shape[0]
  pad = -n % rows  # padded rows weigh 0
  chunks = [
    jnp.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1)).reshape(-1, rows, *a.shape[1:])
    for a in (x, labels, weights.astype(jnp.promote_types(x.dtype, jnp.float32)))
  ]

  def chunk_loss(x, params, labels, weights):
    logits = project(x, *params)  # [rows, V]
    right = jnp.argmax(logits, axis=-1) == labels
    losses = cross_entropy(logits, labels, label_smoothing, where=weights > 0)
    return jnp.sum(weights * losses), right

  def step(sums, chunk):
    if not grads:
      return sums, chunk_loss(chunk[0], params, *chunk[1:])
    x, labels, weights = chunk
    (loss, right), (dx, dparams) = jax.value_and_grad(chunk_loss, (0, 1), has_aux=True)(
      x, params, labels, weights
    )
    return jax.tree.map(jnp.add, sums, dparams), (loss, right, dx)

  zeros = jax.tree.map(jnp.zeros_like, params) if grads else ()
  dparams, (losses, right, *dx) = jax.lax.scan(step, zeros, chunks)
  out = (losses.sum(), right.reshape(-1)[:n])
  return out, (dx[0].reshape(-1, x.shape[-1])[:n], dparams) if grads else None


def _summed_backward(project, label_smoothing, rows, grads, cotangents):
  del project, label_smoothing, rows
  dx, dparams = grads
  scale = cotangents[0]  # of the loss sum; `right` has none
  return (
    (scale * dx).astype(dx.dtype),
    None,
    None,
    *((scale * d).astype(d.dtype) for d in dparams),
  )


_summed.defvjp(_summed_forward, _summed_backward)
