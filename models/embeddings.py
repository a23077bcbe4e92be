"""Token and positional embeddings for the attention models.

Shapes: token ids `[B, T]` -> embeddings `[B, T, D]`; positions `[...]` -> encodings `[..., D]`.
"""

from flax import nnx
import jax
import jax.numpy as jnp

import attention
from models.layers import check_choice, on_rows, sharding_metadata

Array = jax.Array


def lookup(embed: nnx.Embed, ids: Array) -> Array:
  """`embed(ids)` in the table's current dtype.

  `nnx.Embed.__call__` fixes its compute dtype to the table's dtype at construction (float32),
  which would turn bfloat16 training (parameters cast inside the step) back into float32 from
  the first layer on.
  """
  return jnp.take(embed.embedding[...], ids, axis=0)


class TokenEmbedding(nnx.Module):
  """A token lookup table that can double as the (tied) output projection.

  The table is initialised with standard deviation `1/sqrt(D)` and lookups are multiplied by
  `sqrt(D)` ("Attention Is All You Need", section 3.4): the embeddings then have unit-variance
  entries, the order of the sinusoidal encodings (in [-1, 1]) they are added to, while the tied
  output projection `x Eᵀ` of a layer-normalised `x` gives logits of unit variance.
  """

  def __init__(self, vocab_size: int, features: int, *, scale: bool = True, rngs: nnx.Rngs):
    """Builds a `[vocab_size, features]` table.

    Args:
      vocab_size: number of token ids V.
      features: embedding size D.
      scale: multiply lookups by `sqrt(D)`; False returns the table's rows as they are (BERT,
        whose embeddings are layer-normalised after the sum instead).
      rngs: `params` stream for the table.
    """
    self.features, self.scale = features, scale
    self.embed = nnx.Embed(
      vocab_size,
      features,
      embedding_init=nnx.initializers.normal(features**-0.5),
      embedding_metadata=sharding_metadata('vocab', 'embed'),
      rngs=rngs,
    )

  def __call__(self, ids: Array) -> Array:
    """Embeds integer ids `[...]` as `[..., D]`, scaled by `sqrt(D)` (see `scale`), in the
    table's dtype."""
    rows = lookup(self.embed, ids)
    return rows * self.features**0.5 if self.scale else rows

  def attend(self, x: Array) -> Array:
    """Tied output projection: `[..., D] -> [..., V]` logits `x Eᵀ` in x's dtype (see `lookup`)."""
    table = self.embed.embedding[...].astype(x.dtype)  # [V, D]
    return on_rows(lambda rows: rows @ table.T, x)  # [..., V]


class SinusoidalPositions(nnx.Module):
  """Fixed sinusoidal encodings (section 3.5); no parameters and no length limit."""

  def __init__(self, features: int):
    if features <= 0 or features % 2:
      raise ValueError(
        f'SinusoidalPositions: features must be a positive even number, got {features}.'
      )
    self.features = features

  def __call__(self, positions: Array) -> Array:
    """Encodes integer positions `[...]` (may be traced, e.g. a decoding step) as `[..., D]`."""
    return attention.sinusoidal_embedding(positions, self.features)


class LearnedPositions(nnx.Module):
  """A learned table of `max_length` position embeddings (section 3.5, the paper's alternative)."""

  def __init__(self, features: int, max_length: int, *, rngs: nnx.Rngs):
    self.max_length = max_length
    # Unit-variance entries, like the sqrt(D)-scaled token embeddings they are added to.
    self.embed = nnx.Embed(
      max_length, features, embedding_init=nnx.initializers.normal(1.0), rngs=rngs
    )

  def __call__(self, positions: Array) -> Array:
    """Looks up integer positions `[...]` in `[0, max_length)` as `[..., D]`."""
    return self.embed(positions)


class NoPositions(nnx.Module):
  """No position information (zeros), for studying what attention does without it: a
  Transformer encoder then treats its input as a set (permuting the tokens permutes its output)."""

  def __init__(self, features: int):
    self.features = features

  def __call__(self, positions: Array) -> Array:
    """Zeros `[..., D]` for integer positions `[...]`."""
    return jnp.zeros((*jnp.shape(positions), self.features), jnp.float32)


POSITIONS = ('sinusoidal', 'learned', 'none')
# Positions that act inside self-attention (`models.attention_layer`), leaving the embeddings alone.
ATTENTION_POSITIONS = ('rope', 'alibi', 't5')


def make_positions(
  kind: str, features: int, max_length: int, *, rngs: nnx.Rngs
) -> SinusoidalPositions | LearnedPositions | NoPositions | None:
  """Builds the positional embedding named `kind` (one of `POSITIONS`); None for a kind of
  `ATTENTION_POSITIONS`, which adds nothing to the embeddings."""
  check_choice('positions', kind, POSITIONS + ATTENTION_POSITIONS)
  if kind in ATTENTION_POSITIONS:
    return None
  if kind == 'sinusoidal':
    return SinusoidalPositions(features)
  if kind == 'none':
    return NoPositions(features)
  return LearnedPositions(features, max_length, rngs=rngs)
