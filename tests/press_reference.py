"""NumPy references of the KV-cache presses, for tests/test_presses.py: written from NVIDIA kvpress
0.5's torch code (kvpress/presses/*_press.py) and the papers, not from attention/presses.py.

Each score takes one layer's `queries [B, N, S, H]` (rotated), `keys [B, K, S, H]` (rotated),
`values [B, K, S, Dv]`, the layer's query `scale` (kvpress: `1/sqrt(H)`) and returns `[B, K, S]`,
higher = keep, computed in float64. The budget rules return the kept set as a boolean `[B, K, S]`.
Where kvpress leaves ties to torch.topk (whose order is unspecified), these keep the lower
position, which is what attention/presses.py promises.
"""

import numpy as np


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
  """A softmax that takes -inf (masked) entries."""
  e = np.exp(x - np.max(x, axis=axis, keepdims=True))
  return e / e.sum(axis=axis, keepdims=True)


def repeat_kv(x: np.ndarray, groups: int) -> np.ndarray:
  """transformers' repeat_kv: query head n reads key/value head `n // groups`."""
  return np.repeat(np.asarray(x, np.float64), groups, axis=1)


def group_mean(scores: np.ndarray, kv_heads: int) -> np.ndarray:
  """`[B, N, S] -> [B, K, S]` as kvpress's `view(bsz, K, groups, S).mean(2)`."""
  b, n, s = scores.shape
  return scores.reshape(b, kv_heads, n // kv_heads, s).mean(axis=2)


def rotation_matrices(positions, dim: int, base: float, layout: str) -> np.ndarray:
  """RoPE at each position as a matrix, `[T, H, H]`, built as kvpress's expected attention
  builds it: `R = cos * I + sin * P`, cos and sin as transformers' `rotary_emb` gives them (each
  pair's angle on both of its features) and P the quarter turn of each pair.

  'halves' pairs feature i with i + H/2: `rotate_half(x) = (-x2, x1)`, so `P[i + H/2, i] = 1`
  and `P[i, i + H/2] = -1` (kvpress's P), and cos/sin are `cat(freqs, freqs)`. 'pairs' pairs
  2i with 2i+1: `(x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos)`, so `P[2i+1, 2i] = 1` and
  `P[2i, 2i+1] = -1`, and each angle is repeated side by side.
  """
  half = dim // 2
  inv_freq = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)  # [H/2]
  freqs = np.outer(np.asarray(positions, np.float64), inv_freq)  # [T, H/2]
  turn = np.zeros((dim, dim))
  if layout == 'halves':
    angles = np.concatenate([freqs, freqs], axis=-1)
    turn[half:, :half], turn[:half, half:] = np.eye(half), -np.eye(half)
  else:
    angles = np.repeat(freqs, 2, axis=-1)
    turn[np.arange(1, dim, 2), np.arange(0, dim, 2)] = 1.0
    turn[np.arange(0, dim, 2), np.arange(1, dim, 2)] = -1.0
  # kvpress: cos.unsqueeze(1) * Id + sin.unsqueeze(1) * P (column j scaled by angle j).
  return np.cos(angles)[:, None, :] * np.eye(dim) + np.sin(angles)[:, None, :] * turn


def rotate(x: np.ndarray, positions, base: float, layout: str) -> np.ndarray:
  """`x [..., T, H]` rotated at `positions [T]`: `R_t @ x_t`."""
  rotations = rotation_matrices(positions, x.shape[-1], base, layout)
  return np.einsum('tij,...tj->...ti', rotations, x)


def window_attention(queries, keys, scale: float, window: int) -> np.ndarray:
  """kvpress's `SnapKVPress.compute_window_attention`: the last `window` queries' causal weights
  over the keys before the window, `[B, N, window, S - window]`."""
  n, s = queries.shape[1], keys.shape[2]
  q = np.asarray(queries, np.float64)[:, :, -window:]
  logits = q @ repeat_kv(keys, n // keys.shape[1]).swapaxes(2, 3) * scale
  mask = np.triu(np.full((window, s), -np.inf), k=s - window + 1)
  return softmax(logits + mask)[..., :-window]


def streaming_llm(keys, *, ratio: float, sink: int) -> np.ndarray:
  s = keys.shape[2]
  pruned = s - int(s * (1 - ratio))
  scores = np.ones(keys.shape[:-1])
  scores[:, :, sink : sink + pruned] = 0
  return scores


def knorm(keys) -> np.ndarray:
  return -np.linalg.norm(np.asarray(keys, np.float64), axis=-1)


def snapkv(queries, keys, *, scale: float, window: int, kernel: int) -> np.ndarray:
  """Window weights averaged over the window's queries, torch's avg_pool1d (zero padding counted
  in the mean), the query heads of a key/value head averaged, the window padded as max + 1."""
  weights = window_attention(queries, keys, scale, window).mean(axis=-2)  # [B, N, L]
  pad, length = kernel // 2, weights.shape[-1]
  padded = np.pad(weights, ((0, 0), (0, 0), (pad, pad)))
  pooled = sum(padded[..., i : i + length] for i in range(kernel)) / kernel
  scores = group_mean(pooled, keys.shape[1])
  return np.pad(scores, ((0, 0), (0, 0), (0, window)), constant_values=scores.max() + 1)


def tova(queries, keys, *, scale: float) -> np.ndarray:
  """The last query's weights averaged over all query heads, repeated for every key/value head;
  the last position padded as max + 1."""
  weights = window_attention(queries, keys, scale, 1).mean(axis=1)  # [B, 1, S - 1]
  scores = np.tile(weights, (1, keys.shape[1], 1))
  return np.pad(scores, ((0, 0), (0, 0), (0, 1)), constant_values=scores.max() + 1)


def observed_attention(queries, keys, *, scale: float) -> np.ndarray:
  """The eager causal weights summed over queries, over the number of queries that see each key."""
  n, s = queries.shape[1], keys.shape[2]
  logits = np.asarray(queries, np.float64) @ repeat_kv(keys, n // keys.shape[1]).swapaxes(2, 3)
  causal = np.tril(np.ones((s, s), bool))
  weights = softmax(np.where(causal, logits * scale, -np.inf))  # [B, N, S, S]
  return group_mean(weights.sum(axis=2) / np.arange(s, 0, -1), keys.shape[1])


def expected_attention(
  queries,
  keys,
  values,
  *,
  scale: float,
  rope: tuple[float, str] | None,
  future: int,
  sink: int,
  covariance: bool = True,
  value_norm: bool = True,
  epsilon: float = 0.0,
) -> np.ndarray:
  """ExpectedAttentionPress: the pre-rope queries' mean and covariance past the sink, the mean
  rotation over the next `future` positions applied (`mu R^T`, `R cov R^T`), then
  `softmax(k.mu * scale + k.cov.k * scale^2 / 2)` (kvpress: `/sqrt(d)` and `/d/2`), the group's
  query heads averaged, times `||v||`, the sink padded in front as max + 1."""
  b, n, s, h = queries.shape
  kv = keys.shape[1]
  q = np.asarray(queries, np.float64)
  if rope is not None:  # R_t orthogonal: the pre-rope query is R_t^T q_t
    q = np.einsum('tji,bntj->bnti', rotation_matrices(np.arange(s), h, *rope), q)
  q = q[:, :, sink:]
  mu = q.mean(axis=2)  # [B, N, H]
  centred = q - mu[:, :, None]
  cov = np.einsum('bnsi,bnsj->bnij', centred, centred) / (s - sink)
  if rope is not None:
    r = rotation_matrices(np.arange(s, s + future), h, *rope).mean(axis=0)
    mu, cov = mu @ r.T, r @ cov @ r.T
  k = repeat_kv(keys[:, :, sink:], n // kv)
  logits = np.einsum('bnsh,bnh->bns', k, mu) * scale
  if covariance:
    logits = logits + np.einsum('bnsi,bnij,bnsj->bns', k, cov, k) * scale**2 / 2
  scores = group_mean(softmax(logits), kv)
  if value_norm:
    scores = (scores + epsilon) * np.linalg.norm(
      np.asarray(values, np.float64)[:, :, sink:], axis=-1
    )
  return np.pad(scores, ((0, 0), (0, 0), (sink, 0)), constant_values=scores.max() + 1)


def _mask_of(indices: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
  """A boolean array of `shape` True at `indices` along the last axis."""
  mask = np.zeros(shape, bool)
  np.put_along_axis(mask, indices, True, axis=-1)
  return mask


def entries_mask(entries, shape: tuple[int, ...]) -> np.ndarray:
  """Kept entries (flat head-major indices into `[K * S]`, any shape `[B, ...]`) as a boolean
  `shape` `[B, K, S]`: what `kv_cache.evict` takes, as the masks here."""
  entries = np.asarray(entries).reshape(shape[0], -1)
  mask = np.zeros((shape[0], int(np.prod(shape[1:]))), bool)
  np.put_along_axis(mask, entries, True, axis=1)
  return mask.reshape(shape)


def budget_kept(scores, count: int) -> np.ndarray:
  """`scores.topk(count)` of ScorerPress.compress (PyramidKVPress's with its layer budget): each
  head keeps its `count` best positions, a tie keeping the lower position."""
  order = np.argsort(-np.asarray(scores), axis=-1, kind='stable')
  return _mask_of(order[..., :count], np.shape(scores))


def scorer_kept(scores, ratio: float) -> np.ndarray:
  """ScorerPress's budget: `int(S * (1 - ratio))` positions per head."""
  return budget_kept(scores, int(np.shape(scores)[-1] * (1 - ratio)))


def adakv_kept(scores, ratio: float, alpha: float) -> np.ndarray:
  """AdaKVPress.compress: each head's best `int(n_kept * alpha)` raised to the dtype's max, then
  the `K * (S - n_kept)` lowest entries over all the layer's heads pruned (on a tie the later
  entry, head-major, is pruned, so the lower one is kept)."""
  scores = np.array(scores)
  b, k, s = scores.shape
  n_kept = int(s * (1 - ratio))
  n_safe = int(n_kept * alpha)
  safe = np.argsort(-scores, axis=-1, kind='stable')[..., :n_safe]
  np.put_along_axis(scores, safe, np.finfo(scores.dtype).max, axis=-1)
  flat = scores.reshape(b, k * s)
  pruned = k * (s - n_kept)
  kept = np.ones((b, k * s), bool)
  for row in range(b):
    order = np.lexsort((-np.arange(k * s), flat[row]))  # ascending score, then later entry
    kept[row, order[:pruned]] = False
  return kept.reshape(b, k, s)


def pyramid_budget(q_len: int, ratio: float, layer: int, num_layers: int, window: int, beta: int):
  """PyramidKVPress.get_layer_budget: `max_capacity_prompt = window + q_len (1 - ratio)`, the
  budgets falling linearly from max_num (layer 0) to min_num (the last layer), whose mean is
  `q_len (1 - ratio)`; SnapKV's budget when the pyramid does not fit."""
  capacity = window + q_len * (1 - ratio)
  min_num = (capacity - window) / beta
  max_num = (capacity - window) * 2 - min_num
  if max_num >= q_len - window:
    max_num = q_len - window
    min_num = (capacity - window) * 2 - max_num
  # One layer: kvpress divides by zero below; Attend keeps SnapKV's budget, the pyramid's mean.
  if num_layers == 1 or not (q_len >= max_num >= min_num >= window):
    return round(q_len * (1 - ratio))
  return round(max_num - layer * (max_num - min_num) / (num_layers - 1))


def masked_attention(q, keys, values, visible, scale: float) -> np.ndarray:
  """Softmax attention of `q [B, N, T, H]` over `keys [B, K, P, H]` where `visible [B, N, T, P]`."""
  n = q.shape[1]
  logits = np.asarray(q, np.float64) @ repeat_kv(keys, n // keys.shape[1]).swapaxes(2, 3)
  weights = softmax(np.where(visible, logits * scale, -np.inf))
  return weights @ repeat_kv(values, n // keys.shape[1])
