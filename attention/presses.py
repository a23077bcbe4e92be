"""KV-cache compression ("presses"): which keys and values a decoder keeps after its prefill.

A press scores every cached position of one layer from what the prefill computed there, and the
cache then keeps the best-scored positions of each key/value head (`kv_cache.evict`), at their
original positions: the kept keys stay rotated where they were (kvpress's default). Scores are
`[B, K, S]`, higher = keep; every function here is pure and takes one layer's arrays:

- `queries` `[B, N, S, H]` as the layer scored them (rotary positions applied, not scaled),
- `keys` `[B, K, S, H]` as cached (rotated), `values` `[B, K, S, Dv]`,
- `scale`, the layer's query scale, and `rope`, its rotary `(base, layout)` or None.

`PRESSES` maps a name to a `Press`: its score, whether it forms attention weights (a kernel that
forms none cannot serve it), and how the budget is split: `'uniform'` (every head of every layer
keeps `int(S * (1 - ratio))` positions, kvpress's rule), `'pyramid'` (PyramidKV: more in lower
layers, `pyramid_budget`), `'adaptive'` (AdaKV: one ranking over a layer's heads, each head
keeping at least a share, `adaptive_entries`) or `'layer'` (KVzip's: one ranking over a layer's
heads, no floor, kvpress's count, `layer_entries`). KVzip alone reads other queries: those of a
block that repeats the context, read after it (`kvzip_scores`). The formulas follow kvpress 0.5
(NVIDIA), each press's paper cited on its function. Ties keep the lower position
(`jax.lax.top_k` order).
"""

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

from attention.positions import rotary_embedding

Array = jax.Array


def _wide(x: Array) -> jnp.dtype:
  """The dtype a press computes in: float32, or float64 for float64 inputs (`rotary_embedding`'s
  rule), so that a float64 comparison with a reference is not float32 rounding."""
  return jnp.promote_types(x.dtype, jnp.float32)


def _group_mean(scores: Array, kv_heads: int) -> Array:
  """`[B, N, S] -> [B, K, S]`: the mean over the query heads that share each key/value head."""
  b, n, s = scores.shape
  return scores.reshape(b, kv_heads, n // kv_heads, s).mean(axis=2)


def _per_query_head(queries: Array, keys: Array) -> tuple[Array, Array]:
  """Queries and keys in the dtype a press computes in, the keys repeated to every query head
  that reads them (`[B, K, S, H] -> [B, N, S, H]`)."""
  n, k = queries.shape[1], keys.shape[1]
  return queries.astype(_wide(queries)), jnp.repeat(keys.astype(_wide(keys)), n // k, axis=1)


def _causal_weights(q: Array, keys: Array, scale: float, first: int) -> Array:
  """Softmax weights `[B, N, T, first + T]` of the queries `q [B, N, T, H]` at positions
  `first .. first + T - 1` over the keys up to their own (`keys [B, N, >= first + T, H]`, one
  per query head)."""
  t = q.shape[2]
  logits = jnp.einsum('bnth,bnsh->bnts', q, keys[:, :, : first + t]) * scale
  visible = jnp.arange(first + t)[None, :] <= (first + jnp.arange(t))[:, None]
  return jax.nn.softmax(jnp.where(visible, logits, -jnp.inf), axis=-1)


def _window_weights(queries: Array, keys: Array, scale: float, window: int) -> Array:
  """Softmax weights of the last `window` queries over every key, causal, `[B, N, w, S]`."""
  s = keys.shape[-2]
  q, keys = _per_query_head(queries, keys)
  return _causal_weights(q[:, :, s - window :], keys, scale, s - window)


def _keep_last(scores: Array, last: int) -> Array:
  """`scores [B, K, S']` padded with `last` columns scored above every other: kept for good."""
  return jnp.pad(scores, ((0, 0), (0, 0), (0, last)), constant_values=jnp.max(scores) + 1)


def random_scores(queries, keys, values, *, seed: int = 0, layer: int = 0, **unused) -> Array:
  """Uniform random scores, a baseline: one key per `(seed, layer)`."""
  rng = jax.random.fold_in(jax.random.key(seed), layer)
  return jax.random.uniform(rng, keys.shape[:-1])


def streaming_scores(queries, keys, values, *, ratio: float, sink: int = 4, **unused) -> Array:
  """StreamingLLM (Xiao et al. 2023): the first `sink` positions and the latest ones are kept,
  the pruned ones are those right after the sink."""
  s = keys.shape[-2]
  pruned = s - int(s * (1 - ratio))
  position = jnp.arange(s)
  dropped = (position >= sink) & (position < sink + pruned)
  return jnp.broadcast_to(jnp.where(dropped, 0.0, 1.0), keys.shape[:-1])


def knorm_scores(queries, keys, values, **unused) -> Array:
  """Knorm (Devoto et al. 2024): keys with a small L2 norm draw more attention; keep them."""
  return -jnp.linalg.norm(keys.astype(_wide(keys)), axis=-1)


def snapkv_scores(
  queries, keys, values, *, scale: float, window: int = 64, kernel: int = 5, **unused
) -> Array:
  """SnapKV (Li et al. 2024): the mean weight the last `window` queries give each earlier key,
  smoothed by an average pool of `kernel` positions (zeros past the ends count in the mean, as
  torch's avg_pool1d), averaged over a key/value head's query heads; the window is kept."""
  s = keys.shape[-2]
  if s <= window:
    raise ValueError(f'snapkv: the context ({s} tokens) must be longer than its window ({window}).')
  weights = _window_weights(queries, keys, scale, window)[..., : s - window].mean(axis=2)
  pad = kernel // 2
  padded = jnp.pad(weights, ((0, 0), (0, 0), (pad, pad)))
  pooled = jax.lax.reduce_window(padded, 0.0, jax.lax.add, (1, 1, kernel), (1, 1, 1), 'VALID')
  return _keep_last(_group_mean(pooled / kernel, keys.shape[1]), window)


def tova_scores(queries, keys, values, *, scale: float, **unused) -> Array:
  """TOVA (Oren et al. 2024): the last query's weights, averaged over every query head, one
  ranking for all key/value heads; the last position is kept."""
  s = keys.shape[-2]
  weights = _window_weights(queries, keys, scale, 1)[:, :, 0, : s - 1].mean(axis=1)  # [B, S-1]
  return _keep_last(jnp.broadcast_to(weights[:, None], (*keys.shape[:2], s - 1)), 1)


def _drawn(queries: Array, keys: Array, scale: float, reduce: str, block: int) -> Array:
  """The weight each key draws from the queries, `[B, N, S]`, reduced over them by `reduce`
  ('sum' or 'max'). `queries [B, N, T, H]` are the last T positions of `keys [B, K, S, H]`'s
  sequence, each seeing the keys up to its own (causal softmax). Formed `block` queries at a
  time, each block over the keys it can see: about half of the whole square's work, and a
  block's weights stay in cache (SmolLM2 at 2,048 tokens on CPU: observed attention 2.3x and
  KVzip 1.2x faster than over the whole square)."""
  t, s = queries.shape[2], keys.shape[2]
  q, keys = _per_query_head(queries, keys)
  drawn = jnp.zeros((*q.shape[:2], s), q.dtype)
  for start in range(0, t, block):
    end = min(start + block, t)
    seen = s - t + end  # the keys the block's last query sees
    weights = _causal_weights(q[:, :, start:end], keys, scale, s - t + start)  # [.., :seen]
    if reduce == 'sum':  # as a product with ones: XLA:CPU sums a non-minor axis 10x slower
      part = jnp.einsum('bnts,t->bns', weights, jnp.ones(end - start, weights.dtype))
      drawn = drawn.at[..., :seen].add(part)
    else:
      drawn = drawn.at[..., :seen].max(weights.max(axis=2))
  return drawn


def observed_scores(queries, keys, values, *, scale: float, block: int = 128, **unused) -> Array:
  """Observed attention (H2O-like, Zhang et al. 2023): the weight each key draws from every
  query, divided by the number of queries that see it, averaged over a head's query heads
  (formed `block` queries at a time)."""
  s = keys.shape[-2]
  drawn = _drawn(queries, keys, scale, 'sum', block)
  return _group_mean(drawn / jnp.arange(s, 0, -1), keys.shape[1])


def expected_scores(
  queries,
  keys,
  values,
  *,
  scale: float,
  rope: tuple[float, str] | None,
  future: int = 512,
  sink: int = 4,
  covariance: bool = True,
  value_norm: bool = True,
  epsilon: float = 0.0,
  **unused,
) -> Array:
  """Expected attention (Devoto et al. 2025): the softmax, over keys, of what queries at the next
  `future` positions are expected to score, from the mean and covariance of the context's
  queries before rotation (past the first `sink`), rotated by the mean rotation over those
  positions: `k.mu * scale + k.Sigma.k * scale**2 / 2`, a head's query heads averaged, times the
  value's norm. The first `sink` positions are kept."""
  s, h = keys.shape[-2], keys.shape[-1]
  if s <= sink:
    raise ValueError(f'expected_attention: the context ({s} tokens) must exceed sink={sink}.')
  q = queries.astype(_wide(queries))
  if rope is not None:  # back to the queries before rotation
    q = rotary_embedding(q, -jnp.arange(s), base=rope[0], layout=rope[1])
  q = q[:, :, sink:]
  mean = q.mean(axis=2)  # [B, N, H]
  # The mean rotation R over the future positions, as a matrix: row i is where feature i goes.
  rotation = jnp.eye(h, dtype=q.dtype)
  if rope is not None:
    positions = jnp.arange(s, s + future)
    rotation = rotary_embedding(
      jnp.broadcast_to(rotation, (future, h, h)), positions[:, None], base=rope[0], layout=rope[1]
    )
    rotation = rotation.mean(axis=0)  # [H, H]: x @ rotation = mean of rotary(x)
  mean = mean @ rotation
  n, kv = queries.shape[1], keys.shape[1]
  k = jnp.repeat(keys[:, :, sink:].astype(q.dtype), n // kv, axis=1)  # [B, N, S', H]
  logits = jnp.einsum('bnsh,bnh->bns', k, mean) * scale
  if covariance:
    centred = q - q.mean(axis=2, keepdims=True)
    cov = jnp.einsum('bnsi,bnsj->bnij', centred, centred) / q.shape[2]
    cov = rotation.T @ cov @ rotation
    logits = logits + jnp.einsum('bnsi,bnij,bnsj->bns', k, cov, k) * scale**2 / 2
  scores = _group_mean(jax.nn.softmax(logits, axis=-1), kv)
  if value_norm:
    scores = (scores + epsilon) * jnp.linalg.norm(values[:, :, sink:].astype(q.dtype), axis=-1)
  return jnp.pad(scores, ((0, 0), (0, 0), (sink, 0)), constant_values=jnp.max(scores) + 1)


def kvzip_scores(
  queries,
  keys,
  values,
  *,
  scale: float,
  context: int,
  prefix: int = 0,
  sink: int = 4,
  block: int = 128,
  **unused,
) -> Array:
  """KVzip (Kim et al. 2025): how much the model attends to each context pair while it repeats
  the context. `queries [B, N, R, H]` are those of a repeat block read right after the context
  (a request to repeat it, then the context's text from `prefix` on, the chat template's own
  opening before it left out), `keys [B, K, context + R, H]` the context's then the block's.
  Each repeating query's softmax runs over the first `min(sink, prefix)` keys, the context's from
  `prefix` and the block's own (causal); a pair's score is the largest weight any query of its
  key/value head gives it (formed `block` queries at a time). The first `sink` positions score 1
  and the rest of the opening 0, as kvpress scores them."""
  r, n, kv = queries.shape[2], queries.shape[1], keys.shape[1]
  first = min(sink, prefix)
  chosen = jnp.concatenate(
    [keys[:, :, :first], keys[:, :, prefix:context], keys[:, :, context : context + r]], axis=2
  )
  drawn = _drawn(queries, chosen, scale, 'max', block)[..., first : first + context - prefix]
  drawn = drawn.reshape(drawn.shape[0], kv, n // kv, -1).max(axis=2)
  opening = jnp.where(jnp.arange(prefix) < sink, 1.0, 0.0).astype(drawn.dtype)
  return jnp.concatenate([jnp.broadcast_to(opening, (*drawn.shape[:2], prefix)), drawn], axis=2)


def pyramid_budget(
  length: int, ratio: float, layer: int, num_layers: int, *, window: int = 64, beta: int = 20
) -> int:
  """PyramidKV's (Cai et al. 2024) positions kept in `layer`: falling linearly from the first
  layer to the last, the mean over layers `length * (1 - ratio)` (kvpress's form of
  KVCache-Factory's rule); a context too short for the pyramid, or a single layer (where
  kvpress divides by zero), keeps the uniform budget."""
  if beta < 1:
    raise ValueError(f'pyramidkv: beta must be at least 1, got {beta}.')
  top = window + length * (1 - ratio)
  low = (top - window) / beta
  high = (top - window) * 2 - low
  if high >= length - window:
    high = length - window
    low = (top - window) * 2 - high
  if num_layers == 1 or not length >= high >= low >= window:
    return round(length * (1 - ratio))
  return round(high - layer * (high - low) / (num_layers - 1))


def top_positions(scores: Array, count: int) -> Array:
  """The `count` best positions of each head, `[B, K, count]` in increasing order."""
  return jnp.sort(jax.lax.top_k(scores, count)[1], axis=-1)


def adaptive_entries(scores: Array, count: int, floor: float = 0.2) -> Array:
  """AdaKV (Feng et al. 2024): a layer keeps `K * count` entries ranked over all its heads at
  once, each head at least its best `int(count * floor)`. Returns the kept entries as indices
  into the layer's `[K * S]` (head-major) flattened cache, `[B, K * count]`, increasing."""
  b, k, s = scores.shape
  if int(count * floor):
    safe = jax.lax.top_k(scores, int(count * floor))[1]  # [B, K, count * floor]
    top = jnp.finfo(scores.dtype).max
    scores = jax.vmap(jax.vmap(lambda row, idx: row.at[idx].set(top)))(scores, safe)
  return _ranked_over_heads(scores, k * count)


def layer_entries(scores: Array, ratio: float) -> Array:
  """KVzip's budget, as kvpress's `KVzipPress(layerwise=True)` counts it: a layer drops its
  `int(K * S * ratio)` lowest entries ranked over all its heads at once (so it keeps up to K - 1
  more than K x the per-head budget). Indices into the layer's `[K * S]` cache, increasing."""
  b, k, s = scores.shape
  kept_count(s, ratio)  # the ratio's check
  return _ranked_over_heads(scores, k * s - int(k * s * ratio))


def _ranked_over_heads(scores: Array, count: int) -> Array:
  """The `count` best entries of a layer's `[B, K, S]` scores ranked over all its heads, as
  indices into its head-major `[K * S]` cache, `[B, count]` increasing."""
  b, k, s = scores.shape
  return jnp.sort(jax.lax.top_k(scores.reshape(b, k * s), count)[1], axis=-1)


@dataclasses.dataclass(frozen=True)
class Press:
  """A registered press: what an entry point resolves a name to (`get_press`), passed below.

  Attributes:
    name: its name in `PRESSES`, as the flags and the refusals spell it.
    score: `(queries, keys, values, *, scale, rope, ratio, layer, **settings) -> [B, K, S]`.
    weights: whether it forms attention weights from the queries (softmax attention only).
    repeat: whether it reads the queries of a block that repeats the context (KVzip), read on
      top of the context's cache, where the others read the context's own.
    queries: whether it reads the prompt's queries at all (not: it scores keys and values
      alone, so it can also compress while decoding, `compression.press_again`).
    budget: `'uniform'`, `'pyramid'`, `'adaptive'` or `'layer'` (see the module docstring).
    settings: its options and their defaults, each a keyword of `score`.
  """

  name: str
  score: Callable[..., Array]
  weights: bool = False
  repeat: bool = False
  queries: bool = True
  budget: str = 'uniform'
  settings: tuple[tuple[str, Any], ...] = ()

  def options(self, **settings) -> dict[str, Any]:
    """Its settings' defaults overridden by `settings`: the keywords `score` is called with."""
    return {**dict(self.settings), **settings}


_SNAPKV = (('window', 64), ('kernel', 5))  # SnapKV's settings, PyramidKV's and AdaKV's too
_PYRAMIDKV, _ADAKV = (*_SNAPKV, ('beta', 20)), (*_SNAPKV, ('floor', 0.2))
_EXPECTED, _SINK = (('future', 512), ('sink', 4), ('covariance', True)), (('sink', 4),)
PRESSES: dict[str, Press] = {
  press.name: press
  for press in (
    Press('random', random_scores, queries=False, settings=(('seed', 0),)),
    Press('streaming_llm', streaming_scores, queries=False, settings=_SINK),
    Press('knorm', knorm_scores, queries=False),
    Press('snapkv', snapkv_scores, weights=True, settings=_SNAPKV),
    Press('tova', tova_scores, weights=True),
    Press('observed_attention', observed_scores, weights=True),
    Press('expected_attention', expected_scores, settings=_EXPECTED),
    Press('pyramidkv', snapkv_scores, weights=True, budget='pyramid', settings=_PYRAMIDKV),
    # AdaKV's budgets over SnapKV's scores (Ada-SnapKV, the paper's main pairing).
    Press('adakv', snapkv_scores, weights=True, budget='adaptive', settings=_ADAKV),
    # kvpress's KVzipPress(layerwise=True): a budget per layer, ranked over all its heads (its
    # default ranks over every layer at once; a budget per layer keeps shapes fixed).
    Press('kvzip', kvzip_scores, weights=True, repeat=True, budget='layer', settings=_SINK),
  )
}


def get_press(name: str) -> Press:
  """`PRESSES[name]`; an unknown name raises ValueError listing the presses there are."""
  if name not in PRESSES:
    raise ValueError(f'Unknown press {name!r}; the presses are {", ".join(sorted(PRESSES))}.')
  return PRESSES[name]


def kept_count(length: int, ratio: float) -> int:
  """Positions each head keeps of a `length`-token context at `ratio`: kvpress's
  `int(length * (1 - ratio))`; ValueError for a ratio outside [0, 1)."""
  if not 0 <= ratio < 1:
    raise ValueError(f'press ratio must be in [0, 1), got {ratio}.')
  return int(length * (1 - ratio))
