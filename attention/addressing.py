"""Neural Turing Machine addressing (Graves et al. 2014, section 3.3), one pure function a step.

A head finds its weighting `w_t [..., N]` over the N memory rows in four steps:

1. `content_weights`: `w^c_i = softmax_i(β · cosine(k, M_i))`, focus by similarity (eq. 5-6).
2. `interpolate`: `w^g = g w^c + (1 - g) w_{t-1}`, keep or replace the last weighting (eq. 7).
3. `circular_shift`: `w~_i = Σ_j w^g_j s_{(i-j) mod N}`, move the focus by a few rows (eq. 8).
4. `sharpen`: `w_i = w~_i^γ / Σ_j w~_j^γ`, undo the blur of the shift (eq. 9).

`address` runs the four; `read` (eq. 2) and `write`/`write_heads` (eq. 3-4) use the weighting.
Memory is `[..., N, M]` (N rows of width M); leading dims (batch, heads) broadcast. Every function
is jit/vmap/grad-safe and stays finite at β = 0, large γ, all-zero keys or memory rows, and
weights that underflow to zero.
"""

import jax
import jax.numpy as jnp

from attention.scores import cosine_scores

Array = jax.Array

# Weights below this are treated as it in `sharpen`'s logarithm: log(0) would give -inf and NaN
# gradients, and 1/floor (the log's derivative) stays far inside float32's range.
SHARPEN_FLOOR = 1e-30


def _float(x: Array) -> Array:
  """`x` as a JAX array of at least float32, the precision the normalisations run in."""
  x = jnp.asarray(x)
  return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def content_weights(memory: Array, key: Array, beta: Array) -> Array:
  """Content addressing: `softmax_i(β · cosine(key, memory_i))` (eq. 5-6).

  Cosine similarity ignores the key's length, so β alone sets how sharp the focus is: β = 0 gives
  uniform weights. All-zero keys or rows have cosine 0 (`cosine_scores` guards their norms).

  Args:
    memory: `[..., N, M]`.
    key: `[..., M]`.
    beta: key strength `[...]`, >= 0.

  Returns:
    Weights `[..., N]`, summing to 1 over N.
  """
  memory, key, beta = _float(memory), _float(key), _float(beta)
  similarity = cosine_scores(key[..., None, :], memory)[..., 0, :]  # [..., 1, N] -> [..., N]
  return jax.nn.softmax(beta[..., None] * similarity, axis=-1)


def interpolate(content: Array, previous: Array, gate: Array) -> Array:
  """Interpolation `g · content + (1 - g) · previous` (eq. 7).

  Args:
    content: content weights `[..., N]`.
    previous: the head's weighting at the previous step `[..., N]`.
    gate: interpolation gate `[...]` in [0, 1]; 1 = content only.

  Returns:
    Weights `[..., N]`; rows of the inputs that sum to 1 give rows that sum to 1.
  """
  gate = jnp.asarray(gate)[..., None]  # [..., 1]
  return gate * content + (1.0 - gate) * previous


def circular_shift(weights: Array, shift: Array) -> Array:
  """Rotation by a distribution over offsets: `w~_i = Σ_j w_j s_{(i-j) mod N}` (eq. 8).

  `shift[..., k]` is the probability of offset `k - r` for `k = 0 .. 2r`: offset +1 moves each
  row's weight to the next row, and the last row's to the first. Offsets beyond N wrap around too.

  Args:
    weights: `[..., N]`.
    shift: shift weighting `[..., S]`, S = 2r + 1 odd, summing to 1 over S.

  Returns:
    Shifted weights `[..., N]`.
  """
  weights, shift = jnp.asarray(weights), jnp.asarray(shift)
  if shift.shape[-1] % 2 != 1:
    raise ValueError(
      f'circular_shift: shift must have an odd size 2r + 1 (offsets -r..r) in its '
      f'last dim; got shift{tuple(shift.shape)}.'
    )
  n, r = weights.shape[-1], shift.shape[-1] // 2
  offsets = jnp.arange(-r, r + 1)  # [S]
  # source[i, k]: the row whose weight offset k brings to row i.
  source = (jnp.arange(n)[:, None] - offsets[None, :]) % n  # [N, S]
  moved = weights[..., source]  # [..., N, S]
  return jnp.einsum('...ns,...s->...n', moved, shift)


def sharpen(weights: Array, gamma: Array) -> Array:
  """Sharpening `w_i^γ / Σ_j w_j^γ` (eq. 9), as `softmax(γ log w)`.

  In log space a large γ cannot overflow or underflow the whole row to 0/0, and the max-subtracting
  softmax keeps the largest weight at a finite value; zero weights are floored at `SHARPEN_FLOOR`
  so their logarithm and its gradient stay finite.

  Args:
    weights: `[..., N]`, >= 0.
    gamma: exponent `[...]`, >= 1.

  Returns:
    Weights `[..., N]` of `weights`' dtype (or float32), summing to 1 over N.
  """
  w, gamma = _float(weights), _float(gamma)
  log_w = jnp.log(jnp.maximum(w, SHARPEN_FLOOR))  # [..., N]
  return jax.nn.softmax(gamma[..., None] * log_w, axis=-1)


def address(
  memory: Array, key: Array, beta: Array, gate: Array, shift: Array, gamma: Array, previous: Array
) -> Array:
  """A head's weighting: content, interpolation, shift and sharpening in turn (section 3.3).

  Args:
    memory: `[..., N, M]`.
    key: `[..., M]`.
    beta: key strength `[...]`, >= 0.
    gate: interpolation gate `[...]` in [0, 1].
    shift: shift weighting `[..., 2r + 1]` over offsets -r..r.
    gamma: sharpening exponent `[...]`, >= 1.
    previous: the head's weighting at the previous step `[..., N]`.

  Returns:
    Weights `[..., N]`, summing to 1 over N.
  """
  weights = interpolate(content_weights(memory, key, beta), previous, gate)
  return sharpen(circular_shift(weights, shift), gamma)


def read(memory: Array, weights: Array) -> Array:
  """Reading `r = Σ_i w_i M_i` (eq. 2).

  Args:
    memory: `[..., N, M]`.
    weights: `[..., N]`.

  Returns:
    Read vector `[..., M]`.
  """
  return jnp.einsum('...n,...nm->...m', weights, memory)


def write(memory: Array, weights: Array, erase: Array, add: Array) -> Array:
  """One head's write `M ⊙ (1 - w eᵀ) + w aᵀ`: erase, then add (eq. 3-4).

  Args:
    memory: `[..., N, M]`.
    weights: `[..., N]`.
    erase: erase vector `[..., M]` in [0, 1].
    add: add vector `[..., M]`.

  Returns:
    The new memory `[..., N, M]`.
  """
  w = jnp.asarray(weights)[..., :, None]  # [..., N, 1]
  erased = memory * (1.0 - w * jnp.asarray(erase)[..., None, :])  # [..., N, M]
  return erased + w * jnp.asarray(add)[..., None, :]


def write_heads(memory: Array, weights: Array, erase: Array, add: Array) -> Array:
  """Several heads' writes at once: every erasure, then every addition (section 3.2).

  Erasures multiply and additions sum, so the heads' order does not matter, as the paper asks;
  applying `write` head after head would let a later head erase what an earlier one added.

  Args:
    memory: `[..., N, M]`.
    weights: `[..., K, N]` for K heads.
    erase: `[..., K, M]` in [0, 1].
    add: `[..., K, M]`.

  Returns:
    The new memory `[..., N, M]`.
  """
  weights, erase, add = jnp.asarray(weights), jnp.asarray(erase), jnp.asarray(add)
  keep = jnp.prod(1.0 - weights[..., :, None] * erase[..., None, :], axis=-3)  # [..., N, M]
  return memory * keep + jnp.einsum('...kn,...km->...nm', weights, add)
