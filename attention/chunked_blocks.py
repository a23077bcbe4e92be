"""One score block of the chunked kernel, shared by its forward and backward passes.

`attention/chunked.py` (forward) and `attention/chunked_backward.py` (backward) both visit the
`[T, S]` score matrix as blocks of `q_block` query rows by `kv_block` key columns, and both form a
block the same way: this module holds what they share. `Static` is a call's non-array facts;
`kv_block_range` and `q_block_range` say which blocks a row block or key block needs;
`block_inputs` and `block_scores` build block (i, j)'s bias, masks and scores; `slice_axis` cuts
a block out of an array. Call the kernel through `attention.scaled_dot_product_attention`; these
pieces assume valid, padded inputs.
"""

import dataclasses

import jax
from jax import lax
import jax.numpy as jnp

from attention.biases import alibi_bias_at, relative_positions

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class Static:
  """Everything about a call that is not an array; hashable for `custom_vjp`."""

  q_len: int
  kv_len: int
  q_block: int
  kv_block: int
  is_causal: bool
  scale: float
  dropout_rate: float
  window: int = 0
  softcap: float = 0.0

  @property
  def num_q_blocks(self) -> int:
    return -(-self.q_len // self.q_block)

  @property
  def num_kv_blocks(self) -> int:
    return -(-self.kv_len // self.kv_block)

  def kv_range(self, i):
    return kv_block_range(i, **self._layout())

  def q_range(self, j):
    return q_block_range(j, **self._layout())

  def _layout(self) -> dict:
    """What decides which blocks hold visible scores: the block ranges' keywords."""
    names = ('q_block', 'kv_block', 'q_len', 'kv_len', 'is_causal', 'window')
    return {name: getattr(self, name) for name in names}


def kv_block_range(
  i,
  *,
  q_block: int,
  kv_block: int,
  q_len: int,
  kv_len: int,
  is_causal: bool = False,
  window: int = 0,
):
  """Key blocks `[first, stop)` holding a key that some real row of query block `i` sees.

  All blocks without causal masking or a window. Causal masking ends at the block of the last
  row's own position; a window starts at the block of key `i*q_block - window + 1` and ends
  `window - 1` keys past the last row (or at it, with causal masking). `i` may be traced; the
  bounds are then traced too.
  """
  num_kv_blocks = -(-kv_len // kv_block)
  if not is_causal and not window:
    return 0, num_kv_blocks
  last_row = jnp.minimum((i + 1) * q_block, q_len) - 1  # padded rows see nothing needed
  last_key = last_row + (window - 1 if window and not is_causal else 0)
  stop = jnp.minimum(num_kv_blocks, last_key // kv_block + 1)
  if not window:
    return 0, stop
  first_key = i * q_block - window + 1
  first = jnp.where(first_key < kv_len, jnp.maximum(first_key, 0) // kv_block, num_kv_blocks)
  return first, stop


def q_block_range(
  j,
  *,
  q_block: int,
  kv_block: int,
  q_len: int,
  kv_len: int,
  is_causal: bool = False,
  window: int = 0,
):
  """Query blocks `[first, stop)` holding a row that sees some real key of key block `j`: the
  backward's inner loop, the transpose of `kv_block_range`."""
  num_q_blocks = -(-q_len // q_block)
  if not is_causal and not window:
    return 0, num_q_blocks
  first_row = j * kv_block - (window - 1 if window and not is_causal else 0)
  first = jnp.where(first_row < q_len, jnp.maximum(first_row, 0) // q_block, num_q_blocks)
  if not window:
    return first, num_q_blocks
  last_key = jnp.minimum((j + 1) * kv_block, kv_len) - 1
  return first, jnp.minimum(num_q_blocks, (last_key + window - 1) // q_block + 1)


def slice_axis(x: Array | None, axis: int, start, size: int) -> Array | None:
  """`x[..., start:start+size, ...]` along `axis`; broadcast (size-1) axes are kept as they are."""
  if x is None or x.shape[axis] == 1:
    return x
  return lax.dynamic_slice_in_dim(x, start, size, axis)


def block_inputs(st: Static, i, j, bias, mask, rng, lead_shape, slopes=None):
  """Bias (with ALiBi), validity mask and dropout keep-mask of score block (query block i, key
  block j). `slopes`: ALiBi slopes rank-aligned as `[..., 1, 1]`, or None."""
  bq, bk = st.q_block, st.kv_block
  bias_ij = slice_axis(slice_axis(bias, -2, i * bq, bq), -1, j * bk, bk)
  valid = slice_axis(slice_axis(mask, -2, i * bq, bq), -1, j * bk, bk)
  k_pos = j * bk + jnp.arange(bk)  # [bk]
  q_pos = i * bq + jnp.arange(bq)  # [bq]
  if st.is_causal:
    causal = k_pos[None, :] <= q_pos[:, None]  # [bq, bk]
    valid = causal if valid is None else valid & causal
  if st.window:
    near = jnp.abs(q_pos[:, None] - k_pos[None, :]) < st.window  # [bq, bk]
    valid = near if valid is None else valid & near
  if slopes is not None:
    # slopes[..., 0, 0]: the per-head slopes without their rank alignment, for alibi_bias_at.
    alibi = alibi_bias_at(slopes[..., 0, 0], relative_positions(q_pos, k_pos))  # [..., bq, bk]
    bias_ij = alibi if bias_ij is None else bias_ij.astype(jnp.float32) + alibi
  if st.num_kv_blocks * bk != st.kv_len:  # keys padded up to whole blocks
    real = k_pos < st.kv_len  # [bk]
    valid = real if valid is None else valid & real
  keep = None
  if st.dropout_rate > 0.0:
    block_rng = jax.random.fold_in(jax.random.fold_in(rng, i), j)
    keep = jax.random.bernoulli(block_rng, 1.0 - st.dropout_rate, (*lead_shape, bq, bk))
  return bias_ij, valid, keep


def block_scores(st: Static, q_i, k_j, bias_ij, valid):
  """Soft-capped, biased, masked scores of one block from pre-scaled queries, `[..., bq, bk]` in
  float32, and `tanh(raw / softcap)` (None without soft-capping), which the backward needs.

  Masked entries are -inf. The caller scales q once per call, which saves a multiply per score
  compared with scaling every score block. The backward passes keys first (with transposed bias
  and mask) to get the block transposed, `[..., bk, bq]`.
  """
  s = jnp.einsum('...td,...sd->...ts', q_i, k_j, preferred_element_type=jnp.float32)
  capped = None
  if st.softcap:
    capped = jnp.tanh(s / st.softcap)
    s = st.softcap * capped
  if bias_ij is not None:
    s = s + bias_ij.astype(jnp.float32)
  if valid is not None:
    s = jnp.where(valid, s, -jnp.inf)
  return s, capped
