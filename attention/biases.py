"""Position biases added to attention scores: ALiBi and T5's bucketed relative positions.

Both depend on the offset between a query and a key only, not on the tokens, and both are added
to the scores instead of to the embeddings, so nothing about absolute positions enters the model.
Shapes: query positions `[..., T]`, key positions `[..., S]` (leading dims, e.g. batch, broadcast),
per-head terms `[N]`; biases `[..., N, T, S]`.
Key positions may be negative to mark empty decoding-cache slots; the caller masks those.
"""

import math

import jax
import jax.numpy as jnp

Array = jax.Array

# T5's defaults (Raffel et al. 2020, and the released T5 code): 32 buckets, exact offsets up to
# half of them, log-spaced buckets up to 128 positions, one bucket for everything further.
T5_NUM_BUCKETS = 32
T5_MAX_DISTANCE = 128


def alibi_slopes(num_heads: int) -> Array:
  """ALiBi's per-head slopes (Press et al. 2022, section 3).

  For N a power of two the slopes are the geometric sequence that starts at and has ratio
  `2^(-8/N)`: 1/2, 1/4, ..., 1/256 for 8 heads. For other N the paper takes the slopes of the
  closest power of two below N and fills the rest with every other slope of twice that many heads.

  Returns:
    float32 `[N]`, decreasing, all in (0, 1).
  """
  if not isinstance(num_heads, int) or num_heads < 1:
    raise ValueError(f'alibi_slopes: num_heads must be a positive integer, got {num_heads!r}.')

  def geometric(n: int) -> list[float]:
    start = 2.0 ** (-8.0 / n)
    return [start ** (i + 1) for i in range(n)]

  closest = 2 ** int(math.floor(math.log2(num_heads)))
  slopes = geometric(closest) + geometric(2 * closest)[0::2][: num_heads - closest]
  return jnp.asarray(slopes, jnp.float32)


def alibi_bias(slopes: Array, q_positions: Array, k_positions: Array) -> Array:
  """`-slope · |i - j|` for query position i and key position j, per head.

  Causal models only ever see `j <= i`, where this is the paper's `-slope · (i - j)`; the
  absolute distance makes the same bias symmetric for bidirectional encoders.

  Args:
    slopes: `[N]`, e.g. `alibi_slopes(N)`.
    q_positions: integer `[..., T]`.
    k_positions: integer `[..., S]`.

  Returns:
    float32 `[..., N, T, S]`.
  """
  return alibi_bias_at(slopes, relative_positions(q_positions, k_positions))


def relative_positions(q_positions: Array, k_positions: Array) -> Array:
  """`j - i` for query position i and key position j: `[..., T, S]`."""
  return jnp.asarray(k_positions)[..., None, :] - jnp.asarray(q_positions)[..., :, None]


def alibi_bias_at(slopes: Array, relative: Array, dtype=jnp.float32) -> Array:
  """`-slope · |j - i|` per head for given offsets `relative` (`j - i`, e.g. a decoding cache's
  own, see `attention.variants.cache_offsets`).

  Args:
    slopes: `[N]`, or `[..., N]` broadcasting against relative's leading dims; a scalar slope
      gives one bias without a head axis.
    relative: integer `[..., T, S]`.
    dtype: of the bias (and of the product `slope · |j - i|`).

  Returns:
    `[..., N, T, S]` (`[..., T, S]` for a scalar slope) in `dtype`.
  """
  slopes = jnp.asarray(slopes, dtype)
  distance = jnp.abs(jnp.asarray(relative)).astype(dtype)  # [..., T, S]
  if slopes.ndim:
    distance = distance[..., None, :, :]  # [..., 1, T, S]: a head axis
  return -slopes[..., None, None] * distance


def t5_buckets(
  relative: Array,
  *,
  bidirectional: bool,
  num_buckets: int = T5_NUM_BUCKETS,
  max_distance: int = T5_MAX_DISTANCE,
) -> Array:
  """T5's bucket of each relative position `key - query` (Raffel et al. 2020, section 2.1).

  Half the buckets (of each direction, when bidirectional) hold one offset each, 0, 1, 2, ...;
  the rest cover offsets up to `max_distance` on a log scale, and every offset beyond it shares
  the last bucket. Bidirectional: keys after the query use the upper half of the buckets.
  Causal: keys after the query (which the mask hides anyway) fall in bucket 0 with offset 0.

  Args:
    relative: integer `key position - query position`, any shape.
    bidirectional: whether keys after the query get buckets of their own.
    num_buckets: buckets in all (both directions together when bidirectional).
    max_distance: the offset from which all share the last bucket.

  Returns:
    int32 buckets in `[0, num_buckets)`, the shape of `relative`.
  """
  relative = jnp.asarray(relative, jnp.int32)
  offset = jnp.zeros_like(relative)
  if bidirectional:
    num_buckets //= 2
    offset = jnp.where(relative > 0, num_buckets, 0)
    distance = jnp.abs(relative)
  else:
    distance = jnp.maximum(-relative, 0)  # how far back the key is
  exact = num_buckets // 2
  # log(distance / exact) / log(max_distance / exact) spreads the far offsets over the other half.
  far = exact + (
    jnp.log(jnp.maximum(distance, 1).astype(jnp.float32) / exact)
    / math.log(max_distance / exact)
    * (num_buckets - exact)
  ).astype(jnp.int32)
  far = jnp.minimum(far, num_buckets - 1)
  return offset + jnp.where(distance < exact, distance, far)


def t5_bias(
  table: Array,
  q_positions: Array,
  k_positions: Array,
  *,
  bidirectional: bool,
  max_distance: int = T5_MAX_DISTANCE,
) -> Array:
  """T5's learned relative position bias: `table[bucket(j - i), n]` per head n.

  Args:
    table: learned `[num_buckets, N]`.
    q_positions: integer `[..., T]`.
    k_positions: integer `[..., S]`.
    bidirectional: see `t5_buckets`.
    max_distance: see `t5_buckets`.

  Returns:
    `[..., N, T, S]` in the table's dtype.
  """
  return t5_bias_at(
    table,
    relative_positions(q_positions, k_positions),
    bidirectional=bidirectional,
    max_distance=max_distance,
  )


def t5_bias_at(
  table: Array, relative: Array, *, bidirectional: bool, max_distance: int = T5_MAX_DISTANCE
) -> Array:
  """`table[bucket(relative), n]` for given offsets `relative` `[..., T, S]` (`j - i`):
  `[..., N, T, S]` in the table's dtype."""
  buckets = t5_buckets(
    relative, bidirectional=bidirectional, num_buckets=table.shape[0], max_distance=max_distance
  )  # [..., T, S]
  return jnp.moveaxis(jnp.take(table, buckets, axis=0), -1, -3)  # [..., N, T, S]
