"""Backward pass of the chunked kernel (`attention/chunked.py`): recomputes each score block.

Given the saved row log-sum-exp, a score block's weights are `exp(s - lse)` again, so the
backward needs no `[T, S]` array either; it forms each block with the forward's own pieces
(`attention/chunked_blocks.py`). It visits each key block j (outer loop) with the query
blocks that can see it (inner loop): all of them, from the diagonal on with causal masking, and
only those within the window with one, so a window's backward is O(S·W) like its forward.

The variants' gradients:
- soft-capping: dS with respect to the capped scores (what the bias gets) times `1 - tanh²`
  is dS with respect to the raw scores (what q and k get);
- a sink only adds a slot to the normaliser, so dS keeps its form `P (dP - delta)`, and the
  sink's own gradient is `-Σ_rows exp(sink - lse) * delta` (delta = rowsum(dO * O));
- ALiBi slopes and the mask get no gradient.
"""

import jax
from jax import lax
import jax.numpy as jnp

from attention.chunked_blocks import Static, block_inputs, block_scores, slice_axis

Array = jax.Array


def _block_grads(st, i, j, q_i, k_j, v_j, do_i, lse_i, delta_i, bias, mask, rng, lead, slopes):
  """Recomputes block (i, j) transposed, `[..., bk, bq]`: returns (weights as used, after dropout;
  dS = ∂loss/∂(biased scores); dS with respect to the raw scores `q·k * scale`).

  Keys lead so that the products that follow, P̃ᵀ dO into dV and dSᵀ Q into dK, contract the
  last axis of their left operand: on CPU the other orientation skips the fast matmul kernels
  and ran 2.4x slower (measured on [2048, 256] x [256, 64] blocks).
  """
  bias_ij, valid, keep = map(_transpose, block_inputs(st, i, j, bias, mask, rng, lead, slopes))
  s, capped = block_scores(st, k_j, q_i, bias_ij, valid)
  p = jnp.exp(s - lse_i[..., None, :])  # [..., bk, bq]
  dp = jnp.einsum('...sv,...tv->...st', v_j, do_i, preferred_element_type=jnp.float32)
  p_used = p
  if keep is not None:
    inv_keep = 1.0 / (1.0 - st.dropout_rate)  # P̃ = P·Z/(1-r) and dP = dP̃·Z/(1-r)
    p_used, dp = jnp.where(keep, p * inv_keep, 0.0), jnp.where(keep, dp * inv_keep, 0.0)
  ds = p * (dp - delta_i[..., None, :])
  return p_used, ds, ds if capped is None else ds * (1.0 - capped * capped)


def _transpose(x: Array | None) -> Array | None:
  """`[..., bq, bk]` -> `[..., bk, bq]`; a key-only `[bk]` becomes `[bk, 1]`."""
  if x is None:
    return None
  return x[:, None] if x.ndim == 1 else jnp.swapaxes(x, -1, -2)


def backward(st: Static, res, d_out):
  """The `custom_vjp` backward: one pass over key blocks j (outer) and the query blocks i that
  see them (inner).

  dV_j and dK_j accumulate in the inner loop's carry; dQ_i and the bias gradient are added into
  full-size buffers, which XLA updates in place. Each score block is recomputed once.

  dQ accumulates transposed, `[..., D, Tp]`, as dQ_iᵀ = K_jᵀ dS: a plain `[D, bk] x [bk, bq]`
  product. Transposing each block back to `[bq, D]` before adding it let XLA fold the transpose
  into the dot, which then contracted the first axis of dS and the last of K_jᵀ; XLA:CPU runs
  that orientation outside its fast matmul kernels, and forward+backward took 1.2-1.3x as long
  (2 cores, S=512 to 8192). One transpose at the end replaces it.
  """
  q, k, v, bias, mask, rng, sink, slopes, out, lse = res
  lead = q.shape[:-2]
  bq, bk = st.q_block, st.kv_block
  delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)  # [..., Tp]
  q_scaled = q * jnp.asarray(st.scale, q.dtype)

  def key_block(j, carry):
    dq_t, dk, dv, d_bias = carry
    k_j, v_j = slice_axis(k, -2, j * bk, bk), slice_axis(v, -2, j * bk, bk)
    # [..., D, bk], once per key block; the barrier keeps XLA from folding the transpose back
    # into the dQ product when the loop over query blocks has a single step and is inlined.
    k_j_t = lax.optimization_barrier(jnp.swapaxes(k_j, -1, -2))

    def query_block(i, inner):
      dq_t, dk_j, dv_j, d_bias = inner
      q_i, do_i = slice_axis(q_scaled, -2, i * bq, bq), slice_axis(d_out, -2, i * bq, bq)
      lse_i, delta_i = slice_axis(lse, -1, i * bq, bq), slice_axis(delta, -1, i * bq, bq)
      p_used, ds, ds_raw = _block_grads(
        st, i, j, q_i, k_j, v_j, do_i, lse_i, delta_i, bias, mask, rng, lead, slopes
      )  # [..., bk, bq]
      dv_j = dv_j + jnp.einsum(
        '...st,...tv->...sv', p_used.astype(d_out.dtype), do_i, preferred_element_type=jnp.float32
      )
      dk_j = dk_j + jnp.einsum(
        '...st,...td->...sd', ds_raw.astype(q.dtype), q_i, preferred_element_type=jnp.float32
      )
      dq_i_t = jnp.einsum(
        '...ds,...st->...dt', k_j_t, ds_raw.astype(k.dtype), preferred_element_type=jnp.float32
      )  # [..., D, bq]
      dq_t = _add_block(dq_t, dq_i_t, (-1,), (i * bq,))
      if d_bias is not None:
        d_bias = _add_block(
          d_bias, _reduce_to(jnp.swapaxes(ds, -1, -2), d_bias.shape), (-2, -1), (i * bq, j * bk)
        )
      return dq_t, dk_j, dv_j, d_bias

    zeros_j = (jnp.zeros(k_j.shape, jnp.float32), jnp.zeros(v_j.shape, jnp.float32))
    first, stop = st.q_range(j)
    dq_t, dk_j, dv_j, d_bias = lax.fori_loop(first, stop, query_block, (dq_t, *zeros_j, d_bias))
    dk = lax.dynamic_update_slice_in_dim(dk, dk_j, j * bk, -2)  # q_i carries the scale
    dv = lax.dynamic_update_slice_in_dim(dv, dv_j, j * bk, -2)
    return dq_t, dk, dv, d_bias

  init = (
    jnp.zeros((*lead, q.shape[-1], q.shape[-2]), jnp.float32),  # dQᵀ: [..., D, Tp]
    jnp.zeros(k.shape, jnp.float32),
    jnp.zeros(v.shape, jnp.float32),
    None if bias is None else jnp.zeros(bias.shape, jnp.float32),
  )
  dq_t, dk, dv, d_bias = lax.fori_loop(0, st.num_kv_blocks, key_block, init)
  d_bias = None if bias is None else d_bias.astype(bias.dtype)
  dq = jnp.swapaxes(dq_t, -1, -2) * st.scale  # [..., Tp, D]
  return (
    dq.astype(q.dtype),
    dk.astype(k.dtype),
    dv.astype(v.dtype),
    d_bias,
    None,
    None,
    _sink_grad(sink, lse, delta),
    None,
  )


def _sink_grad(sink: Array | None, lse: Array, delta: Array) -> Array | None:
  """∂loss/∂sink for sink `[..., 1, 1]`: each row's sink weight `exp(sink - lse)` times
  `-delta`, summed over rows and over the leading dims the sink broadcasts along.

  Rows that saw nothing have lse = +inf and weight 0; padded query rows have delta = 0.
  """
  if sink is None:
    return None
  weight = jnp.exp(sink[..., 0].astype(jnp.float32) - lse)  # [..., Tp]
  per_row = -jnp.sum(weight * delta, axis=-1, keepdims=True)[..., None]  # [..., 1, 1]
  return _reduce_to(per_row, sink.shape).astype(sink.dtype)


def _reduce_to(x, shape):
  """Sums `x` over the axes along which an array of `shape` (same rank) broadcasts."""
  axes = tuple(a for a, (n, m) in enumerate(zip(shape, x.shape)) if n == 1 and m != 1)
  return jnp.sum(x, axis=axes, keepdims=True)


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
