"""Memory-efficient scaled dot-product attention (online softmax, FlashAttention-style).

The `[T, S]` score matrix never exists: queries are processed in blocks of `q_block` rows, and for
each query block the keys are visited in blocks of `kv_block` columns while a running max `m`,
normaliser `l` and un-normalised output `acc` are updated (Milakov & Gimelshein 2018; Rabe & Staats
2021; Dao et al. 2022). The backward pass is a `custom_vjp` that recomputes each score block from
`q`, `k` and the saved row log-sum-exp instead of storing the weights, so forward and backward both
use O(block) extra memory. Causal attention skips key blocks that lie wholly in the future.

On CPU the (batch, head) slices are visited one at a time (`head_block=1`): a 256 x 2048 score
block of one head (2 MB) stays in cache between the matmuls and the softmax around them, where the
same block over all 64 heads of a B=8, N=8 call (128 MB) streams through memory. On 2 CPU cores at
S=2048 this took the forward pass from 1.7x torch's SDPA time to 1.0x (and the backward's
transposed blocks, see `_block_grads`, took forward+backward from 1.3x to 1.0x). Accelerators get
every head at once: a loop would serialise work they run in parallel. Short keys make narrow
blocks, so the default query block grows to keep 256 x 2048 scores: at S=512 one 512 x 512 block
per head instead of two 256 x 512 ones took 15-20% off the forward pass (2 cores).

Call it through `attention.scaled_dot_product_attention(..., implementation='chunked')`, which
validates the inputs; the function here assumes they are valid.
"""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array

# Score entries per block by default: 256 x 2048 float32 (2 MB) stays in a core's cache.
_BLOCK_SCORES = 256 * 2048


@dataclasses.dataclass(frozen=True)
class _Static:
  """Everything about a call that is not an array; hashable for `custom_vjp`."""
  q_len: int
  kv_len: int
  q_block: int
  kv_block: int
  is_causal: bool
  scale: float
  dropout_rate: float

  @property
  def num_q_blocks(self) -> int:
    return -(-self.q_len // self.q_block)

  @property
  def num_kv_blocks(self) -> int:
    return -(-self.kv_len // self.kv_block)


def _pad_axis(x: Array | None, axis: int, size: int, value=0) -> Array | None:
  """Pads `x` along `axis` to `size`, unless that axis is a broadcast (size-1) axis."""
  if x is None or x.shape[axis] in (1, size):
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, size - x.shape[axis])
  return jnp.pad(x, widths, constant_values=value)


def _slice(x: Array | None, axis: int, start, size: int) -> Array | None:
  """`x[..., start:start+size, ...]` along `axis`; broadcast (size-1) axes are kept as they are."""
  if x is None or x.shape[axis] == 1:
    return x
  return lax.dynamic_slice_in_dim(x, start, size, axis)


def _block_inputs(st: _Static, i, j, bias, mask, rng, lead_shape):
  """Bias, validity mask and dropout keep-mask of score block (query block i, key block j)."""
  bq, bk = st.q_block, st.kv_block
  bias_ij = _slice(_slice(bias, -2, i * bq, bq), -1, j * bk, bk)
  valid = _slice(_slice(mask, -2, i * bq, bq), -1, j * bk, bk)
  k_pos = j * bk + jnp.arange(bk)                         # [bk]
  if st.is_causal:
    q_pos = i * bq + jnp.arange(bq)                       # [bq]
    causal = k_pos[None, :] <= q_pos[:, None]             # [bq, bk]
    valid = causal if valid is None else valid & causal
  if st.num_kv_blocks * bk != st.kv_len:                  # keys padded up to whole blocks
    real = k_pos < st.kv_len                              # [bk]
    valid = real if valid is None else valid & real
  keep = None
  if st.dropout_rate > 0.0:
    block_rng = jax.random.fold_in(jax.random.fold_in(rng, i), j)
    keep = jax.random.bernoulli(block_rng, 1.0 - st.dropout_rate, (*lead_shape, bq, bk))
  return bias_ij, valid, keep


def _scores(q_i, k_j, bias_ij, valid):
  """Biased, masked scores of one block from pre-scaled queries, `[..., bq, bk]` in float32.

  Masked entries are -inf. The caller scales q once per call, which saves a multiply per score
  compared with scaling every score block. The backward passes keys first (with transposed bias
  and mask) to get the block transposed, `[..., bk, bq]`.
  """
  s = jnp.einsum("...td,...sd->...ts", q_i, k_j, preferred_element_type=jnp.float32)
  if bias_ij is not None:
    s = s + bias_ij.astype(jnp.float32)
  if valid is not None:
    s = jnp.where(valid, s, -jnp.inf)
  return s


def _num_kv_blocks_for(st: _Static, i):
  """Key blocks that query block i needs: all, or with causal masking only up to its diagonal."""
  if not st.is_causal:
    return st.num_kv_blocks
  return jnp.minimum(st.num_kv_blocks, ((i + 1) * st.q_block + st.kv_block - 1) // st.kv_block)


def _first_q_block_for(st: _Static, j):
  """First query block that key block j contributes to (0 unless causal)."""
  return (j * st.kv_block) // st.q_block if st.is_causal else 0


def _forward(st: _Static, q, k, v, bias, mask, rng):
  """Returns (output `[..., Tp, Dv]`, row log-sum-exp `[..., Tp]`) for padded inputs."""
  lead = q.shape[:-2]
  bq, bk, dv = st.q_block, st.kv_block, v.shape[-1]

  def query_block(args):
    i, q_i = args                                                   # q_i: [..., bq, D]

    def key_block(j, carry):
      m, l, acc = carry                                   # [..., bq], [..., bq], [..., bq, Dv]
      bias_ij, valid, keep = _block_inputs(st, i, j, bias, mask, rng, lead)
      s = _scores(q_i, _slice(k, -2, j * bk, bk), bias_ij, valid)       # [..., bq, bk]
      m_new = jnp.maximum(m, jnp.max(s, axis=-1))
      m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)           # rows with no key seen yet
      p = jnp.exp(s - m_safe[..., None])                            # masked -> exp(-inf) = 0
      alpha = jnp.exp(m - m_safe)
      l = l * alpha + jnp.sum(p, axis=-1)
      if keep is not None:
        p = jnp.where(keep, p / (1.0 - st.dropout_rate), 0.0)
      pv = jnp.einsum("...ts,...sv->...tv", p.astype(v.dtype), _slice(v, -2, j * bk, bk),
                      preferred_element_type=jnp.float32)
      return m_new, l, acc * alpha[..., None] + pv

    init = (jnp.full((*lead, bq), -jnp.inf, jnp.float32), jnp.zeros((*lead, bq), jnp.float32),
            jnp.zeros((*lead, bq, dv), jnp.float32))
    m, l, acc = lax.fori_loop(0, _num_kv_blocks_for(st, i), key_block, init)
    seen = l > 0.0                                                  # False: row fully masked
    out = acc / jnp.where(seen, l, 1.0)[..., None]
    lse = jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), jnp.inf)
    return out.astype(q.dtype), lse

  q = q * jnp.asarray(st.scale, q.dtype)
  q_blocks = jnp.moveaxis(q.reshape(*lead, st.num_q_blocks, bq, q.shape[-1]), -3, 0)
  out, lse = lax.map(query_block, (jnp.arange(st.num_q_blocks), q_blocks))
  out = jnp.moveaxis(out, 0, -3).reshape(*lead, st.num_q_blocks * bq, dv)   # [..., Tp, Dv]
  lse = jnp.moveaxis(lse, 0, -2).reshape(*lead, st.num_q_blocks * bq)       # [..., Tp]
  return out, lse


def _block_grads(st, i, j, q_i, k_j, v_j, do_i, lse_i, delta_i, bias, mask, rng, lead):
  """Recomputes block (i, j) transposed, `[..., bk, bq]`: returns (weights as used, after dropout;
  dS = ∂loss/∂scores).

  Keys lead so that the products that follow, P̃ᵀ dO into dV and dSᵀ Q into dK, contract the
  last axis of their left operand: on CPU the other orientation skips the fast matmul kernels
  and ran 2.4x slower (measured on [2048, 256] x [256, 64] blocks).
  """
  bias_ij, valid, keep = map(_transpose, _block_inputs(st, i, j, bias, mask, rng, lead))
  p = jnp.exp(_scores(k_j, q_i, bias_ij, valid) - lse_i[..., None, :])   # [..., bk, bq]
  dp = jnp.einsum("...sv,...tv->...st", v_j, do_i, preferred_element_type=jnp.float32)
  if keep is None:
    return p, p * (dp - delta_i[..., None, :])
  inv_keep = 1.0 / (1.0 - st.dropout_rate)           # P̃ = P·Z/(1-r) and dP = dP̃·Z/(1-r)
  p_used, dp = jnp.where(keep, p * inv_keep, 0.0), jnp.where(keep, dp * inv_keep, 0.0)
  return p_used, p * (dp - delta_i[..., None, :])


def _transpose(x: Array | None) -> Array | None:
  """`[..., bq, bk]` -> `[..., bk, bq]`; a key-only `[bk]` becomes `[bk, 1]`."""
  if x is None:
    return None
  return x[:, None] if x.ndim == 1 else jnp.swapaxes(x, -1, -2)


def _backward(st: _Static, res, d_out):
  """One pass over key blocks j (outer) and the query blocks i that see them (inner).

  dV_j and dK_j accumulate in the inner loop's carry; dQ_i and the bias gradient are added into
  full-size buffers, which XLA updates in place. Each score block is recomputed once.

  dQ accumulates transposed, `[..., D, Tp]`, as dQ_iᵀ = K_jᵀ dS: a plain `[D, bk] x [bk, bq]`
  product. Transposing each block back to `[bq, D]` before adding it let XLA fold the transpose
  into the dot, which then contracted the first axis of dS and the last of K_jᵀ; XLA:CPU runs
  that orientation outside its fast matmul kernels, and forward+backward took 1.2-1.3x as long
  (2 cores, S=512 to 8192). One transpose at the end replaces it.
  """
  q, k, v, bias, mask, rng, out, lse = res
  lead = q.shape[:-2]
  bq, bk = st.q_block, st.kv_block
  delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)  # [..., Tp]
  q_scaled = q * jnp.asarray(st.scale, q.dtype)

  def key_block(j, carry):
    dq_t, dk, dv, d_bias = carry
    k_j, v_j = _slice(k, -2, j * bk, bk), _slice(v, -2, j * bk, bk)
    # [..., D, bk], once per key block; the barrier keeps XLA from folding the transpose back
    # into the dQ product when the loop over query blocks has a single step and is inlined.
    k_j_t = lax.optimization_barrier(jnp.swapaxes(k_j, -1, -2))

    def query_block(i, inner):
      dq_t, dk_j, dv_j, d_bias = inner
      q_i, do_i = _slice(q_scaled, -2, i * bq, bq), _slice(d_out, -2, i * bq, bq)
      lse_i, delta_i = _slice(lse, -1, i * bq, bq), _slice(delta, -1, i * bq, bq)
      p_used, ds = _block_grads(st, i, j, q_i, k_j, v_j, do_i, lse_i, delta_i, bias, mask,
                                rng, lead)                               # [..., bk, bq]
      dv_j = dv_j + jnp.einsum("...st,...tv->...sv", p_used.astype(d_out.dtype), do_i,
                               preferred_element_type=jnp.float32)
      dk_j = dk_j + jnp.einsum("...st,...td->...sd", ds.astype(q.dtype), q_i,
                               preferred_element_type=jnp.float32)
      dq_i_t = jnp.einsum("...ds,...st->...dt", k_j_t, ds.astype(k.dtype),
                          preferred_element_type=jnp.float32)              # [..., D, bq]
      dq_t = _add_block(dq_t, dq_i_t, (-1,), (i * bq,))
      if d_bias is not None:
        d_bias = _add_block(d_bias, _reduce_to(jnp.swapaxes(ds, -1, -2), d_bias.shape, bq, bk),
                            (-2, -1), (i * bq, j * bk))
      return dq_t, dk_j, dv_j, d_bias

    zeros_j = (jnp.zeros(k_j.shape, jnp.float32), jnp.zeros(v_j.shape, jnp.float32))
    dq_t, dk_j, dv_j, d_bias = lax.fori_loop(_first_q_block_for(st, j), st.num_q_blocks,
                                             query_block, (dq_t, *zeros_j, d_bias))
    dk = lax.dynamic_update_slice_in_dim(dk, dk_j, j * bk, -2)            # q_i carries the scale
    dv = lax.dynamic_update_slice_in_dim(dv, dv_j, j * bk, -2)
    return dq_t, dk, dv, d_bias

  init = (jnp.zeros((*lead, q.shape[-1], q.shape[-2]), jnp.float32),   # dQᵀ: [..., D, Tp]
          jnp.zeros(k.shape, jnp.float32), jnp.zeros(v.shape, jnp.float32),
          None if bias is None else jnp.zeros(bias.shape, jnp.float32))
  dq_t, dk, dv, d_bias = lax.fori_loop(0, st.num_kv_blocks, key_block, init)
  d_bias = None if bias is None else d_bias.astype(bias.dtype)
  dq = jnp.swapaxes(dq_t, -1, -2) * st.scale                              # [..., Tp, D]
  return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), d_bias, None, None


def _reduce_to(ds, shape, bq, bk):
  """Sums block dS `[..., bq, bk]` over the dims that a bias of `shape` broadcasts along."""
  block_shape = (*shape[:-2], 1 if shape[-2] == 1 else bq, 1 if shape[-1] == 1 else bk)
  axes = tuple(a for a, (n, m) in enumerate(zip(block_shape, ds.shape)) if n == 1 and m != 1)
  return jnp.sum(ds, axis=axes, keepdims=True)


def _add_block(buffer, block, axes, starts):
  """`buffer[block position] += block`, where `block` sits at `starts` along `axes`.

  Axes along which the buffer has size 1 (broadcast) are not offset.
  """
  index = [0] * buffer.ndim
  for axis, start in zip(axes, starts):
    if buffer.shape[axis] != 1:
      index[axis] = start
  current = lax.dynamic_slice(buffer, index, block.shape)
  return lax.dynamic_update_slice(buffer, current + block, index)


def _block_sizes(t: int, s: int, q_block: int | None, kv_block: int) -> tuple[int, int]:
  """(query rows, key columns) per block for T queries and S keys; None = the default rows."""
  kv_block = min(kv_block, s)
  if q_block is None:
    q_block = max(1, _BLOCK_SCORES // kv_block)
  return min(q_block, t), kv_block


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _chunked(st: _Static, q, k, v, bias, mask, rng):
  return _forward(st, q, k, v, bias, mask, rng)[0]


def _chunked_fwd(st: _Static, q, k, v, bias, mask, rng):
  out, lse = _forward(st, q, k, v, bias, mask, rng)
  return out, (q, k, v, bias, mask, rng, out, lse)


_chunked.defvjp(_chunked_fwd, _backward)


def chunked_attention(q: Array, k: Array, v: Array, *, mask: Array | None = None,
                      bias: Array | None = None, is_causal: bool = False, scale: float,
                      dropout_rate: float = 0.0, dropout_rng: Array | None = None,
                      q_block: int | None = None, kv_block: int = 2048,
                      head_block: int | None = None) -> Array:
  """Blocked online-softmax attention; see the module docstring.

  Args:
    q: queries `[..., T, D]`.
    k: keys `[..., S, D]`, same leading dims as q.
    v: values `[..., S, Dv]`, same leading dims as q.
    mask: boolean, broadcastable to `[..., T, S]`; True = may attend.
    bias: added to the scores, broadcastable to `[..., T, S]`.
    is_causal: apply `causal_mask(T, S)` (query i sees keys 0..i).
    scale: score multiplier.
    dropout_rate: dropout on the attention weights.
    dropout_rng: PRNG key, required when dropout_rate > 0.
    q_block: query rows per block (clipped to T); None = as many as make a block of 256 x 2048
      scores with the clipped kv_block (256 rows once S >= 2048, all T rows at S=512 up to T=1024).
    kv_block: key columns per block (clipped to S).
    head_block: (batch, head) slices processed together; None = 1 on CPU, all elsewhere.

  Returns:
    Output `[..., T, Dv]`; fully masked query rows give zeros.
  """
  # NumPy inputs become JAX arrays before lax.map and custom_vjp index them with traced values.
  q, k, v = jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)
  mask = None if mask is None else jnp.asarray(mask)
  bias = None if bias is None else jnp.asarray(bias)
  t, s = q.shape[-2], k.shape[-2]
  # Bring mask and bias to q's rank so that blocks slice and reduce along matching axes.
  to_rank = lambda x: None if x is None else x.reshape((1,) * (q.ndim - x.ndim) + x.shape)
  mask, bias = to_rank(mask), to_rank(bias)
  bq, bk = _block_sizes(t, s, q_block, kv_block)
  st = _Static(q_len=t, kv_len=s, q_block=bq, kv_block=bk, is_causal=is_causal,
               scale=float(scale), dropout_rate=float(dropout_rate))
  tp, sp = st.num_q_blocks * st.q_block, st.num_kv_blocks * st.kv_block
  q = _pad_axis(q, -2, tp)
  k, v = _pad_axis(k, -2, sp), _pad_axis(v, -2, sp)
  bias = _pad_axis(_pad_axis(bias, -2, tp), -1, sp)
  mask = _pad_axis(_pad_axis(mask, -2, tp, False), -1, sp, False)
  if dropout_rate == 0.0:
    dropout_rng = None
  lead = q.shape[:-2]
  heads = math.prod(lead)
  if head_block is None:
    head_block = 1 if jax.default_backend() == "cpu" else heads
  if head_block >= heads:
    return _chunked(st, q, k, v, bias, mask, dropout_rng)[..., :t, :]

  def one_head(args):
    h, q_h, k_h, v_h = args
    rng_h = None if dropout_rng is None else jax.random.fold_in(dropout_rng, h)
    return _chunked(st, q_h, k_h, v_h, _head_of(bias, h, lead), _head_of(mask, h, lead), rng_h)

  flat = lambda x: x.reshape(heads, *x.shape[-2:])
  out = lax.map(one_head, (jnp.arange(heads), flat(q), flat(k), flat(v)),
                batch_size=None if head_block == 1 else head_block)
  return out.reshape(*lead, *out.shape[-2:])[..., :t, :]


def _head_of(x: Array | None, h, lead: tuple[int, ...]) -> Array | None:
  """The `[T or 1, S or 1]` slice that flat (batch, head) index h reads of a rank-aligned mask or
  bias; broadcast (size-1) leading dims are read at 0."""
  if x is None or not lead:
    return None if x is None else x.reshape(x.shape[-2:])
  index = jnp.unravel_index(h, lead)
  return x[tuple(i if n > 1 else 0 for i, n in zip(index, x.shape[:-2]))]
