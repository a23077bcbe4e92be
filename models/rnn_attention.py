"""Attention layers for RNN decoders: each owns the parameters of one score kind.

The maths lives in `attention/scores.py`; these layers hold the weights and split the work the way
an RNN decoder needs it. A decoder attends from a new query every step but to the same encoder
states, so each layer has two halves:

- `prepare(keys)`: the per-source work, done once. Bahdanau's key projection `W_k h_s`
  (`attention.project_keys`), or, for dot / scaled_dot / cosine, the projection that brings encoder
  states to the query size when the two differ.
- `__call__(query, prepared, values, mask)`: the per-step work, which only touches the query.

Shapes: queries `[..., T, Dq]`, keys and values `[..., S, Dk]`, `[..., S, Dv]`; an RNN decoder
passes T = 1. Masks broadcast to `[..., T, S]`, True = may attend.
"""

import jax
import jax.numpy as jnp
from flax import nnx

import attention

Array = jax.Array


class RNNAttention(nnx.Module):
  """Base class: `prepare` keeps the keys as they are; subclasses define `score`."""

  def prepare(self, keys: Array) -> Array:
    """Per-source work on the keys `[..., S, Dk]`; done once, reused at every decoder step."""
    return keys

  def score(self, query: Array, prepared: Array) -> Array:
    """Unnormalised scores `[..., T, S]` from queries `[..., T, Dq]` and prepared keys."""
    raise NotImplementedError

  def __call__(self, query: Array, prepared: Array, values: Array,
               mask: Array | None = None) -> tuple[Array, Array]:
    """Attends from `query` to the encoder states.

    Args:
      query: decoder states `[..., T, Dq]`.
      prepared: `self.prepare(keys)`, `[..., S, K]`.
      values: encoder states to average `[..., S, Dv]`.
      mask: boolean, broadcastable to `[..., T, S]`; True = real source position.

    Returns:
      `(context [..., T, Dv], weights [..., T, S])`; masked positions get exactly zero weight.
    """
    return attention.attention(query, prepared, values, score_fn=self.score, mask=mask)


class DotAttention(RNNAttention):
  """Luong "dot": `s · W_p h_s`; `W_p` [Dk, Dq] exists only when Dk != Dq (else identity)."""

  def __init__(self, query_dim: int, key_dim: int, *, rngs: nnx.Rngs):
    # A bidirectional encoder's states are twice the decoder size; a dot product needs one size.
    self.key_proj = (nnx.Linear(key_dim, query_dim, use_bias=False, rngs=rngs)
                     if key_dim != query_dim else None)

  def prepare(self, keys: Array) -> Array:
    """Projects keys `[..., S, Dk]` to `[..., S, Dq]` when the sizes differ."""
    return keys if self.key_proj is None else self.key_proj(keys)

  def score(self, query: Array, prepared: Array) -> Array:
    return attention.dot_scores(query, prepared)


class ScaledDotAttention(DotAttention):
  """`s · W_p h_s / sqrt(Dq)`, the Transformer's scaling in an RNN decoder."""

  def score(self, query: Array, prepared: Array) -> Array:
    return attention.scaled_dot_scores(query, prepared)


class CosineAttention(DotAttention):
  """`g · cos(s, W_p h_s)` with a learned sharpness `g` (cosines alone are too flat to select)."""

  def __init__(self, query_dim: int, key_dim: int, *, rngs: nnx.Rngs, init_scale: float = 5.0):
    super().__init__(query_dim, key_dim, rngs=rngs)
    self.scale = nnx.Param(jnp.asarray(init_scale, jnp.float32))

  def score(self, query: Array, prepared: Array) -> Array:
    return attention.cosine_scores(query, prepared, scale=self.scale[...])


class GeneralAttention(RNNAttention):
  """Luong "general": `s W h_s` with `W` [Dq, Dk], so the sizes may differ."""

  def __init__(self, query_dim: int, key_dim: int, *, rngs: nnx.Rngs):
    self.w = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), (query_dim, key_dim)))

  def score(self, query: Array, prepared: Array) -> Array:
    return attention.general_scores(query, prepared, self.w[...])


class AdditiveAttention(RNNAttention):
  """Bahdanau: `vᵀ tanh(W_q s + W_k h_s)`; `prepare` computes `W_k h_s` once per source."""

  def __init__(self, query_dim: int, key_dim: int, *, rngs: nnx.Rngs,
               attention_dim: int | None = None):
    attention_dim = attention_dim or query_dim
    init = nnx.initializers.lecun_normal()
    self.w_q = nnx.Param(init(rngs.params(), (query_dim, attention_dim)))
    self.w_k = nnx.Param(init(rngs.params(), (key_dim, attention_dim)))
    self.v = nnx.Param(
        nnx.initializers.normal(attention_dim ** -0.5)(rngs.params(), (attention_dim,)))

  def prepare(self, keys: Array) -> Array:
    """`W_k h_s`: keys `[..., S, Dk]` -> `[..., S, A]`."""
    return attention.project_keys(keys, self.w_k[...])

  def score(self, query: Array, prepared: Array) -> Array:
    return attention.additive_scores(query, None, self.w_q[...], None, self.v[...],
                                     k_proj=prepared)


ATTENTION_LAYERS: dict[str, type[RNNAttention]] = {
    "additive": AdditiveAttention,
    "cosine": CosineAttention,
    "dot": DotAttention,
    "general": GeneralAttention,
    "scaled_dot": ScaledDotAttention,
}


def make_attention(score: str, *, query_dim: int, key_dim: int, rngs: nnx.Rngs) -> RNNAttention:
  """Builds the attention layer for a score kind (a key of `ATTENTION_LAYERS`).

  Args:
    score: one of additive | cosine | dot | general | scaled_dot.
    query_dim: decoder state size Dq.
    key_dim: encoder state size Dk.
    rngs: parameter initialisation keys.

  Returns:
    The layer; additive attention uses an attention size A = `query_dim`.
  """
  if score not in ATTENTION_LAYERS:
    raise ValueError(
        f"Unknown score kind {score!r}; valid kinds: {', '.join(sorted(ATTENTION_LAYERS))}.")
  return ATTENTION_LAYERS[score](query_dim, key_dim, rngs=rngs)
