"""DeepSeek Sparse Attention's selection (DeepSeek-V3.2): a lightning indexer picks each query's
keys, and the attention then reads those keys only.

The indexer is a small, cheap attention of its own: H heads of queries `q [..., T, H, D]`, one
key per position `k [..., S, D]` shared by the heads, and per-query head weights
`w [..., T, H]`. Its score of key s for query t is

    index[t, s] = sum_h w[t, h] * relu(scale * q[t, h] . k[s])

(`index_scores`), and each query keeps the `k` visible keys it scores highest (`top_k_mask`).
Visibility (causality, padding) is applied before the choice, as transformers' DeepSeek-V3.2
does by setting invisible scores to -inf: a query that sees fewer than `k` keys keeps them all.

Shapes: leading dims (batch) are free; masks broadcast to `[..., T, S]`, True = may attend.
"""

import jax
import jax.numpy as jnp

Array = jax.Array


def index_scores(q: Array, k: Array, w: Array, *, scale: float | None = None) -> Array:
  """The lightning indexer's scores.

  Args:
    q: the indexer's queries `[..., T, H, D]`.
    k: its keys `[..., S, D]`, one per position, shared by the H heads.
    w: each query's head weights `[..., T, H]` (may be negative).
    scale: the dot products' multiplier; None = `D^-1/2`.

  Returns:
    `[..., T, S]`, `sum_h w[t, h] relu(scale q[t, h] . k[s])`, in the inputs' common dtype.
  """
  if q.shape[-1] != k.shape[-1] or q.shape[-2] != w.shape[-1] or q.shape[-3] != w.shape[-2]:
    raise ValueError(
      f'index_scores: q{tuple(q.shape)} [..., T, H, D], k{tuple(k.shape)} [..., S, D] and '
      f'w{tuple(w.shape)} [..., T, H] do not fit together.'
    )
  scale = q.shape[-1] ** -0.5 if scale is None else scale
  dots = jnp.einsum('...thd,...sd->...ths', q, k) * scale  # [..., T, H, S]
  return jnp.einsum('...th,...ths->...ts', w, jax.nn.relu(dots))  # [..., T, S]


def top_k_mask(scores: Array, k: int, mask: Array | None = None) -> Array:
  """Each query's `k` highest-scoring visible keys.

  Args:
    scores: `[..., T, S]`, e.g. `index_scores`.
    k: keys kept per query (> 0); a query that sees fewer keeps every one it sees.
    mask: boolean visibility, broadcastable to `[..., T, S]`; True = may attend. Invisible keys
      are never chosen.

  Returns:
    Boolean `[..., T, S]`, True at the chosen keys (at most `min(k, S)` per query).
  """
  if isinstance(k, bool) or not isinstance(k, int) or k < 1:
    raise ValueError(f'top_k_mask: k must be a positive integer; got {k!r}.')
  s = scores.shape[-1]
  visible = jnp.ones(scores.shape, bool) if mask is None else jnp.broadcast_to(mask, scores.shape)
  wide = scores.astype(jnp.promote_types(scores.dtype, jnp.float32))
  ranked = jnp.where(visible, wide, -jnp.inf)  # invisible keys last, as transformers' -inf
  # Ties are broken as `jax.lax.top_k` breaks them: the lower key index first. (torch.topk leaves
  # the order of ties unspecified, so the two can differ only where the k-th and the (k+1)-th
  # visible scores are equal.)
  _, chosen = jax.lax.top_k(ranked, min(k, s))  # [..., T, k]
  picked = jnp.zeros(scores.shape, bool)
  picked = jnp.put_along_axis(picked, chosen, True, axis=-1, inplace=False)  # [..., T, S]
  # With fewer than k visible keys, top_k also returned invisible ones: drop them.
  return picked & visible
