"""Positional encodings: sinusoidal ("Attention Is All You Need", section 3.5), rotary (RoPE) and
the word-position weights of End-To-End Memory Networks."""

import numbers

import jax
import jax.numpy as jnp

Array = jax.Array


def sinusoidal_embedding(positions: Array, dim: int, base: float = 10000.0) -> Array:
  """Encodes explicit positions: `PE[p, 2i] = sin(p / base^(2i/dim))`, `PE[p, 2i+1] = cos(...)`.

  Args:
    positions: integer or float positions `[...]` (e.g. decoding step, or packed-sequence offsets).
    dim: encoding size; must be even.
    base: wavelength base; the paper uses 10000.

  Returns:
    Encodings `[..., dim]` in float32, sin on even and cos on odd features.
  """
  if dim <= 0 or dim % 2:
    raise ValueError(f'sinusoidal_embedding: dim must be a positive even number, got {dim}.')
  inv_freq = base ** (-jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)  # [dim/2]
  angles = jnp.asarray(positions, jnp.float32)[..., None] * inv_freq  # [..., dim/2]
  pairs = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)  # [..., dim/2, 2]
  return pairs.reshape(*angles.shape[:-1], dim)  # [..., dim]


def sinusoidal_positions(length: int, dim: int, base: float = 10000.0) -> Array:
  """Encodings of positions `0 .. length-1`: `[length, dim]`."""
  return sinusoidal_embedding(jnp.arange(length), dim, base)


ROPE_LAYOUTS = ('pairs', 'halves')


def rotary_embedding(
  x: Array,
  positions: Array,
  base: float = 10000.0,
  layout: str = 'pairs',
  dims: int | None = None,
) -> Array:
  """Rotary position embedding (RoPE; Su et al. 2021), applied to queries or keys.

  Features are taken in pairs, `(x[2i], x[2i+1])` with `layout='pairs'` (the paper's, and the
  sin/cos pairing of `sinusoidal_embedding`) or `(x[i], x[i + D/2])` with `layout='halves'` (the
  `rotate_half` of Hugging Face's GPT-NeoX, Llama, Mistral and Qwen2 code), and pair i at
  position p is rotated by the angle `p * base^(-2i/D)`. Rotations compose, so the score between
  a query rotated at position m and a key rotated at position n depends on their content and on
  `m - n` only: attention sees relative positions without any added vector. The two layouts are
  one permutation of the features apart.

  Args:
    x: queries or keys `[..., T, D]`; D even.
    positions: positions of the T rows, `[T]` or broadcastable to `[..., T]`.
    base: wavelength base, as for the sinusoidal encoding (Llama 3: 500000).
    layout: `'pairs'` or `'halves'`, which features form a pair.
    dims: partial rotary positions: only the first `dims` features are rotated, as a D of `dims`
      (Qwen3-Next's `partial_rotary_factor`, DeepSeek-V3.2's indexer), the rest pass through;
      None = all D.

  Returns:
    The rotated `x`, same shape and dtype (computed in float32, or float64 for float64 `x`).
  """
  if dims is not None and dims != x.shape[-1]:
    if not 0 < dims < x.shape[-1]:
      raise ValueError(f'rotary_embedding: dims must be in 1 .. {x.shape[-1]}, got {dims}.')
    rotated = rotary_embedding(x[..., :dims], positions, base, layout)
    return jnp.concatenate([rotated, x[..., dims:]], axis=-1)
  dim = x.shape[-1]
  if dim <= 0 or dim % 2:
    raise ValueError(
      f'rotary_embedding: the feature size must be a positive even number, got {dim}.'
    )
  if layout not in ROPE_LAYOUTS:
    raise ValueError(f'rotary_embedding: layout must be one of {ROPE_LAYOUTS}, got {layout!r}.')
  wide = jnp.promote_types(x.dtype, jnp.float32)
  inv_freq = base ** (-jnp.arange(0, dim, 2, dtype=wide) / dim)  # [D/2]
  angles = jnp.asarray(positions, wide)[..., None] * inv_freq  # [..., T, D/2]
  cos, sin = jnp.cos(angles), jnp.sin(angles)
  x32 = x.astype(wide)
  if layout == 'halves':
    first, second = x32[..., : dim // 2], x32[..., dim // 2 :]
    rotated = [first * cos - second * sin, first * sin + second * cos]
    return jnp.concatenate(rotated, axis=-1).astype(x.dtype)
  pairs = x32.reshape(*x.shape[:-1], dim // 2, 2)  # [..., T, D/2, 2]
  even, odd = pairs[..., 0], pairs[..., 1]
  rotated = jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1)
  return rotated.reshape(x.shape).astype(x.dtype)


def sinusoidal_positions_2d(height: int, width: int, features: int, base: float = 10000.0) -> Array:
  """Fixed 2-D encodings of a `height x width` grid, in row-major order (as in MAE).

  The first half of the features is `sinusoidal_embedding(row, features / 2)` and the second
  half `sinusoidal_embedding(column, features / 2)`, so patches in one row share the first half
  and patches in one column the second.

  Args:
    height: grid rows.
    width: grid columns.
    features: encoding size; divisible by 4 (each half is a sin/cos pair sequence).
    base: wavelength base, as for the 1-D encoding.

  Returns:
    float32 `[height * width, features]`; row `r * width + c` encodes the cell `(r, c)`.
  """
  if features <= 0 or features % 4:
    raise ValueError(
      f'sinusoidal_positions_2d: features must be a positive multiple of 4 (half '
      f'for rows, half for columns, each sin/cos pairs), got {features}.'
    )
  rows = sinusoidal_embedding(jnp.arange(height), features // 2, base)  # [height, F/2]
  cols = sinusoidal_embedding(jnp.arange(width), features // 2, base)  # [width, F/2]
  grid = jnp.concatenate(
    [
      jnp.broadcast_to(rows[:, None], (height, width, features // 2)),
      jnp.broadcast_to(cols[None, :], (height, width, features // 2)),
    ],
    axis=-1,
  )  # [height, width, F]
  return grid.reshape(height * width, features)


def sentence_position_encoding(sentence_length: int, features: int) -> Array:
  """End-To-End Memory Networks' position encoding (Sukhbaatar et al. 2015, section 4.1).

  A sentence becomes `Σ_j l_j ⊙ A x_j` instead of a bag of words, with
  `l_kj = (1 - j/J) - (k/d)(1 - 2j/J)` for word position j = 1..J and feature k = 1..d, so word
  order changes the sum. J is the padded sentence length, as in the reference implementations.

  Args:
    sentence_length: words per sentence J.
    features: embedding size d.

  Returns:
    float32 `[J, d]`; row `j-1`, column `k-1` holds `l_kj`.
  """
  for name, value in (('sentence_length', sentence_length), ('features', features)):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
      raise ValueError(
        f'sentence_position_encoding: {name} must be a positive integer, got {value!r}.'
      )
  j = jnp.arange(1, sentence_length + 1, dtype=jnp.float32)[:, None] / sentence_length  # [J, 1]
  k = jnp.arange(1, features + 1, dtype=jnp.float32)[None, :] / features  # [1, d]
  return (1.0 - j) - k * (1.0 - 2.0 * j)  # [J, d]
