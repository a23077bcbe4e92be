"""Sinusoidal positional encodings ("Attention Is All You Need", section 3.5)."""

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
