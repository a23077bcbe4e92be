"""Copying by pointing: source positions as more outcomes of the output softmax.

A pointer (Vinyals et al. 2015) turns attention scores over the source into a distribution over
source positions. CopyNet (Gu et al. 2016) puts copying position j into the same softmax as
generating a vocabulary id w, so copy scores `c_j` and vocabulary logits compete in one
normalisation:

    p(w) ∝ exp(logit_w) + Σ_{j : source_j = w} exp(c_j)

Source and output ids must come from one vocabulary, so that a source id is also the output id of
the same piece. Shapes: logits `[B, T, V]`, copy scores `[B, T, S]`, source ids and mask `[B, S]`.
"""

import jax
import jax.numpy as jnp

Array = jax.Array


def copy_logits(logits: Array, copy_scores: Array, source_ids: Array, source_mask: Array) -> Array:
  """Logits whose softmax is the joint generate-or-copy distribution `p(w)` above.

  Each id the source holds gets `log(exp(logit_w) + Σ_j exp(c_j))`; every other id keeps its
  logit. Only the at most S held ids change, so this costs a gather and a scatter-add on
  `[B, T, V]`, not a dense pass over the vocabulary.

  Args:
    logits: vocabulary logits `[B, T, V]`, float32.
    copy_scores: copy scores `c` `[B, T, S]`, float32.
    source_ids: `[B, S]`, ids of the output vocabulary.
    source_mask: `[B, S]`, True = a real source token (padding copies nothing).

  Returns:
    `[B, T, V]` in the logits' dtype.
  """
  logits, copy_scores, source_ids, source_mask = map(
    jnp.asarray, (logits, copy_scores, source_ids, source_mask)
  )
  # Positions holding the same id pool their copy scores: `same[b, j, k]` says position k is j
  # or a real position holding j's id. Padding copies nothing (its step is zeroed below; it
  # still pools with itself, so that no sum is over nothing).
  same = (source_ids[:, :, None] == source_ids[:, None, :]) & source_mask[:, None, :]
  same = same | jnp.eye(source_ids.shape[1], dtype=bool)  # [B, S, S]
  # log Σ_k same[j, k] exp(c_k) as one batched matmul (a masked logsumexp over `[B, T, S, S]`
  # costs about 1.7 times as much on CPU), shifted by each row's largest score. A sum that
  # underflows (scores about 87 below that largest) adds nothing: its log is floored so that no
  # gradient is infinite, which gives its id at most a logit 87 below the largest, a share under
  # 1e-38 of a mass that holds the largest.
  shift = jax.lax.stop_gradient(jnp.max(copy_scores, axis=-1, keepdims=True))
  sums = jnp.einsum('btk,bjk->btj', jnp.exp(copy_scores - shift), same.astype(copy_scores.dtype))
  pooled = jnp.log(jnp.maximum(sums, jnp.finfo(copy_scores.dtype).tiny)) + shift  # [B, T, S]
  at_ids = jnp.take_along_axis(logits, source_ids[:, None, :], axis=-1)  # [B, T, S]
  # The new logit of each source position's id, as an increment; an id held by n positions
  # gets n equal shares of it through the scatter-add.
  shares = jnp.sum(same, axis=-1)[:, None, :]  # [B, 1, S]
  step = (jnp.logaddexp(at_ids, pooled) - at_ids) / jnp.maximum(shares, 1)
  step = jnp.where(source_mask[:, None, :], step, 0.0)
  rows = jnp.arange(logits.shape[0])[:, None, None]
  cols = jnp.arange(logits.shape[1])[None, :, None]
  return logits.at[rows, cols, source_ids[:, None, :]].add(step)
