"""The sampling settings of `models.decoding`: their checks, and the top-k and nucleus (top-p)
filter that `sample_search` draws each token through.
"""

import math
import numbers

import jax
import jax.numpy as jnp

Array = jax.Array
NEG_INF = float('-inf')


def check_sampling(top_k: int, top_p: float, temperature: float = 1.0) -> None:
  """Raises ValueError for sampling settings outside their ranges."""
  if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 0:
    raise ValueError(f'Sampling: top_k must be an integer >= 0 (0 keeps all), got {top_k!r}.')
  if not isinstance(top_p, numbers.Real) or not 0 < top_p <= 1:
    raise ValueError(f'Sampling: top_p must be a number in (0, 1], got {top_p!r}.')
  if not isinstance(temperature, numbers.Real) or not 0 <= temperature < math.inf:
    raise ValueError(
      f'Sampling: temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}.'
    )


def filter_logits(logits: Array, *, top_k: int = 0, top_p: float = 1.0) -> Array:
  """Top-k and nucleus (top-p, Holtzman et al. 2019) filtering; dropped tokens get -inf.

  `top_k > 0` keeps the k largest logits of each row (all of them if k >= V). `top_p < 1` then
  keeps the smallest set of most likely tokens whose probability, renormalised over what top-k left,
  reaches p: token i of the descending order stays if the mass strictly before it is < p, so the
  most likely token always stays. Ties go to the lower token id, so exactly k (or the smallest set)
  survive. Kept logits are returned unchanged, not renormalised.

  Args:
    logits: float [..., V].
    top_k: how many tokens to keep; 0 keeps all.
    top_p: the probability mass to keep, in (0, 1]; 1 keeps all.

  Returns:
    float32 [..., V]: `logits` with the dropped tokens at -inf.
  """
  check_sampling(top_k, top_p)
  logits = jnp.asarray(logits, jnp.float32)
  vocab = logits.shape[-1]
  if (top_k == 0 or top_k >= vocab) and top_p == 1:
    return logits
  # lax.top_k over the whole row is a stable descending sort: equal logits keep the lower id first.
  ordered, order = jax.lax.top_k(logits, vocab)  # [..., V]
  keep = jnp.arange(vocab) < (top_k or vocab)  # [V], by rank
  if top_p < 1:
    probs = jax.nn.softmax(jnp.where(keep, ordered, NEG_INF), axis=-1)  # renormalised, [..., V]
    # An exclusive cumsum, not cumsum - p, which would add a rounding error at the boundary.
    before = jnp.cumsum(probs, axis=-1)[..., :-1]
    before = jnp.concatenate([jnp.zeros_like(probs[..., :1]), before], axis=-1)
    keep = keep & (before < top_p)
  keep = jnp.put_along_axis(
    jnp.zeros(logits.shape, bool),
    order,  # back to id order, [..., V]
    jnp.broadcast_to(keep, order.shape),
    axis=-1,
    inplace=False,
  )
  return jnp.where(keep, logits, NEG_INF)
