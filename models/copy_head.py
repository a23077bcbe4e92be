"""Copying from the source: the pointer-generator output of See et al. (2017).

A translation model must often move a source token unchanged: a printf placeholder, a file name,
an identifier. Through the output layer alone it must learn each such token's embedding well
enough to regenerate it, which rare identifiers never get. A pointer (Vinyals et al. 2015) lets
attention itself choose the token: one more attention from the decoder state over the encoder
states gives weights `a [T, S]`; the probability of copying source token j is its weight, added
onto that token's id. A gate `p_gen` (from the decoder state and the attention's context) mixes
the two distributions:

    p(w) = p_gen * softmax(logits)[w] + (1 - p_gen) * sum_{j : source_j = w} a_j

Source and target ids must come from one vocabulary (a shared SentencePiece model), so that a
source id is also the target id of the same piece. The head returns `log p(w)`, which is its own
`log_softmax`: every loss and search that takes logits takes it unchanged.
"""

from flax import nnx
import jax
import jax.numpy as jnp

from models.layers import dense

Array = jax.Array


class CopyHead(nnx.Module):
  """Mixes a vocabulary distribution with a copy distribution over the source ids."""

  def __init__(self, d_model: int, *, rngs: nnx.Rngs):
    self.query = dense(d_model, d_model, use_bias=False, rngs=rngs)
    self.gate = dense(2 * d_model, 1, rngs=rngs)

  def __call__(
    self, logits: Array, y: Array, memory: Array, source_ids: Array, source_mask: Array
  ) -> Array:
    """`log p(w)` `[B, T, V]` float32.

    Args:
      logits: the vocabulary logits `[B, T, V]`.
      y: the decoder states they were computed from `[B, T, D]`.
      memory: encoder states `[B, S, D]`.
      source_ids: `[B, S]`, ids of the target vocabulary.
      source_mask: `[B, S]`, True = a real source token.
    """
    scale = y.shape[-1] ** -0.5
    scores = jnp.einsum('btd,bsd->bts', self.query(y), memory).astype(jnp.float32) * scale
    scores = jnp.where(source_mask[:, None, :], scores, -1e30)
    weights = jax.nn.softmax(scores, axis=-1)  # [B, T, S]
    context = jnp.einsum('bts,bsd->btd', weights.astype(memory.dtype), memory)
    gate = self.gate(jnp.concatenate([y, context], axis=-1))[..., 0].astype(jnp.float32)
    # Each source position's weight added onto its id; repeated ids accumulate. Padded positions
    # have weight 0.
    copy = jax.vmap(lambda w, ids: jnp.zeros((w.shape[0], logits.shape[-1])).at[:, ids].add(w))(
      weights, source_ids
    )  # [B, T, V]
    # log(copy) is -inf where no source token has the id; the inner `where` keeps its gradient
    # finite there (the logaddexp below gives that branch weight 0).
    seen = copy > 0.0
    log_copy = jnp.where(seen, jnp.log(jnp.where(seen, copy, 1.0)), -jnp.inf)
    log_vocab = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return jnp.logaddexp(
      jax.nn.log_sigmoid(gate)[..., None] + log_vocab,
      jax.nn.log_sigmoid(-gate)[..., None] + log_copy,
    )
