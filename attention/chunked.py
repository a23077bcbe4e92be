"""Memory-efficient scaled dot-product attention (online softmax, FlashAttention-style).

The `[T, S]` score matrix never exists: queries are processed in blocks of `q_block` rows, and for
each query block the keys are visited in blocks of `kv_block` columns while a running max `m`,
normaliser `l` and un-normalised output `acc` are updated (Milakov & Gimelshein 2018; Rabe & Staats
2021; Dao et al. 2022). The backward pass is a `custom_vjp` that recomputes each score block from
`q`, `k` and the saved row log-sum-exp instead of storing the weights, so forward and backward both
use O(block) extra memory. Causal attention skips key blocks that lie wholly in the future, and a
sliding window skips every key block outside the window (both passes), so time is O(S·W).

The variants are per-block terms, so none of them adds a `[T, S]` array: soft-capping is applied
to each score block, ALiBi's `-slope·|i - j|` is formed from the block's positions, and a sink
logit is a key every row has already seen when the online softmax starts (`m = sink`, `l = 1`).
Grouped-query keys and values are repeated to the query heads before the loop.

On CPU the (batch, head) slices are visited one at a time (`head_block=1`): a 256 x 2048 score
block of one head (2 MB) stays in cache between the matmuls and the softmax around them, where the
same block over all 64 heads of a B=8, N=8 call (128 MB) streams through memory. On 2 CPU cores at
S=2048 this took the forward pass from 1.7x torch's SDPA time to 1.0x (and the backward's
transposed blocks, see `chunked_backward._block_grads`, took forward+backward from 1.3x to
1.0x). Accelerators get every head at once: a loop would serialise work they run in parallel.
Short keys make narrow blocks, so the default query block grows to keep 256 x 2048 scores: at
S=512 one 512 x 512 block per head instead of two 256 x 512 ones took 15-20% off the forward
pass (2 cores).

Call it through `attention.scaled_dot_product_attention(..., implementation='chunked')`, which
validates the inputs; the function here assumes they are valid.
"""

import functools
import math

import jax
from jax import lax
import jax.numpy as jnp

from attention.chunked_backward import backward
from attention.chunked_blocks import Static, block_inputs, block_scores, slice_axis

Array = jax.Array

# Score entries per block by default: 256 x 2048 float32 (2 MB) stays in a core's cache.
_BLOCK_SCORES = 256 * 2048


def _pad_axis(x: Array | None, axis: int, size: int, value=0) -> Array | None:
  """Pads `x` along `axis` to `size`, unless that axis is a broadcast (size-1) axis."""
  if x is None or x.shape[axis] in (1, size):
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, size - x.shape[axis])
  return jnp.pad(x, widths, constant_values=value)


def _forward(st: Static, q, k, v, bias, mask, rng, sink, slopes):
  """Returns (output `[..., Tp, Dv]`, row log-sum-exp `[..., Tp]`, the sink's slot included)
  for padded inputs; `sink`, `slopes`: `[..., 1, 1]` or None."""
  lead = q.shape[:-2]
  bq, bk, dv = st.q_block, st.kv_block, v.shape[-1]

  def query_block(args):
    i, q_i = args  # q_i: [..., bq, D]

    def key_block(j, carry):
      m, l, acc = carry  # [..., bq], [..., bq], [..., bq, Dv]
      bias_ij, valid, keep = block_inputs(st, i, j, bias, mask, rng, lead, slopes)
      s, _ = block_scores(st, q_i, slice_axis(k, -2, j * bk, bk), bias_ij, valid)  # [..., bq, bk]
      m_new = jnp.maximum(m, jnp.max(s, axis=-1))
      m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)  # rows with no key seen yet
      p = jnp.exp(s - m_safe[..., None])  # masked -> exp(-inf) = 0
      alpha = jnp.exp(m - m_safe)
      l = l * alpha + jnp.sum(p, axis=-1)
      if keep is not None:
        p = jnp.where(keep, p / (1.0 - st.dropout_rate), 0.0)
      pv = jnp.einsum(
        '...ts,...sv->...tv',
        p.astype(v.dtype),
        slice_axis(v, -2, j * bk, bk),
        preferred_element_type=jnp.float32,
      )
      return m_new, l, acc * alpha[..., None] + pv

    if sink is None:
      m, l = jnp.full((*lead, bq), -jnp.inf, jnp.float32), jnp.zeros((*lead, bq), jnp.float32)
    else:
      # The sink is a key every row has seen before the first block: it sets the running max,
      # adds exp(sink - m) = 1 to the normaliser, and its value (zero) adds nothing to acc.
      m = jnp.broadcast_to(sink[..., 0].astype(jnp.float32), (*lead, bq))
      l = jnp.ones((*lead, bq), jnp.float32)
    first, stop = st.kv_range(i)
    m, l, acc = lax.fori_loop(
      first, stop, key_block, (m, l, jnp.zeros((*lead, bq, dv), jnp.float32))
    )
    seen = (l > 0.0) & (m > -jnp.inf)  # False: row fully masked (and no finite sink)
    out = acc / jnp.where(seen, l, 1.0)[..., None]
    lse = jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), jnp.inf)
    return out.astype(q.dtype), lse

  q = q * jnp.asarray(st.scale, q.dtype)
  q_blocks = jnp.moveaxis(q.reshape(*lead, st.num_q_blocks, bq, q.shape[-1]), -3, 0)
  out, lse = lax.map(query_block, (jnp.arange(st.num_q_blocks), q_blocks))
  out = jnp.moveaxis(out, 0, -3).reshape(*lead, st.num_q_blocks * bq, dv)  # [..., Tp, Dv]
  lse = jnp.moveaxis(lse, 0, -2).reshape(*lead, st.num_q_blocks * bq)  # [..., Tp]
  return out, lse


def _block_sizes(
  t: int, s: int, q_block: int | None, kv_block: int | None, window: int = 0
) -> tuple[int, int]:
  """(query rows, key columns) per block for T queries and S keys; None = the default size.

  With a window W, blocks are square, a quarter of W rounded up to a power of 2, within
  [128, 512]: 2048-key blocks would compute mostly masked scores, and smaller blocks waste
  fewer scores at the band's edges. Forward medians on 2 shared CPU cores (S=8192, N=4, H=64,
  causal):
  W=256: 128-blocks 70 ms, 256: 160 ms, 512: 290 ms; W=1024: 256-blocks 270 ms, 512: 320 ms,
  1024: 550 ms; W=4096: 512-blocks 770 ms, 1024: 1030 ms, 256 x 2048: 1450 ms.
  """
  side = min(512, max(128, (1 << (window - 1).bit_length()) // 4)) if window else None
  if kv_block is None:
    kv_block = side or 2048
  kv_block = min(kv_block, s)
  if q_block is None:
    q_block = side or max(1, _BLOCK_SCORES // kv_block)
  return min(q_block, t), kv_block


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _chunked(st: Static, q, k, v, bias, mask, rng, sink, slopes):
  return _forward(st, q, k, v, bias, mask, rng, sink, slopes)[0]


def _chunked_fwd(st: Static, q, k, v, bias, mask, rng, sink, slopes):
  out, lse = _forward(st, q, k, v, bias, mask, rng, sink, slopes)
  return out, (q, k, v, bias, mask, rng, sink, slopes, out, lse)


# The backward (`attention/chunked_backward.py`) recomputes each score block from q, k and lse.
_chunked.defvjp(_chunked_fwd, backward)


def chunked_attention(
  q: Array,
  k: Array,
  v: Array,
  *,
  mask: Array | None = None,
  bias: Array | None = None,
  is_causal: bool = False,
  scale: float,
  dropout_rate: float = 0.0,
  dropout_rng: Array | None = None,
  window: int = 0,
  softcap: float = 0.0,
  sink: Array | None = None,
  alibi_slopes: Array | None = None,
  q_block: int | None = None,
  kv_block: int | None = None,
  head_block: int | None = None,
) -> Array:
  """Blocked online-softmax attention; see the module docstring.

  Args:
    q: queries `[..., N, T, D]` (or any leading dims).
    k: keys `[..., S, D]`, same leading dims as q, or `[..., K, S, D]` with K dividing N
      (grouped-query attention: query head n reads key head `n // (N // K)`).
    v: values `[..., S, Dv]`, leading dims as k.
    mask: boolean, broadcastable to `[..., T, S]`; True = may attend.
    bias: added to the scores, broadcastable to `[..., T, S]`.
    is_causal: apply `causal_mask(T, S)` (query i sees keys 0..i).
    scale: score multiplier.
    dropout_rate: dropout on the attention weights.
    dropout_rng: PRNG key, required when dropout_rate > 0.
    window: if > 0, query i sees key j only if `|i - j| < window`; key blocks outside are skipped.
    softcap: if > 0, scaled scores s become `softcap * tanh(s / softcap)` before bias and ALiBi.
    sink: sink logits broadcastable to q's leading dims `[...]`: an extra softmax slot of value 0.
    alibi_slopes: broadcastable to q's leading dims; adds `-slope * |i - j|` to the scores.
    q_block: query rows per block (clipped to T); None = as many as make a block of 256 x 2048
      scores with the clipped kv_block (256 rows once S >= 2048, all T rows at S=512 up to T=1024);
      with a window, the same as kv_block's default.
    kv_block: key columns per block (clipped to S); None = 2048, or with a window a quarter of
      it rounded up to a power of 2 within [128, 512].
    head_block: (batch, head) slices processed together; None = 1 on CPU, all elsewhere.

  Returns:
    Output `[..., T, Dv]`; fully masked query rows give zeros.
  """
  # NumPy inputs become JAX arrays before lax.map and custom_vjp index them with traced values.
  q, k, v = jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)
  mask = None if mask is None else jnp.asarray(mask)
  bias = None if bias is None else jnp.asarray(bias)
  if q.ndim >= 3:
    k, v = _repeat_heads(k, q.shape[-3]), _repeat_heads(v, q.shape[-3])
  t, s, lead = q.shape[-2], k.shape[-2], q.shape[:-2]
  mask, bias, sink, slopes = _to_rank(q.ndim, mask, bias, sink, alibi_slopes)
  bq, bk = _block_sizes(t, s, q_block, kv_block, window)
  st = Static(
    q_len=t,
    kv_len=s,
    q_block=bq,
    kv_block=bk,
    is_causal=is_causal,
    scale=float(scale),
    dropout_rate=float(dropout_rate),
    window=int(window),
    softcap=float(softcap),
  )
  q, k, v, bias, mask = _padded(st, q, k, v, bias, mask)
  if dropout_rate == 0.0:
    dropout_rng = None
  heads = math.prod(lead)
  if head_block is None:
    head_block = 1 if jax.default_backend() == 'cpu' else heads
  if head_block >= heads:
    return _chunked(st, q, k, v, bias, mask, dropout_rng, sink, slopes)[..., :t, :]
  out = _by_head(st, q, k, v, bias, mask, dropout_rng, sink, slopes, head_block)
  return out[..., :t, :]


def _to_rank(rank: int, mask, bias, sink, alibi_slopes) -> tuple[Array | None, ...]:
  """Mask and bias brought to q's `rank`, so that blocks slice and reduce along matching axes;
  sink and slopes (over leading dims) too, as `[..., 1, 1]`, so `_head_of` slices them per head."""
  to_rank = lambda x: None if x is None else x.reshape((1,) * (rank - x.ndim) + x.shape)
  mask, bias = to_rank(mask), to_rank(bias)
  sink, slopes = (
    None if x is None else to_rank(_floating(x)[..., None, None]) for x in (sink, alibi_slopes)
  )
  return mask, bias, sink, slopes


def _padded(st: Static, q, k, v, bias, mask) -> tuple[Array | None, ...]:
  """q, k, v, bias and mask padded to whole blocks: `Tp` query rows and `Sp` keys."""
  tp, sp = st.num_q_blocks * st.q_block, st.num_kv_blocks * st.kv_block
  q = _pad_axis(q, -2, tp)
  k, v = _pad_axis(k, -2, sp), _pad_axis(v, -2, sp)
  bias = _pad_axis(_pad_axis(bias, -2, tp), -1, sp)
  mask = _pad_axis(_pad_axis(mask, -2, tp, False), -1, sp, False)
  return q, k, v, bias, mask


def _by_head(st: Static, q, k, v, bias, mask, rng, sink, slopes, head_block: int) -> Array:
  """`_chunked` over the flat (batch, head) slices of padded q, k, v `[..., Tp|Sp, D]`,
  `head_block` at a time (`lax.map`), each slice's dropout from `fold_in(rng, h)`."""
  lead = q.shape[:-2]
  heads = math.prod(lead)

  def one_head(args):
    h, q_h, k_h, v_h = args
    rng_h = None if rng is None else jax.random.fold_in(rng, h)
    of_h = lambda x: _head_of(x, h, lead)
    return _chunked(st, q_h, k_h, v_h, of_h(bias), of_h(mask), rng_h, of_h(sink), of_h(slopes))

  flat = lambda x: x.reshape(heads, *x.shape[-2:])
  out = lax.map(
    one_head,
    (jnp.arange(heads), flat(q), flat(k), flat(v)),
    batch_size=None if head_block == 1 else head_block,
  )
  return out.reshape(*lead, *out.shape[-2:])


def _repeat_heads(x: Array, num_heads: int) -> Array:
  """`[..., K, S, D]` -> `[..., N, S, D]` (`jnp.repeat` order) when K divides N; the copy lets
  each (batch, head) slice run as plain attention, and its gradient sums the groups back."""
  if x.ndim < 3 or x.shape[-3] in (1, num_heads):
    return x
  return jnp.repeat(x, num_heads // x.shape[-3], axis=-3)


def _floating(x) -> Array:
  """`x` as a JAX array of a floating dtype (float32 unless it has one): it gets a gradient."""
  x = jnp.asarray(x)
  return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)


def _head_of(x: Array | None, h, lead: tuple[int, ...]) -> Array | None:
  """The `[T or 1, S or 1]` slice that flat (batch, head) index h reads of a rank-aligned mask,
  bias, sink or slopes; broadcast (size-1) leading dims are read at 0."""
  if x is None or not lead:
    return None if x is None else x.reshape(x.shape[-2:])
  index = jnp.unravel_index(h, lead)
  return x[tuple(i if n > 1 else 0 for i, n in zip(index, x.shape[:-2]))]
