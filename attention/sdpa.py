"""`scaled_dot_product_attention`: one entry point, several implementations.

- `'reference'`: einsum -> masked softmax -> einsum. Materialises the `[..., T, S]` weights, so it
  can return them; the readable definition the others are tested against.
- `'chunked'`: online softmax over query and key blocks (`attention/chunked.py`); O(block) memory
  in forward and backward, and the fastest choice on CPU for long sequences.
- `'cudnn'`: `jax.nn.dot_product_attention(implementation='cudnn')`, the fused flash kernel on
  NVIDIA GPUs (float16/bfloat16).
`implementation=None` picks the fastest one that supports the call on this backend.
"""

import math
import numbers

import jax
import jax.numpy as jnp

from attention.chunked import chunked_attention
from attention.core import attend, check_kv, check_mask, masked_softmax
from attention.masks import causal_mask, combine_masks
from attention.scores import check_qk

Array = jax.Array

# From this many score entries per head (T * S) the chunked kernel wins on CPU. Medians on 2 shared
# CPU cores (B=8, N=8, H=64, float32) under mimalloc, as the entry points run: at S=512 chunked
# takes 0.8x reference's time forward and 0.75x forward+backward; at S=384 they tie; at S=256
# reference is 15% faster forward. Under glibc malloc reference's [T, S] buffers fault in afresh
# at every call: chunked is then 2.5x faster at S=512, 3x at S=384.
_CHUNKED_MIN_SCORES = 512 * 512


def _reference(q, k, v, *, mask, bias, is_causal, scale, dropout_rate, dropout_rng):
  scores = jnp.einsum("...td,...sd->...ts", q, k, preferred_element_type=jnp.float32) * scale
  if bias is not None:
    scores = scores + bias.astype(scores.dtype)
  if is_causal:
    mask = combine_masks(mask, causal_mask(q.shape[-2], k.shape[-2]))
  weights = masked_softmax(scores, mask).astype(q.dtype)      # [..., T, S]
  dropped = weights
  if dropout_rate > 0.0:
    keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, weights.shape)
    dropped = jnp.where(keep, weights / (1.0 - dropout_rate), 0.0).astype(q.dtype)
  return attend(dropped, v), weights


def _chunked(q, k, v, *, mask, bias, is_causal, scale, dropout_rate, dropout_rng):
  out = chunked_attention(q, k, v, mask=mask, bias=bias, is_causal=is_causal, scale=scale,
                          dropout_rate=dropout_rate, dropout_rng=dropout_rng)
  return out, None


def _cudnn(q, k, v, *, mask, bias, is_causal, scale, dropout_rate, dropout_rng):
  del dropout_rate, dropout_rng  # jax.nn exposes no cuDNN dropout; the dispatcher rejects rate > 0.
  # jax.nn wants [B, T, N, H] while Attend keeps heads as a leading dim, [..., N, T, H]: fold all
  # leading dims but the last into B and use the last as N.
  lead, t, s = q.shape[:-2], q.shape[-2], k.shape[-2]
  b, n = (math.prod(lead[:-1]), lead[-1]) if lead else (1, 1)
  to_btnh = lambda x: jnp.swapaxes(x.reshape(b, n, *x.shape[-2:]), 1, 2)
  to_bnts = lambda x: None if x is None else jnp.broadcast_to(x, (*lead, t, s)).reshape(b, n, t, s)
  out = jax.nn.dot_product_attention(
      to_btnh(q), to_btnh(k), to_btnh(v), bias=to_bnts(bias), mask=to_bnts(mask), scale=scale,
      is_causal=is_causal, implementation="cudnn")                   # [B, T, N, Dv]
  return jnp.swapaxes(out, 1, 2).reshape(*lead, t, v.shape[-1]), None


KERNELS = {"reference": _reference, "chunked": _chunked, "cudnn": _cudnn}


def _cudnn_unsupported(q, k, v, masked, dropout_rate, return_weights) -> str | None:
  """Why cuDNN cannot run this call (`masked`: a mask, bias or is_causal), or None if it can."""
  if jax.default_backend() != "gpu":
    return f"it needs an NVIDIA GPU and the JAX backend is {jax.default_backend()!r}"
  if q.dtype not in (jnp.float16, jnp.bfloat16):
    return f"it needs float16 or bfloat16 inputs, got {q.dtype}"
  if q.shape[-1] % 8 or q.shape[-1] > 128 or v.shape[-1] != q.shape[-1]:
    return ("it needs equal query/value head sizes <= 128 and divisible by 8, "
            f"got D={q.shape[-1]}, Dv={v.shape[-1]}")
  if masked and (q.shape[-2] % 2 or k.shape[-2] % 2):
    # cuDNN's backward takes a mask, a bias or causal masking at even lengths only.
    return f"masked attention needs even lengths, got T={q.shape[-2]}, S={k.shape[-2]}"
  if dropout_rate > 0.0:
    return "jax.nn exposes no cuDNN dropout"
  if return_weights:
    return "fused kernels never form the weights"
  return None


def _pick(q, k, v, masked, dropout_rate, return_weights) -> str:
  if return_weights:
    return "reference"
  if _cudnn_unsupported(q, k, v, masked, dropout_rate, return_weights) is None:
    return "cudnn"
  if q.shape[-2] * k.shape[-2] >= _CHUNKED_MIN_SCORES:
    return "chunked"
  return "reference"


def _validate(q, k, v, mask, bias, scale, dropout_rate, dropout_rng, implementation):
  """Raises ValueError, before any tracing, on inputs no implementation could handle."""
  check_qk(q, k, "scaled_dot_product_attention")
  check_kv(k, v, "scaled_dot_product_attention")
  try:
    lead = jnp.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
  except ValueError:
    raise ValueError(
        f"scaled_dot_product_attention: leading dims of q{tuple(q.shape)}, k{tuple(k.shape)}, "
        f"v{tuple(v.shape)} do not broadcast.") from None
  scores_shape = (*lead, q.shape[-2], k.shape[-2])
  check_mask(mask, scores_shape, "scaled_dot_product_attention")
  if bias is not None:
    check_mask(bias, scores_shape, "scaled_dot_product_attention (bias)")
  if mask is not None and mask.dtype != jnp.bool_:
    raise ValueError(f"scaled_dot_product_attention: mask must be boolean, got {mask.dtype}.")
  if not 0.0 <= dropout_rate < 1.0:
    raise ValueError(
        f"scaled_dot_product_attention: dropout_rate must be in [0, 1), got {dropout_rate}.")
  if dropout_rate > 0.0 and dropout_rng is None:
    raise ValueError("scaled_dot_product_attention: dropout_rate > 0 needs a dropout_rng.")
  if scale is not None and not isinstance(scale, numbers.Real):
    raise ValueError(
        f"scaled_dot_product_attention: scale must be a number, got {type(scale).__name__}.")
  if implementation is not None and implementation not in KERNELS:
    raise ValueError(
        f"Unknown attention implementation {implementation!r}; valid implementations: "
        f"{', '.join(KERNELS)} (or None to pick automatically).")
  return lead


def scaled_dot_product_attention(
    q: Array, k: Array, v: Array, *, mask: Array | None = None, bias: Array | None = None,
    is_causal: bool = False, scale: float | None = None, dropout_rate: float = 0.0,
    dropout_rng: Array | None = None, return_weights: bool = False,
    implementation: str | None = None) -> Array | tuple[Array, Array]:
  """`softmax(q kᵀ * scale + bias, masked) v`, with a choice of implementation.

  Args:
    q: queries `[..., T, D]`; leading dims (batch, heads) broadcast against k and v.
    k: keys `[..., S, D]`.
    v: values `[..., S, Dv]`.
    mask: boolean, broadcastable to `[..., T, S]`; True = may attend. A fully masked query row
      gets zero weights and a zero output.
    bias: added to the scores (e.g. relative-position or ALiBi terms), broadcastable to `[..., T, S]`.
    is_causal: also apply `causal_mask(T, S)`: query i sees keys 0..i.
    scale: score multiplier; default `1/sqrt(D)`.
    dropout_rate: dropout applied to the attention weights (the paper applies it in training).
    dropout_rng: PRNG key for dropout; required when `dropout_rate > 0`.
    return_weights: also return the (pre-dropout) weights `[..., T, S]`; only `'reference'` forms them.
    implementation: `'reference'`, `'chunked'`, `'cudnn'` or None (pick the fastest valid one).

  Returns:
    Output `[..., T, Dv]`, or `(output, weights)` when `return_weights`.
  """
  # Converted here, before any kernel traces them: 'chunked' indexes the mask and bias with traced
  # head indices inside custom_vjp and lax.map, which a NumPy array cannot take.
  q, k, v = jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)
  mask = None if mask is None else jnp.asarray(mask)
  bias = None if bias is None else jnp.asarray(bias)
  lead = _validate(q, k, v, mask, bias, scale, dropout_rate, dropout_rng, implementation)
  masked = mask is not None or bias is not None or is_causal
  if implementation is None:
    implementation = _pick(q, k, v, masked, dropout_rate, return_weights)
  elif implementation != "reference" and return_weights:
    raise ValueError(
        f"scaled_dot_product_attention: return_weights=True needs implementation='reference'; "
        f"{implementation!r} never forms the weights.")
  elif implementation == "cudnn":
    reason = _cudnn_unsupported(q, k, v, masked, dropout_rate, return_weights)
    if reason:
      raise ValueError(f"scaled_dot_product_attention: implementation='cudnn' unavailable: {reason}.")
  if implementation in ("chunked", "cudnn"):
    q, k, v = (jnp.broadcast_to(x, (*lead, *x.shape[-2:])) for x in (q, k, v))
  scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
  out, weights = KERNELS[implementation](
      q, k, v, mask=mask, bias=bias, is_causal=is_causal, scale=scale,
      dropout_rate=float(dropout_rate), dropout_rng=dropout_rng)
  return (out, weights) if return_weights else out
