"""The score block of Attend's Pallas flash kernel, its BlockSpecs, and its two backward kernels.

`attention/pallas_flash.py` (the forward kernel and the public `flash_attention`) and the backward
kernels here all visit the `[T, S]` score matrix as blocks of `block_q` query rows by `block_k`
key columns, and all form a block the same way, from q, k and the rows' and columns' positions:
`block_logits`. No `[T, S]` array exists anywhere; masks, ALiBi distances and the window are
computed per block from `jnp.arange`.

The backward pass is FlashAttention-2's. The forward saves each row's log-sum-exp `lse`, so a
block's weights are recomputed as `P = exp(s - lse)`. With `D_i = dO_i · O_i` (one number per
row, computed outside the kernels):

- `dV_j = Σ_i P_ij dO_i`, `dP_ij = dO_i · v_j`, `dS_ij = P_ij (dP_ij - D_i)`,
- `dQ_i = scale Σ_j dS'_ij k_j` and `dK_j = scale Σ_i dS'_ij q_i`, where `dS' = dS` except with
  soft-capping, whose derivative `1 - tanh²` multiplies in.

`D_i` is also what a sink slot needs: its value is 0, so `Σ_j P_ij dP_ij` over the real keys
equals the whole softmax's sum, and the sink's own gradient is `-p0_i D_i` (see
`pallas_flash._flash_bwd`). One kernel (`dkdv`) owns a key block and walks the query blocks that
see it, for every query head of its key/value head; the other (`dq`) owns a query block and walks
its key blocks, so neither needs atomic adds.
"""

import dataclasses
import functools

import jax
from jax import lax
from jax.experimental import pallas as pl
import jax.numpy as jnp

Array = jax.Array

# A finite stand-in for -inf: the logit of a masked key and the running max of a row that has seen
# no key yet. Finite, so `exp(m_old - m_new)` never meets `-inf - -inf`; masked weights are set to
# exactly 0 with `jnp.where` rather than relying on `exp(MASKED - m)` underflowing.
MASKED = -1e30


@dataclasses.dataclass(frozen=True)
class Config:
  """Everything about a call that is not an array (hashable: custom_vjp's static argument).

  `q_len` and `kv_len` are the real lengths T and S; the arrays the kernels see are padded up to
  whole blocks, and `block_logits` masks the padded keys out by position.
  """

  scale: float
  is_causal: bool
  window: int
  sink_tokens: int
  softcap: float
  has_alibi: bool
  has_sink: bool
  q_len: int
  kv_len: int
  block_q: int
  block_k: int
  groups: int  # query heads per key/value head, N // K
  interpret: bool

  @property
  def num_q_blocks(self) -> int:
    return -(-self.q_len // self.block_q)

  @property
  def num_k_blocks(self) -> int:
    return -(-self.kv_len // self.block_k)


def block_logits(cfg: Config, q: Array, k: Array, row0, col0, slope: Array):
  """The final logits of one block, which keys each row may see, and the soft-cap's `tanh`.

  `q` `[bq, H]`, `k` `[bk, H]`; `row0`, `col0` the positions of the block's first query and key;
  `slope` `[1, 1]`, this head's ALiBi slope. Returns `(s, visible, capped)`, each `[bq, bk]`;
  `capped` is `tanh(scaled / softcap)` (None without soft-capping), which the backward needs.
  The order is Attend's definition (`attention.sdpa.normalize_scores`): scale, soft-cap, ALiBi,
  then masks.
  """
  rows = row0 + jnp.arange(cfg.block_q)[:, None]  # [bq, 1] query positions
  cols = col0 + jnp.arange(cfg.block_k)[None, :]  # [1, bk] key positions
  s = jnp.dot(q, k.T, preferred_element_type=jnp.float32) * cfg.scale
  capped = None
  if cfg.softcap:
    capped = jnp.tanh(s / cfg.softcap)
    s = cfg.softcap * capped
  if cfg.has_alibi:
    s = s - slope * jnp.abs((rows - cols).astype(jnp.float32))
  # Padding rows see nothing either: their log-sum-exp then stays that of an empty row, and a
  # backward block never exponentiates a score against a partial sum (inf * 0 = NaN).
  visible = (cols < cfg.kv_len) & (rows < cfg.q_len)
  if cfg.is_causal:
    visible = visible & (cols <= rows)
  if cfg.window:
    # |i - j| < window, written without abs so it stays integer comparisons; with causal masking
    # the second half always holds. The first `sink_tokens` keys are kept past the window.
    near = (rows - cols < cfg.window) & (cols - rows < cfg.window)
    if cfg.sink_tokens:
      near = near | (cols < cfg.sink_tokens)
    visible = visible & near
  return s, visible, capped


def key_block_ranges(cfg: Config, i):
  """Key blocks query block `i` needs, as two ranges `(0, a)` and `(lo, hi)`, `i` traced.

  Causal masking ends at the block of the last real row; a window starts `window - 1` keys
  before the first row and (without causal masking) ends `window - 1` past the last. With
  `sink_tokens` the blocks holding the first keys come first, `[0, a)`, so the blocks between
  them and the window are skipped. Blocks past the band are empty ranges (lo >= hi).
  """
  last_row = jnp.minimum((i + 1) * cfg.block_q, cfg.q_len) - 1
  if cfg.is_causal:
    hi = jnp.minimum(cfg.num_k_blocks, last_row // cfg.block_k + 1)
  elif cfg.window:
    hi = jnp.minimum(cfg.num_k_blocks, (last_row + cfg.window - 1) // cfg.block_k + 1)
  else:
    hi = cfg.num_k_blocks
  if not cfg.window:
    return (0, 0), (0, hi)
  lo = jnp.maximum(i * cfg.block_q - cfg.window + 1, 0) // cfg.block_k
  a = jnp.minimum(-(-cfg.sink_tokens // cfg.block_k), lo) if cfg.sink_tokens else 0
  return (0, a), (lo, hi)


def query_block_range(cfg: Config, j):
  """Query blocks `[lo, hi)` holding a row that sees some key of key block `j`: the transpose of
  `key_block_ranges`. A block holding one of the first `sink_tokens` keys is seen to the end."""
  if cfg.is_causal:
    first_row = j * cfg.block_k
  elif cfg.window:
    first_row = j * cfg.block_k - cfg.window + 1
  else:
    first_row = 0
  lo = jnp.maximum(first_row, 0) // cfg.block_q
  hi = cfg.num_q_blocks
  if cfg.window:
    last_key = jnp.minimum((j + 1) * cfg.block_k, cfg.kv_len) - 1
    hi = jnp.minimum(hi, (last_key + cfg.window - 1) // cfg.block_q + 1)
    if cfg.sink_tokens:
      hi = jnp.where(j * cfg.block_k < cfg.sink_tokens, cfg.num_q_blocks, hi)
  return lo, hi


def _score_grad(cfg, s, visible, capped, lse, delta, d_p):
  """`dL/d(scaled score)` of one block: `P (dP - D)`, times the soft-cap's `1 - tanh²`; and P."""
  p = jnp.where(visible, jnp.exp(s - lse[:, None]), 0.0)
  d_s = p * (d_p - delta[:, None])
  if cfg.softcap:
    d_s = d_s * (1.0 - capped * capped)
  return d_s, p


def _dkdv_kernel(cfg, q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, slope_ref, dk_ref, dv_ref):
  """dK and dV of one key block of one key/value head: a sum over its G query heads and over the
  query blocks that see the block. Refs: q `[G, Tp, H]`, do `[G, Tp, Dv]`, lse and delta
  `[G, Tp]`, slopes `[G, 1]`; k, dk `[bk, H]`, v, dv `[bk, Dv]`."""
  j = pl.program_id(2)
  k, v = k_ref[...], v_ref[...]
  lo, hi = query_block_range(cfg, j)

  def over_head(g, carry):
    slope = slope_ref[pl.ds(g, 1), :]

    def over_query_block(i, carry):
      dk, dv = carry
      rows = pl.ds(i * cfg.block_q, cfg.block_q)
      q, d_out = q_ref[g, rows, :], do_ref[g, rows, :]
      s, visible, capped = block_logits(cfg, q, k, i * cfg.block_q, j * cfg.block_k, slope)
      d_p = jnp.dot(d_out, v.T, preferred_element_type=jnp.float32)
      d_s, p = _score_grad(cfg, s, visible, capped, lse_ref[g, rows], delta_ref[g, rows], d_p)
      dv = dv + jnp.dot(p.T.astype(d_out.dtype), d_out, preferred_element_type=jnp.float32)
      dk = dk + jnp.dot(d_s.T.astype(q.dtype), q, preferred_element_type=jnp.float32)
      return dk, dv

    return lax.fori_loop(lo, hi, over_query_block, carry)

  zeros = (jnp.zeros(k.shape, jnp.float32), jnp.zeros(v.shape, jnp.float32))
  dk, dv = lax.fori_loop(0, cfg.groups, over_head, zeros)
  dk_ref[...] = (dk * cfg.scale).astype(dk_ref.dtype)
  dv_ref[...] = dv.astype(dv_ref.dtype)


def _dq_kernel(cfg, q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, slope_ref, dq_ref):
  """dQ of one query block of one query head: a sum over the key blocks it sees. Refs: q, dq
  `[bq, H]`, do `[bq, Dv]`, lse and delta `[bq]`, slope `[1, 1]`; k `[Sp, H]`, v `[Sp, Dv]`."""
  i = pl.program_id(2)
  q, d_out = q_ref[...], do_ref[...]
  lse, delta, slope = lse_ref[...], delta_ref[...], slope_ref[...]

  def over_key_block(j, dq):
    cols = pl.ds(j * cfg.block_k, cfg.block_k)
    k, v = k_ref[cols, :], v_ref[cols, :]
    s, visible, capped = block_logits(cfg, q, k, i * cfg.block_q, j * cfg.block_k, slope)
    d_p = jnp.dot(d_out, v.T, preferred_element_type=jnp.float32)
    d_s, _ = _score_grad(cfg, s, visible, capped, lse, delta, d_p)
    return dq + jnp.dot(d_s.astype(k.dtype), k, preferred_element_type=jnp.float32)

  (a_lo, a_hi), (lo, hi) = key_block_ranges(cfg, i)
  dq = lax.fori_loop(a_lo, a_hi, over_key_block, jnp.zeros(q.shape, jnp.float32))
  dq = lax.fori_loop(lo, hi, over_key_block, dq)
  dq_ref[...] = (dq * cfg.scale).astype(dq_ref.dtype)


def query_block_spec(block_q: int, *size: int) -> pl.BlockSpec:
  """Grid `(B, N, query blocks)`: program (b, n, i) gets rows `i*bq ..` of head n of batch b, of
  `[B, N, Tp, *size]` (q, the output, lse)."""
  return pl.BlockSpec((None, None, block_q, *size), lambda b, n, i: (b, n, i) + (0,) * len(size))


def all_keys_spec(length: int, size: int, groups: int) -> pl.BlockSpec:
  """Grid `(B, N, query blocks)`: program (b, n, i) gets every key (or value) of key/value head
  `n // groups`, of `[B, K, Sp, size]`: grouped-query attention as an index map."""
  return pl.BlockSpec((None, None, length, size), lambda b, n, i: (b, n // groups, 0, 0))


def per_head_spec(heads: int) -> pl.BlockSpec:
  """`heads` consecutive rows of an `[N, 1]` per-head array (ALiBi slopes, sinks): the program's
  own head (heads = 1, grid over query heads) or a key/value head's group (grid over K)."""
  return pl.BlockSpec((heads, 1), lambda b, h, i: (h, 0))


def backward(cfg: Config, q, k, v, d_out, lse, delta, slopes, compiler_params=None):
  """dq, dk, dv of padded arrays: q, d_out `[B, N, Tp, H|Dv]`, k, v `[B, K, Sp, H|Dv]`, lse and
  delta `[B, N, Tp]` float32, slopes `[N, 1]` float32. Returns arrays shaped like q, k, v."""
  b, n, tp, h = q.shape
  kv_heads, sp, dv_size = k.shape[1], k.shape[2], v.shape[3]
  g, bq, bk = cfg.groups, cfg.block_q, cfg.block_k
  call = lambda kernel, name, **specs: pl.pallas_call(
    functools.partial(kernel, cfg),
    name=name,
    interpret=cfg.interpret,
    compiler_params=compiler_params,
    **specs,
  )
  # dK, dV: one program per (batch, key/value head, key block). Key/value head h's query heads
  # are h*G .. h*G+G-1: one block of G along q's head axis, block index h.
  group = lambda *block: pl.BlockSpec(
    (None, g, *block), lambda b_, h_, j: (b_, h_) + (0,) * len(block)
  )
  key_block = lambda size: pl.BlockSpec((None, None, bk, size), lambda b_, h_, j: (b_, h_, j, 0))
  dk, dv = call(
    _dkdv_kernel,
    'attend_flash_dkdv',
    grid=(b, kv_heads, sp // bk),
    in_specs=[
      group(tp, h),
      key_block(h),
      key_block(dv_size),
      group(tp, dv_size),
      group(tp),
      group(tp),
      per_head_spec(g),
    ],
    out_specs=[key_block(h), key_block(dv_size)],
    out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
  )(q, k, v, d_out, lse, delta, slopes)
  # dQ: one program per (batch, query head, query block), as the forward.
  dq = call(
    _dq_kernel,
    'attend_flash_dq',
    grid=(b, n, tp // bq),
    in_specs=[
      query_block_spec(bq, h),
      all_keys_spec(sp, h, g),
      all_keys_spec(sp, dv_size, g),
      query_block_spec(bq, dv_size),
      query_block_spec(bq),
      query_block_spec(bq),
      per_head_spec(1),
    ],
    out_specs=query_block_spec(bq, h),
    out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
  )(q, k, v, d_out, lse, delta, slopes)
  return dq, dk, dv
