"""Multi-head latent attention (DeepSeek-V2, section 2.1): keys and values from one shared latent.

Each position keeps a latent `c = RMSNorm(x W_DKV)` of `r` features and one rotary key `k_rope`
of `Dr` features, shared by all N heads. Head n's key is `[c W_UK[:, n], k_rope]` (its no-position
part, `Dn` features, then the rotary part) and its value `c W_UV[:, n]` (`Dv` features); its
query `[q_nope, q_rope]` likewise. Two ways compute the same attention:

- the plain path (`expand_latent`, then any softmax attention): keys and values expanded per
  head, `[B, N, S, Dn + Dr]` and `[B, N, S, Dv]`; what a whole sequence runs.
- the absorbed path (`latent_attention`): `q_nope . (c W_UK) = (q_nope W_UKᵀ) . c`, so each
  query is folded into latent space once and scores the latents themselves; the weights average
  the latents, and `W_UV` maps the mixed latent to the value space afterwards. A decoding step
  reads `S (r + Dr)` cached numbers instead of `S N (Dn + Dv)` expanded ones.

Shapes: queries `q_nope [..., N, T, Dn]`, `q_rope [..., N, T, Dr]`; the cache `latent [..., S, r]`,
`rope_key [..., S, Dr]` (leading dims those of the queries without N); `w_uk [r, N, Dn]`,
`w_uv [r, N, Dv]`. Masks broadcast to `[..., N, T, S]`, True = may attend.
"""

import jax
import jax.numpy as jnp

from attention.core import check_mask, masked_softmax

Array = jax.Array


def _check(q_nope: Array, q_rope: Array, latent: Array, rope_key: Array, w_uk: Array) -> None:
  """One sentence for shapes that do not fit together (static, before any tracing of values)."""
  r, n, dn = w_uk.shape
  fits = (
    q_nope.shape[-3:-1] == q_rope.shape[-3:-1]
    and q_nope.shape[-3] == n
    and q_nope.shape[-1] == dn
    and latent.shape[-1] == r
    and rope_key.shape[-2] == latent.shape[-2]
    and rope_key.shape[-1] == q_rope.shape[-1]
  )
  if not fits:
    raise ValueError(
      f'latent_attention: q_nope{tuple(q_nope.shape)} [..., N, T, Dn], '
      f'q_rope{tuple(q_rope.shape)} [..., N, T, Dr], latent{tuple(latent.shape)} [..., S, r], '
      f'rope_key{tuple(rope_key.shape)} [..., S, Dr] and w_uk{tuple(w_uk.shape)} [r, N, Dn] '
      'do not fit together.'
    )


def expand_latent(latent: Array, rope_key: Array, w_uk: Array, w_uv: Array) -> tuple[Array, Array]:
  """The plain path's per-head keys and values of a latent cache.

  Args:
    latent: `[..., S, r]`.
    rope_key: the shared rotary key `[..., S, Dr]` (already rotated).
    w_uk: the key up-projection `[r, N, Dn]`.
    w_uv: the value up-projection `[r, N, Dv]`.

  Returns:
    `(keys [..., N, S, Dn + Dr], values [..., N, S, Dv])`: each head's no-position key, then the
    rotary key every head shares.
  """
  k_nope = jnp.einsum('...sr,rnd->...nsd', latent, w_uk)  # [..., N, S, Dn]
  values = jnp.einsum('...sr,rnv->...nsv', latent, w_uv)  # [..., N, S, Dv]
  shared = jnp.broadcast_to(
    rope_key[..., None, :, :], (*k_nope.shape[:-1], rope_key.shape[-1])
  )  # [..., N, S, Dr]
  return jnp.concatenate([k_nope, shared.astype(k_nope.dtype)], axis=-1), values


def latent_weights(
  q_nope: Array,
  q_rope: Array,
  latent: Array,
  rope_key: Array,
  w_uk: Array,
  *,
  mask: Array | None = None,
  scale: float | None = None,
) -> Array:
  """The absorbed path's attention weights `[..., N, T, S]`.

  `scores = scale (q_nope W_UKᵀ . c + q_rope . k_rope)`, masked softmax over S (a fully masked
  row gets zero weights). `scale` defaults to `(Dn + Dr)^-1/2`, the plain path's `1/sqrt(d)` of
  its `Dn + Dr`-feature queries.
  """
  _check(q_nope, q_rope, latent, rope_key, w_uk)
  if scale is None:
    scale = (q_nope.shape[-1] + q_rope.shape[-1]) ** -0.5
  q_latent = jnp.einsum('...ntd,rnd->...ntr', q_nope, w_uk)  # [..., N, T, r]
  scores = jnp.einsum('...ntr,...sr->...nts', q_latent, latent)  # [..., N, T, S]
  scores = scores + jnp.einsum('...ntd,...sd->...nts', q_rope, rope_key)
  scores = scores * scale
  check_mask(mask, scores.shape, 'latent_attention')
  return masked_softmax(scores, mask)


def latent_attention(
  q_nope: Array,
  q_rope: Array,
  latent: Array,
  rope_key: Array,
  w_uk: Array,
  w_uv: Array,
  *,
  mask: Array | None = None,
  scale: float | None = None,
) -> Array:
  """Absorbed multi-head latent attention: what softmax attention over `expand_latent`'s keys and
  values gives, computed over the latents (module docstring).

  Args:
    q_nope: the queries' no-position part `[..., N, T, Dn]`.
    q_rope: their rotary part `[..., N, T, Dr]` (already rotated).
    latent: the cached latents `[..., S, r]`.
    rope_key: the cached shared rotary keys `[..., S, Dr]`.
    w_uk: the key up-projection `[r, N, Dn]`.
    w_uv: the value up-projection `[r, N, Dv]`.
    mask: boolean, broadcastable to `[..., N, T, S]`; True = may attend.
    scale: the scores' multiplier; None = `(Dn + Dr)^-1/2`.

  Returns:
    Per-head outputs `[..., N, T, Dv]` in q_nope's dtype.
  """
  weights = latent_weights(q_nope, q_rope, latent, rope_key, w_uk, mask=mask, scale=scale)
  mixed = jnp.einsum('...nts,...sr->...ntr', weights, latent.astype(weights.dtype))  # [.., r]
  out = jnp.einsum('...ntr,rnv->...ntv', mixed, w_uv)  # [..., N, T, Dv]
  return out.astype(q_nope.dtype)
