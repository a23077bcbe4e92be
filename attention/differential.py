"""Differential attention (Ye et al., ICLR 2025, "Differential Transformer"), in the head layout
of Hugging Face's DiffLlama.

Each output head subtracts two softmax maps, `(softmax(Q1 K1ᵀ) - λ softmax(Q2 K2ᵀ)) V`, so that
attention both maps give (noise, sinks) cancels and what only the first gives stands out. The
two maps of pair n are those of query heads n and n + N/2 (their keys: key/value heads
`n // G` and `n // G + K/2`, G = N/K), and the pair reads values of twice the head size, the
concatenation `[V_j, V_{j + K/2}]` of key/value heads j = n // G and j + K/2. Each pair's output
`[2 Dv]` is RMS-normalised without a learned scale and multiplied by `1 - λ_init`, which keeps
its size at the start of training that of one softmax head. So N query heads make N/2 output
pairs of size 2 Dv, and W_O still reads `N Dv` features.

λ is a learned scalar per layer, reparameterised as
`λ = exp(λ_q1 · λ_k1) - exp(λ_q2 · λ_k2) + λ_init`, with `λ_init = 0.8 - 0.6 exp(-0.3 l)` at
the layer's 0-based depth l (DiffLlama's `lambda_init_fn(layer_idx)`, layer_idx from 0).

Shapes: queries `[B, N, T, H]`, keys `[B, K, S, H]`, values `[B, K, S, Dv]`, N and K even, K
dividing N; the maps `[B, N/2, T, S]`, the output `[B, N/2, T, 2 Dv]`.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from attention.core import attend, repeat_kv, rms_normalize
from attention.sdpa import attention_weights, scaled_dot_product_attention

Array = jax.Array


class Differential(NamedTuple):
  """What the variant `'differential'` needs besides queries, keys and values (its option).

  Attributes:
    lam: λ, a scalar (`differential_lambda`).
    lambda_init: λ_init of the layer's depth (`lambda_init`).
    eps: the epsilon of the pairs' RMS normalisation (DiffLlama: the model's `rms_norm_eps`).
  """

  lam: Array
  lambda_init: float
  eps: float


def lambda_init(layer_index: int) -> float:
  """`0.8 - 0.6 exp(-0.3 l)` at the 0-based depth l: 0.2 at the first layer, towards 0.8."""
  return 0.8 - 0.6 * math.exp(-0.3 * layer_index)


def differential_lambda(
  lambda_q1: Array, lambda_k1: Array, lambda_q2: Array, lambda_k2: Array, init: float
) -> Array:
  """`λ = exp(λ_q1 · λ_k1) - exp(λ_q2 · λ_k2) + init`, a scalar; the parameters `[H]`."""
  return jnp.exp(jnp.sum(lambda_q1 * lambda_k1)) - jnp.exp(jnp.sum(lambda_q2 * lambda_k2)) + init


def _check_heads(q: Array, k: Array) -> None:
  if q.shape[-3] % 2 or k.shape[-3] % 2:
    raise ValueError(
      'differential attention pairs heads n and n + N/2: it needs an even number of query '
      f'heads and of key/value heads; got {q.shape[-3]} and {k.shape[-3]}.'
    )


def pair_values(v: Array) -> Array:
  """`[B, K, S, Dv] -> [B, K/2, S, 2 Dv]`: value heads j and j + K/2 side by side."""
  half = v.shape[-3] // 2
  return jnp.concatenate([v[..., :half, :, :], v[..., half:, :, :]], axis=-1)


def _finish(out: Array, option: Differential) -> Array:
  """Each pair's output `[..., 2 Dv]` RMS-normalised, times `1 - λ_init`, in out's dtype."""
  normed = rms_normalize(out, option.eps) * (1.0 - option.lambda_init)
  return normed.astype(out.dtype)


def differential_weights(
  q: Array,
  k: Array,
  *,
  differential: Differential,
  mask: Array | None = None,
  is_causal: bool = False,
  bias: Array | None = None,
  window: int = 0,
  softcap: float = 0.0,
  scale: float | None = None,
) -> Array:
  """The differential maps `A_n - λ A_{n + N/2}`, `[B, N/2, T, S]`: what each output pair
  averages its values with (rows sum to 1 - λ; entries may be negative).

  Args:
    q: queries `[B, N, T, H]`.
    k: keys `[B, K, S, H]`.
    differential: λ, λ_init and the norm's epsilon.
    mask: broadcastable to `[B, N, T, S]`, True = may attend; applies to both maps.
    is_causal: also the causal mask.
    bias, window, softcap, scale: as `scaled_dot_product_attention` takes them.
  """
  _check_heads(q, k)
  scoring = dict(bias=bias, window=window, softcap=softcap, scale=scale)
  maps = attention_weights(q, k, mask=mask, is_causal=is_causal, **scoring)  # [B, N, T, S]
  half = maps.shape[-3] // 2
  return maps[..., :half, :, :] - jnp.asarray(differential.lam, maps.dtype) * maps[..., half:, :, :]


def differential_from_weights(maps: Array, v: Array, differential: Differential) -> Array:
  """Pairs' outputs `[B, N/2, T, 2 Dv]` of the maps `[B, N/2, T, S]` (`differential_weights`,
  perhaps edited) and values `[B, K, S, Dv]`: `norm(maps @ [V_j, V_{j + K/2}]) (1 - λ_init)`."""
  values = repeat_kv(pair_values(v), maps.shape[-3]).astype(maps.dtype)  # [B, N/2, S, 2 Dv]
  return _finish(attend(maps, values), differential)


def differential_attention(
  q: Array,
  k: Array,
  v: Array,
  *,
  differential: Differential | None = None,
  mask: Array | None = None,
  is_causal: bool = False,
  bias: Array | None = None,
  window: int = 0,
  softcap: float = 0.0,
  scale: float | None = None,
  implementation: str | None = None,
) -> Array:
  """Differential attention, `[B, N/2, T, 2 Dv]` (see the module docstring).

  Both maps average the same pair values, so this runs one scaled dot-product attention of all
  N query heads over values `[V_j, V_{j + K/2}]` (every key/value head i carries the pair of
  `i mod K/2`) and subtracts its halves, `O_n - λ O_{n + N/2}`: the maps are never formed, and
  any kernel of `scaled_dot_product_attention` can run it.

  Args:
    q: queries `[B, N, T, H]`.
    k: keys `[B, K, S, H]`.
    v: values `[B, K, S, Dv]`.
    differential: λ, λ_init and the norm's epsilon (required).
    mask: broadcastable to `[B, N, T, S]`, True = may attend.
    is_causal: also the causal mask.
    bias, window, softcap, scale, implementation: as `scaled_dot_product_attention` takes them.
  """
  if differential is None:
    raise ValueError('differential_attention needs differential=Differential(lam, init, eps).')
  _check_heads(q, k)
  pairs = pair_values(v)  # [B, K/2, S, 2 Dv]
  values = jnp.concatenate([pairs, pairs], axis=-3)  # [B, K, S, 2 Dv]: head i reads i mod K/2
  out = scaled_dot_product_attention(
    q,
    k,
    values,
    mask=mask,
    is_causal=is_causal,
    bias=bias,
    window=window,
    softcap=softcap,
    scale=scale,
    implementation=implementation,
  )
  half = out.shape[-3] // 2
  lam = jnp.asarray(differential.lam, out.dtype)
  paired = out[..., :half, :, :] - lam * out[..., half:, :, :]  # [B, N/2, T, 2 Dv]
  return _finish(paired, differential)
