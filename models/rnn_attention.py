"""Attention for RNN decoders: one layer that owns the parameters of any registered score.

The maths lives in `attention/scores.py`, and so does the list of parameters each score learns
(`attention.SCORES`); `RNNAttention` creates them and splits the work the way an RNN decoder needs
it. A decoder attends from a new query every step but to the same encoder states, so the layer has
two halves:

- `prepare(keys)`: the per-source work, done once. The score's declared key step, e.g. Bahdanau's
  key projection `W_k h_s` (`attention.project_keys`), and, for scores that compare queries and keys
  feature by feature (dot, scaled_dot, cosine), the projection that brings encoder states to the
  query size when the two differ.
- `__call__(query, prepared, values, mask)`: the per-step work, which only touches the query.

Shapes: queries `[..., T, Dq]`, keys and values `[..., S, Dk]`, `[..., S, Dv]`; an RNN decoder
passes T = 1. Masks broadcast to `[..., T, S]`, True = may attend.
"""

from flax import nnx
import jax

import attention
from models import interventions
from models.layers import check_choice

Array = jax.Array


def check_score(score: str, field: str = 'score') -> None:
  """Raises ValueError naming `field` and the valid names unless `attention.SCORES` has `score`."""
  check_choice(field, score, sorted(attention.SCORES))


class RNNAttention(nnx.Module):
  """Attention with a score from `attention.SCORES` and the parameters that score declares.

  Parameters are attributes named as the score function's keyword arguments (additive: `w_q`
  `[Dq, A]`, `w_k` `[Dk, A]`, `v` `[A]`; general: `w` `[Dq, Dk]`; cosine: a scalar `scale`), with
  the attention size A = Dq. `key_proj`, a bias-free `[Dk, Dq]` linear map, exists only for a score
  that needs Dq == Dk when Dk != Dq; keys then have size Dq everywhere after it.
  """

  def __init__(self, score: str, query_dim: int, key_dim: int, *, rngs: nnx.Rngs):
    """Builds the parameters of `score` (a name in `attention.SCORES`) for the given sizes."""
    check_score(score)
    self.score_name = score
    self.registered_score = attention.get_score(score)
    # A bidirectional encoder's states are twice the decoder size; a dot product needs one size.
    self.key_proj = (
      nnx.Linear(key_dim, query_dim, use_bias=False, rngs=rngs)
      if self.registered_score.same_features and key_dim != query_dim
      else None
    )
    sizes = attention.ScoreSizes(
      q=query_dim, k=key_dim if self.key_proj is None else query_dim, a=query_dim
    )
    for param in self.registered_score.params:
      if hasattr(self, param.name):
        raise ValueError(
          f'RNNAttention: score {score!r} declares a parameter named '
          f'{param.name!r}, which the layer already uses for something else.'
        )
      setattr(self, param.name, nnx.Param(param.initialize(rngs.params(), sizes)))

  def _params(self) -> dict[str, Array]:
    return {param.name: getattr(self, param.name)[...] for param in self.registered_score.params}

  def prepare(self, keys: Array) -> Array:
    """Per-source work on the keys `[..., S, Dk]`; done once, reused at every decoder step."""
    keys = keys if self.key_proj is None else self.key_proj(keys)  # [..., S, Dq] when projected
    return self.registered_score.prepare_keys(keys, self._params())

  def score(self, query: Array, prepared: Array) -> Array:
    """Unnormalised scores `[..., T, S]` from queries `[..., T, Dq]` and prepared keys."""
    return self.registered_score.scores_prepared(query, prepared, self._params())

  def __call__(
    self, query: Array, prepared: Array, values: Array, mask: Array | None = None
  ) -> tuple[Array, Array]:
    """Attends from `query` to the encoder states.

    Args:
      query: decoder states `[..., T, Dq]`.
      prepared: `self.prepare(keys)`, `[..., S, K]`.
      values: encoder states to average `[..., S, Dv]`.
      mask: boolean, broadcastable to `[..., T, S]`; True = real source position.

    Returns:
      `(context [..., T, Dv], weights [..., T, S])`; masked positions get exactly zero weight.
    """
    context, weights = attention.attention(query, prepared, values, score_fn=self.score, mask=mask)
    edited = interventions.tap(self, 'weights', weights)  # a no-op outside interventions.capture
    if edited is not weights:
      context = attention.attend(edited, values)  # [..., T, Dv]
    return interventions.tap(self, 'context', context), edited


def make_attention(score: str, *, query_dim: int, key_dim: int, rngs: nnx.Rngs) -> RNNAttention:
  """Builds the attention layer for a score kind.

  Args:
    score: a name in `attention.SCORES` (additive | cosine | dot | general | scaled_dot built in).
    query_dim: decoder state size Dq.
    key_dim: encoder state size Dk.
    rngs: parameter initialisation keys.

  Returns:
    The layer; scores with an attention size use A = `query_dim`.
  """
  return RNNAttention(score, query_dim, key_dim, rngs=rngs)
