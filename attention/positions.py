"""Positional encodings: sinusoidal ("Attention Is All You Need", section 3.5) and rotary (RoPE)."""

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
    raise ValueError(f"sinusoidal_embedding: dim must be a positive even number, got {dim}.")
  inv_freq = base ** (-jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)    # [dim/2]
  angles = jnp.asarray(positions, jnp.float32)[..., None] * inv_freq       # [..., dim/2]
  pairs = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)          # [..., dim/2, 2]
  return pairs.reshape(*angles.shape[:-1], dim)                           # [..., dim]


def sinusoidal_positions(length: int, dim: int, base: float = 10000.0) -> Array:
  """Encodings of positions `0 .. length-1`: `[length, dim]`."""
  return sinusoidal_embedding(jnp.arange(length), dim, base)


def rotary_embedding(x: Array, positions: Array, base: float = 10000.0) -> Array:
  """Rotary position embedding (RoPE; Su et al. 2021), applied to queries or keys.

  Features are taken in pairs `(x[2i], x[2i+1])` (the sin/cos pairing of `sinusoidal_embedding`)
  and pair i at position p is rotated by the angle `p * base^(-2i/D)`. Rotations compose, so the
  score between a query rotated at position m and a key rotated at position n depends on their
  content and on `m - n` only: attention sees relative positions without any added vector.

  Args:
    x: queries or keys `[..., T, D]`; D even.
    positions: positions of the T rows, `[T]` or broadcastable to `[..., T]`.
    base: wavelength base, as for the sinusoidal encoding.

  Returns:
    The rotated `x`, same shape and dtype (computed in float32).
  """
  dim = x.shape[-1]
  if dim <= 0 or dim % 2:
    raise ValueError(f"rotary_embedding: the feature size must be a positive even number, got "
                     f"{dim}.")
  inv_freq = base ** (-jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)    # [D/2]
  angles = jnp.asarray(positions, jnp.float32)[..., None] * inv_freq       # [..., T, D/2]
  cos, sin = jnp.cos(angles), jnp.sin(angles)
  pairs = x.astype(jnp.float32).reshape(*x.shape[:-1], dim // 2, 2)       # [..., T, D/2, 2]
  even, odd = pairs[..., 0], pairs[..., 1]
  rotated = jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1)
  return rotated.reshape(x.shape).astype(x.dtype)
