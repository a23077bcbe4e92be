"""Losses shared by the tasks."""

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
  # sum(soft) = 1, so that no [..., V] array of log-probabilities is made and kept for the
  # backward pass (a 49k-word vocabulary's logits take 200 MB a copy at 8 x 128 tokens).
  losses = jax.nn.logsumexp(logits, axis=-1) - jnp.sum(soft * logits, axis=-1) - min_entropy
  return losses if where is None else jnp.where(where, losses, 0.0)
