"""Attend's own flash-attention kernel in Pallas (Triton backend), forward and backward.

`flash_attention` runs the variants that the library kernels cannot express, each computed in
the kernel from the positions of a block's rows and columns, so no `[T, S]` array (mask, bias or
weights) is ever formed:

- causal masking (query i sees keys j <= i; queries at 0..T-1 and keys at 0..S-1 also when
  T != S), a sliding `window` (`|i - j| < window`), and `sink_tokens`, the first keys kept
  visible past the window (StreamingLLM);
- ALiBi, `-slope[n] * |i - j|` added to the scaled scores (no gradient to the slopes);
- a learned sink logit per head: one more softmax slot of value 0 (the weights over the keys sum
  to less than 1), with its gradient;
- logit soft-capping, `softcap * tanh(s / softcap)` before ALiBi and masking;
- grouped-query attention: K key/value heads for N query heads, read through the BlockSpecs'
  index maps (query head n reads key head `n // (N // K)`), never repeated in memory.

The forward is an online softmax (FlashAttention-2): one program per (batch, head, query block)
walks the key blocks its rows can see, keeping a running max `m`, sum `l` and output
accumulator in float32, and saves each row's log-sum-exp for the backward
(`attention/pallas_flash_backward.py`). A sink is simply the state a row starts from: `m = sink`,
`l = exp(sink - m) = 1`, nothing accumulated. A row that sees no key (and has no sink) ends with
`l = 0` and gets output 0.

Off a GPU the kernels run in Pallas's interpret mode (slowly; that is how the CPU tests run them).
Lengths are padded up to whole blocks and head sizes up to a power of two (the Triton lowering
loads and stores only power-of-two shapes); padded keys are masked out by position, padded rows
and feature columns are sliced off.
"""

import functools

import jax
from jax.experimental import pallas as pl
import jax.numpy as jnp

from attention.pallas_flash_backward import (
  MASKED,
  Config,
  all_keys_spec,
  backward,
  block_logits,
  key_block_ranges,
  per_head_spec,
  query_block_spec,
)

Array = jax.Array

# The largest head size a block keeps in registers comfortably (padded to a power of two).
MAX_HEAD_SIZE = 256
# Triton's matmuls need each dimension to be at least 16.
MIN_BLOCK = 16


def _forward_kernel(cfg: Config, q_ref, k_ref, v_ref, slope_ref, sink_ref, out_ref, lse_ref):
  """One query block of one head. Refs: q `[bq, H]`, k `[Sp, H]`, v `[Sp, Dv]` (all keys of the
  head's key/value head), slope and sink `[1, 1]`; out `[bq, Dv]`, lse `[bq]`."""
  i = pl.program_id(2)
  q, slope = q_ref[...], slope_ref[...]

  def over_key_block(j, carry):
    acc, m, l = carry
    cols = pl.ds(j * cfg.block_k, cfg.block_k)
    k, v = k_ref[cols, :], v_ref[cols, :]
    s, visible, _ = block_logits(cfg, q, k, i * cfg.block_q, j * cfg.block_k, slope)
    s = jnp.where(visible, s, MASKED)
    m_new = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
    # Masked weights are zeroed explicitly: in a row that has seen nothing, m_new = MASKED and
    # exp(s - m_new) would be 1.
    p = jnp.where(visible, jnp.exp(s - m_new), 0.0)
    rescale = jnp.exp(m - m_new)  # what the earlier blocks' sums are worth at the new max
    l = rescale * l + jnp.sum(p, axis=1, keepdims=True)
    acc = rescale * acc + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    return acc, m_new, l

  rows = (cfg.block_q, 1)
  if cfg.has_sink:
    m, l = jnp.broadcast_to(sink_ref[...], rows), jnp.ones(rows, jnp.float32)
  else:
    m, l = jnp.full(rows, MASKED, jnp.float32), jnp.zeros(rows, jnp.float32)
  carry = (jnp.zeros((cfg.block_q, out_ref.shape[-1]), jnp.float32), m, l)
  (a_lo, a_hi), (lo, hi) = key_block_ranges(cfg, i)
  carry = jax.lax.fori_loop(a_lo, a_hi, over_key_block, carry)
  acc, m, l = jax.lax.fori_loop(lo, hi, over_key_block, carry)
  empty = l == 0.0
  safe_l = jnp.where(empty, 1.0, l)
  out_ref[...] = (acc / safe_l).astype(out_ref.dtype)
  # An empty row's log-sum-exp is "+infinity" (finite here): exp(s - lse) is then 0 in the
  # backward, so it gets no gradient.
  lse = jnp.where(empty, -MASKED, m + jnp.log(safe_l))
  lse_ref[...] = lse.reshape(cfg.block_q)


def _compiler_params(cfg: Config):
  """Triton's launch settings on a GPU; None in interpret mode, which takes none."""
  if cfg.interpret:
    return None
  from jax.experimental.pallas import triton as plgpu

  return plgpu.CompilerParams(num_warps=4, num_stages=2)


def _forward(cfg: Config, q, k, v, slopes, sink):
  """Padded q `[B, N, Tp, H]`, k, v `[B, K, Sp, H|Dv]`, slopes and sink `[N, 1]` float32 ->
  (out `[B, N, Tp, Dv]` in q's dtype, lse `[B, N, Tp]` float32)."""
  b, n, tp, h = q.shape
  sp, dv = k.shape[2], v.shape[3]
  return pl.pallas_call(
    functools.partial(_forward_kernel, cfg),
    name='attend_flash_forward',
    grid=(b, n, tp // cfg.block_q),
    # Query head n reads the keys of key/value head n // G: grouped-query attention in the
    # index map (`all_keys_spec`), no repeated keys in memory.
    in_specs=[
      query_block_spec(cfg.block_q, h),
      all_keys_spec(sp, h, cfg.groups),
      all_keys_spec(sp, dv, cfg.groups),
      per_head_spec(1),
      per_head_spec(1),
    ],
    out_specs=[query_block_spec(cfg.block_q, dv), query_block_spec(cfg.block_q)],
    out_shape=[
      jax.ShapeDtypeStruct((b, n, tp, dv), q.dtype),
      jax.ShapeDtypeStruct((b, n, tp), jnp.float32),
    ],
    interpret=cfg.interpret,
    compiler_params=_compiler_params(cfg),
  )(q, k, v, slopes, sink)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(cfg: Config, q, k, v, slopes, sink):
  return _forward(cfg, q, k, v, slopes, sink)[0]


def _flash_fwd(cfg, q, k, v, slopes, sink):
  out, lse = _forward(cfg, q, k, v, slopes, sink)
  return out, (q, k, v, slopes, sink, out, lse)


def _flash_bwd(cfg, residuals, d_out):
  q, k, v, slopes, sink, out, lse = residuals
  # D_i = dO_i · O_i, the softmax backward's per-row term (padded rows have dO = 0, so D = 0).
  delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)  # [B, N, Tp]
  dq, dk, dv = backward(cfg, q, k, v, d_out, lse, delta, slopes, _compiler_params(cfg))
  d_sink = jnp.zeros_like(sink)
  if cfg.has_sink:
    # The sink slot's weight is p0 = exp(sink - lse) and its value 0, so dL/dsink for a row is
    # p0 (0 - D_i): the same `P (dP - D)` as any key's logit, with dP = dO · 0.
    p0 = jnp.exp(sink[None, :, :] - lse)  # [B, N, Tp]
    d_sink = -jnp.sum(p0 * delta, axis=(0, 2))[:, None]
  return dq, dk, dv, jnp.zeros_like(slopes), d_sink


_flash.defvjp(_flash_fwd, _flash_bwd)


def _power_of_two_at_least(x: int, floor: int) -> int:
  return max(floor, 1 << (x - 1).bit_length())


def _check(q, k, v, window, sink_tokens, softcap, block_q, block_k) -> None:
  """Raises ValueError on shapes or settings `flash_attention` cannot run, one sentence each."""
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
    raise ValueError(
      f'flash_attention: needs q [B, N, T, H], k and v [B, K, S, H|Dv]; got q{q.shape}, '
      f'k{k.shape}, v{v.shape}.'
    )
  (b, n, _, h), kv_heads = q.shape, k.shape[1]
  if k.shape[:3] != v.shape[:3] or k.shape[0] != b or k.shape[3] != h or n % kv_heads:
    raise ValueError(
      f'flash_attention: k and v must share [B, K, S] with K dividing N, and k the head size of '
      f'q; got q{q.shape}, k{k.shape}, v{v.shape}.'
    )
  if window < 0 or sink_tokens < 0 or softcap < 0:
    raise ValueError('flash_attention: window, sink_tokens and softcap must be non-negative.')
  for block in (block_q, block_k):
    if block < MIN_BLOCK or block & (block - 1):
      raise ValueError(f'flash_attention: block sizes must be powers of two >= 16, got {block}.')


def flash_attention(
  q: Array,
  k: Array,
  v: Array,
  *,
  scale: float | None = None,
  is_causal: bool = False,
  window: int = 0,
  sink_tokens: int = 0,
  alibi_slopes: Array | None = None,
  sink: Array | None = None,
  softcap: float = 0.0,
  block_q: int = 64,
  block_k: int = 64,
  interpret: bool | None = None,
) -> Array:
  """`softmax(cap(q kᵀ * scale) - alibi, masked, sink) v` in a fused Pallas kernel.

  Args:
    q: queries `[B, N, T, H]`, float32, bfloat16 or float16 (accumulation is float32).
    k: keys `[B, K, S, H]`, K dividing N; query head n reads key head `n // (N // K)`.
    v: values `[B, K, S, Dv]`.
    scale: score multiplier; default `1/sqrt(H)`.
    is_causal: query i sees keys 0..i (top-left aligned also when T != S).
    window: if > 0, query i sees key j only if `|i - j| < window` (with is_causal: keys
      `i - window + 1 .. i`).
    sink_tokens: with a window, keys `j < sink_tokens` stay visible past it (still subject to
      causal masking): `attention.window_mask`'s kept first tokens.
    alibi_slopes: `[N]` (or broadcastable to it): adds `-slope * |i - j|`; no gradient.
    sink: `[N]` (or broadcastable) sink logits: one more softmax slot of value 0.
    softcap: if > 0, scaled scores s become `softcap * tanh(s / softcap)` before ALiBi, masks.
    block_q, block_k: rows and keys per block, powers of two >= 16 (smaller for short inputs).
    interpret: run in Pallas interpret mode; None = unless the backend is a GPU.

  Returns:
    `[B, N, T, Dv]` in q's dtype. A row that sees no key is 0 (with a sink too: all its weight
    is on the sink's zero value) and passes no gradient back.
  """
  q, k, v = jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)
  _check(q, k, v, window, sink_tokens, softcap, block_q, block_k)
  (n, t, h), (kv_heads, s), dv = q.shape[1:], k.shape[1:3], v.shape[3]
  per_head = lambda x: jnp.broadcast_to(jnp.asarray(x, jnp.float32), (n,))[:, None]  # [N, 1]
  cfg = Config(
    scale=h**-0.5 if scale is None else float(scale),
    is_causal=bool(is_causal),
    window=int(window),
    sink_tokens=int(sink_tokens) if window else 0,  # without a window every key is visible anyway
    softcap=float(softcap),
    has_alibi=alibi_slopes is not None,
    has_sink=sink is not None,
    q_len=t,
    kv_len=s,
    # Short inputs get smaller blocks, not a 64-row block that is mostly padding.
    block_q=min(block_q, _power_of_two_at_least(t, MIN_BLOCK)),
    block_k=min(block_k, _power_of_two_at_least(s, MIN_BLOCK)),
    groups=n // kv_heads,
    interpret=jax.default_backend() != 'gpu' if interpret is None else bool(interpret),
  )
  # Zero padding: extra feature columns add nothing to q·k and give output columns that are cut
  # off; extra rows and keys are masked by position in `block_logits`.
  hp, dvp = _power_of_two_at_least(h, MIN_BLOCK), _power_of_two_at_least(dv, MIN_BLOCK)
  tp, sp = cfg.num_q_blocks * cfg.block_q, cfg.num_k_blocks * cfg.block_k
  pad = lambda x, length, size: jnp.pad(
    x, ((0, 0), (0, 0), (0, length - x.shape[2]), (0, size - x.shape[3]))
  )
  out = _flash(
    cfg,
    pad(q, tp, hp),
    pad(k, sp, hp),
    pad(v, sp, dvp),
    per_head(0.0 if alibi_slopes is None else jax.lax.stop_gradient(alibi_slopes)),
    per_head(0.0 if sink is None else sink),
  )
  return out[:, :, :t, :dv]


def pallas_unsupported(
  q,
  k,
  v,
  *,
  mask=None,
  bias=None,
  dropout_rate=0.0,
  sink=None,
  alibi_slopes=None,
  interpret_allowed=False,
  **variants,
) -> str | None:
  """Why `flash_attention` cannot run this call as a GPU kernel, or None if it can. `variants`
  (is_causal, window, sink_tokens, softcap) are all taken. The call's own limits come first;
  what depends on the machine last (`interpret_allowed`: off a GPU, interpret mode will do)."""
  del variants
  if mask is not None or bias is not None:
    return 'it takes no mask or bias array (it computes causal, window and ALiBi terms itself)'
  if dropout_rate > 0.0:
    return 'it takes no dropout'
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or q.shape[1] % k.shape[1]:
    return f'it needs q [B, N, T, H] and k, v [B, K, S, H] with K dividing N, got k{k.shape}'
  for name, x in (('sink', sink), ('alibi_slopes', alibi_slopes)):
    if x is not None and (jnp.ndim(x) > 1 or jnp.size(x) not in (1, q.shape[1])):
      return f'it takes {name} of one value per query head, got shape {jnp.shape(x)}'
  if max(q.shape[-1], v.shape[-1]) > MAX_HEAD_SIZE:
    return f'it takes head sizes up to {MAX_HEAD_SIZE}, got H={q.shape[-1]}, Dv={v.shape[-1]}'
  if jax.default_backend() != 'gpu' and not interpret_allowed:
    backend = jax.default_backend()
    return f'it needs an NVIDIA GPU, the backend is {backend!r} (interpret=True runs it, slowly)'
  if q.dtype not in (jnp.float32, jnp.bfloat16, jnp.float16):
    return f'it takes float32, bfloat16 or float16 inputs, got {q.dtype}'
  return None
