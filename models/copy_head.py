"""Copying from the source: one softmax over generating a token and copying a source position.

A translation model must often move a source token unchanged: a printf placeholder, a file name,
an identifier. Through the output layer alone it must learn each such token's embedding well
enough to regenerate it, which rare identifiers never get. A pointer (Vinyals et al. 2015) lets
attention itself choose: one more attention score `c_j` from the decoder state to each encoder
state j, and copying source position j is one more outcome of the softmax, as in CopyNet (Gu et
al. 2016):

    p(w) ∝ exp(logit_w) + Σ_{j : source_j = w} exp(c_j)

so the copy scores compete with the vocabulary's in one normalisation (See et al. 2017's
pointer-generator mixes two separate distributions with a learned gate instead). Source and target
ids must come from one vocabulary (a shared SentencePiece model), so that a source id is also the
target id of the same piece.

The result is returned as logits, `log(exp(logit_w) + Σ_j exp(c_j))`, equal to the plain logit for
every id the source does not hold (`attention.copy_logits`); only the at most S ids it holds change,
so the head costs a gather and a scatter-add on `[B, T, V]`, not a dense pass per operation (on CPU
a `[64, 64, 8000]` float32 pass costs about as much as the whole output layer's loss).

Coverage (`coverage=True`; See et al. 2017): a pointer alone does not know what it has already
copied, and repeats a piece (`LIBS` -> `LIBSS`). The pointer's attention over the source,
`a_t = softmax_j(c_tj)`, is summed over the earlier target positions, and that sum is added to
the copy scores with a learned weight w (initialised to 0, so training starts as without it):

    c'_tj = c_tj + w · Σ_{t' < t} a_t'j

The sum is of the scores before coverage (See et al. feed back the covered attention itself), so
that every position of a teacher-forced pass is computed at once; cached decoding carries the
running sum `[B, S]`. On the French software messages it did not help (its weight ended at
-0.16; docs/translation.md): the decoder's self-attention already sees what it has emitted.
"""

from flax import nnx
import jax
import jax.numpy as jnp

from attention import copy_logits, dot_scores, masked_softmax
from models.layers import dense

Array = jax.Array


class CopyHead(nnx.Module):
  """Adds the copy scores of the source tokens onto their ids' logits (a joint softmax)."""

  def __init__(self, d_model: int, *, coverage: bool = False, rngs: nnx.Rngs):
    self.query = dense(d_model, d_model, use_bias=False, rngs=rngs)
    self.coverage_weight = nnx.Param(jnp.zeros((), jnp.float32)) if coverage else None

  def __call__(
    self,
    logits: Array,
    y: Array,
    memory: Array,
    source_ids: Array,
    source_mask: Array,
    paid: Array | None = None,
  ) -> tuple[Array, Array | None]:
    """Logits `[B, T, V]` float32 whose softmax is the joint generate-or-copy distribution, and
    with coverage the pointer's attention summed up to y's last position `[B, S]` (else None).

    Args:
      logits: the vocabulary logits `[B, T, V]`, float32.
      y: the decoder states they were computed from `[B, T, D]`.
      memory: encoder states `[B, S, D]`.
      source_ids: `[B, S]`, ids of the target vocabulary.
      source_mask: `[B, S]`, True = a real source token.
      paid: with coverage, the attention summed over the positions before y's first `[B, S]`
        (cached decoding's running sum); None = nothing paid yet.
    """
    # Luong's dot score of the projected states, scaled by 1/sqrt(D) once in float32.
    copy = dot_scores(self.query(y), memory).astype(jnp.float32) * y.shape[-1] ** -0.5  # [B, T, S]
    if self.coverage_weight is not None:
      copy, paid = self._cover(copy, source_mask, paid)
    return copy_logits(logits, copy, source_ids, source_mask), paid

  def _cover(self, copy: Array, source_mask: Array, paid: Array | None) -> tuple[Array, Array]:
    """Copy scores `[B, T, S]` plus w times the attention paid before each position, and the
    attention paid up to the last position `[B, S]`."""
    # A row of padding only (one that fills a last batch) gets zero weights: it pays nothing.
    attention = masked_softmax(copy, source_mask[:, None, :])  # [B, T, S]
    before = jnp.cumsum(attention, axis=1) - attention  # exclusive: positions t' < t
    if paid is not None:
      before = before + paid[:, None, :]
    covered = copy + self.coverage_weight[...] * before
    return covered, before[:, -1] + attention[:, -1]
