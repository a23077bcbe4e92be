"""Boolean attention masks: `True` = the query may attend to the key.

Masks broadcast against scores `[..., T, S]`. Combine them with `combine_masks`.
"""

import jax
import jax.numpy as jnp

Array = jax.Array


def causal_mask(q_len: int, kv_len: int | None = None, offset: int | Array = 0) -> Array:
  """Lower-triangular mask: query `i` sees keys `0 .. i + offset`.

  Args:
    q_len: number of queries T.
    kv_len: number of keys S; default T.
    offset: absolute position of the first query. In incremental decoding with a cache of S slots,
      the query of step `t` uses `causal_mask(1, S, offset=t)`. May be a traced integer.

  Returns:
    Mask `[T, S]`.
  """
  kv_len = q_len if kv_len is None else kv_len
  q_pos = jnp.arange(q_len)[:, None] + offset  # [T, 1]
  k_pos = jnp.arange(kv_len)[None, :]  # [1, S]
  return k_pos <= q_pos


def sliding_window_mask(
  q_len: int, kv_len: int | None = None, *, window: int, offset: int | Array = 0
) -> Array:
  """Band mask of local attention: query `i` sees key `j` iff `|i + offset - j| < window`.

  Bidirectional; AND it with `causal_mask` for the causal window (keys `i - window + 1 .. i`).

  Args:
    q_len: number of queries T.
    kv_len: number of keys S; default T.
    window: keys within `window - 1` positions either side are seen, so a row sees at most
      `2 * window - 1` keys (`window` with causal masking). At least 1.
    offset: absolute position of the first query, as in `causal_mask`. May be a traced integer.

  Returns:
    Mask `[T, S]`.
  """
  if window < 1:
    raise ValueError(f'sliding_window_mask: window must be >= 1, got {window}.')
  kv_len = q_len if kv_len is None else kv_len
  q_pos = jnp.arange(q_len)[:, None] + offset  # [T, 1]
  k_pos = jnp.arange(kv_len)[None, :]  # [1, S]
  return jnp.abs(q_pos - k_pos) < window


def padding_mask(lengths: Array, kv_len: int) -> Array:
  """Key mask from sequence lengths: key `j` of example `b` is real iff `j < lengths[b]`.

  Args:
    lengths: integer lengths `[B]`.
    kv_len: padded key length S.

  Returns:
    Mask `[B, 1, S]`, which broadcasts over queries; add a heads axis with `mask[:, None]`.
  """
  lengths = jnp.asarray(lengths)
  if lengths.ndim != 1:
    raise ValueError(f'padding_mask: lengths must be [B], got shape {tuple(lengths.shape)}.')
  return (jnp.arange(kv_len)[None, :] < lengths[:, None])[:, None, :]  # [B, 1, S]


def padding_mask_from_ids(ids: Array, pad_id: int = 0) -> Array:
  """Key mask from token ids: a key is real iff its id is not `pad_id`.

  Args:
    ids: token ids `[B, S]`.
    pad_id: the padding id (Attend's vocabularies use 0).

  Returns:
    Mask `[B, 1, S]`, which broadcasts over queries; add a heads axis with `mask[:, None]`.
  """
  ids = jnp.asarray(ids)
  if ids.ndim != 2:
    raise ValueError(f'padding_mask_from_ids: ids must be [B, S], got shape {tuple(ids.shape)}.')
  return (ids != pad_id)[:, None, :]


def combine_masks(*masks: Array | None) -> Array | None:
  """Logical AND of the given masks (None entries are skipped); None if none is given."""
  present = [m for m in masks if m is not None]
  if not present:
    return None
  shapes = [tuple(m.shape) for m in present]
  try:
    jnp.broadcast_shapes(*shapes)
  except ValueError:
    raise ValueError(f'combine_masks: mask shapes {shapes} do not broadcast together.') from None
  out = present[0].astype(bool)
  for m in present[1:]:
    out = jnp.logical_and(out, m)
  return out
