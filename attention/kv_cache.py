"""The decoding state of the variants that read a cache of keys and values (softmax, sigmoid).

A decoder keeps every position's keys and values, or with a `window` a ring buffer of the last
`window` positions after the first `sink_tokens`, which are kept for good (StreamingLLM), so a
windowed decoder's memory does not grow with its length. `kv_step` writes new positions and lets
the layer's own variant attend over the cache by explicit positions (`window_mask`,
`cache_offsets`; with rotary positions, `kept_rotary_scores`). Shapes: keys and values
`[B, K, L, H|Dv]` for K key/value heads.

A press (`attention.presses`) then drops what a trained model can do without: `evict` keeps
chosen slots of each head at their original positions (or re-rotated to 0 .. M-1), each slot's
position and head stored beside it, so that heads may hold different positions and the memory
really shrinks; `kept_step` decodes on such a cache and `evict_again` presses it again while
decoding.
"""

from typing import Any, Callable

import jax
import jax.numpy as jnp

from attention.positions import rotary_embedding

Array = jax.Array

State = dict[str, Array]
# `(q [B, N, T, H], keys [B, K, S, H], values [B, K, S, Dv], q_positions [T], k_positions [S])
# -> out [B, N, T, Dv]`: the layer's variant over explicit positions, for decoding steps.
AttendAt = Callable[[Array, Array, Array, Array, Array], Array]


def window_mask(q_positions: Array, k_positions: Array, window: int, sink_tokens: int = 0) -> Array:
  """Causal visibility by explicit positions, `[T, S]`: key j visible iff `0 <= j <= i` and, with
  a window, `i - j < window` or `j < sink_tokens` (the first tokens kept past the window:
  StreamingLLM's attention sinks). Negative key positions are empty cache slots."""
  distance = q_positions[:, None] - k_positions[None, :]  # [T, S]
  visible = (distance >= 0) & (k_positions[None, :] >= 0)
  if not window:
    return visible
  return visible & ((distance < window) | (k_positions[None, :] < sink_tokens))


def cache_offsets(
  q_positions: Array, k_positions: Array, window: int, sink_tokens: int = 0
) -> Array:
  """`j - i` per query and key as a streaming cache sees them, `[T, S]`: the kept first tokens
  sit right before the window, so key j < sink_tokens is at most `window + sink_tokens - 1 - j`
  away, however far the stream has gone (StreamingLLM numbers positions within its cache;
  with the relative position biases that is this offset). Other keys: their true offset."""
  relative = k_positions[None, :] - q_positions[:, None]  # [T, S]
  if not sink_tokens:
    return relative
  in_cache = k_positions[None, :] - (window + sink_tokens - 1)
  return jnp.where(k_positions[None, :] < sink_tokens, jnp.maximum(relative, in_cache), relative)


def kept_rotary_scores(
  scores: Callable[[Array, Array], Array],
  q_positions: Array,
  k_positions: Array,
  window: int,
  sink_tokens: int,
  *,
  base: float = 10000.0,
  layout: str = 'pairs',
) -> Callable[[Array, Array], Array]:
  """`scores` of rotary queries and keys with each kept first token at its `cache_offsets`
  offset: key j < sink_tokens sits `min(i, window + sink_tokens - 1) - j` before query i.

  A rotary score depends on the offset only: a query rotated at m and a key rotated at n score
  as at m - n. The kept key stays rotated at j; the query is rotated on by
  `min(i, P) - i` (P = window + sink_tokens - 1; rotations compose), to where the cache's query
  sits, P once the stream has filled the cache, which puts the kept token at offset P - j from
  every later query. Other keys keep their true offsets.

  Args:
    scores: `(q [..., T, H], k [..., S, H]) -> [..., T, S]`, e.g. `scaled_dot_scores`.
    q_positions: the queries' positions `[T]`, at which `q` is rotated.
    k_positions: the keys' positions `[S]` (negative: empty cache slots).
    window: the window the other keys are within.
    sink_tokens: the number of first positions kept.
    base: the rotary wavelength base `q` was rotated with.
    layout: its rotary layout, `'pairs'` or `'halves'`.

  Returns:
    A function like `scores`: the kept keys' columns against the moved queries, the others
    against `q` itself.
  """
  shift = jnp.minimum(q_positions, window + sink_tokens - 1) - q_positions  # [T], <= 0
  kept = (k_positions >= 0) & (k_positions < sink_tokens)  # [S]

  def kept_scores(q: Array, k: Array) -> Array:
    moved = rotary_embedding(q, shift, base=base, layout=layout)  # [..., T, H]
    return jnp.where(kept, scores(moved, k), scores(q, k))  # [..., T, S]

  return kept_scores


def init_kv_cache(
  batch: int,
  kv_heads: int,
  d_k: int,
  d_v: int,
  *,
  max_length: int,
  window: int,
  sink_tokens: int,
  dtype: Any,
) -> State:
  """Zeroed K/V slots `{'k': [B, K, L, H], 'v': [B, K, L, Dv]}`: L = max_length positions, or
  with a window the `sink_tokens` first positions (slot p) and a ring buffer of the `window`
  latest later ones (position p in slot `sink_tokens + (p - sink_tokens) % window`)."""
  slots = sink_tokens + window if window else max_length
  return {
    'k': jnp.zeros((batch, kv_heads, slots, d_k), dtype),
    'v': jnp.zeros((batch, kv_heads, slots, d_v), dtype),
  }


def _slot_positions(step: Array, window: int, sink_tokens: int) -> Array:
  """The position each slot of a windowed cache holds before `step` is written, -1 if empty:
  the first-token slots hold 0 .. sink_tokens-1, ring slot s the latest p < step with
  p >= sink_tokens and `(p - sink_tokens) % window == s`. `[sink_tokens + window]`."""
  first = jnp.arange(sink_tokens)
  ring = step - 1 - jnp.mod(step - 1 - sink_tokens - jnp.arange(window), window)
  return jnp.concatenate(
    [jnp.where(first < step, first, -1), jnp.where(ring >= sink_tokens, ring, -1)]
  )


def kv_step(
  state: State,
  q: Array,
  k: Array,
  v: Array,
  step: Array,
  *,
  window: int,
  sink_tokens: int,
  attend_at: AttendAt,
  options: dict[str, Any],
) -> tuple[Array, State]:
  """Positions `step .. step+T-1`: write their keys/values, attend to every visible one.

  The full buffer is written first and read whole, masked by position. A windowed cache is read
  together with the new block (the block's first rows may be overwritten by its last ones when
  T > window), then keeps the block's first tokens and its last `window` positions.
  """
  del options  # `attend_at` is the layer's variant with its options
  t = q.shape[-2]
  positions = step + jnp.arange(t)  # [T]
  new = {'k': k.astype(state['k'].dtype), 'v': v.astype(state['v'].dtype)}
  if not window:
    state = {
      name: jax.lax.dynamic_update_slice_in_dim(state[name], new[name], step, axis=2)
      for name in ('k', 'v')
    }
    k_positions = jnp.arange(state['k'].shape[2])
    return attend_at(q, state['k'], state['v'], positions, k_positions), state
  keys = jnp.concatenate([state['k'], new['k']], axis=2)  # [B, K, L+T, H]
  values = jnp.concatenate([state['v'], new['v']], axis=2)
  k_positions = jnp.concatenate([_slot_positions(step, window, sink_tokens), positions])
  out = attend_at(q, keys, values, positions, k_positions)
  # A first token goes to its own slot, the last `window` of the others to the ring (distinct
  # slots either way); the rest go to slot `past`, one extra slot cut off after writing. (Not
  # mode="drop": XLA:GPU can write an update of the index just past the end into the last slot,
  # jax issue #21708.)
  kept, past = min(t, window), sink_tokens + window
  first = jnp.where(positions < sink_tokens, positions, past)
  latest = positions[t - kept :]
  ring = jnp.where(latest >= sink_tokens, sink_tokens + jnp.mod(latest - sink_tokens, window), past)

  def write(buffer: Array, rows: Array) -> Array:
    padded = jnp.pad(buffer, ((0, 0), (0, 0), (0, 1), (0, 0)))  # [B, K, past + 1, H]
    padded = padded.at[:, :, first].set(rows).at[:, :, ring].set(rows[:, :, t - kept :])
    return padded[:, :, :past]

  return out, {name: write(state[name], new[name]) for name in ('k', 'v')}


def _with_room(kept: State, first: Array, room: int, kv_heads: int) -> State:
  """An evicted cache: `kept` slots (`k`, `v` `[B, K', M, X]`, `positions`, `heads` `[B, K', M]`)
  then `room` positions from `first [B]` on, W = K / K' slots each (one per head), whose
  positions and heads are set here: a decoding step writes keys and values only."""
  b, rows, count = kept['positions'].shape
  per_position = kv_heads // rows
  j = jnp.arange(room * per_position)
  lead = (b, rows, room * per_position)
  new_positions = first[:, None, None] + j // per_position
  new_heads = jnp.arange(rows)[:, None] * per_position + j % per_position  # [K', room * W]
  pad = ((0, 0), (0, 0), (0, room * per_position), (0, 0))
  return {
    'k': jnp.pad(kept['k'], pad),
    'v': jnp.pad(kept['v'], pad),
    'positions': jnp.concatenate([kept['positions'], jnp.broadcast_to(new_positions, lead)], 2),
    'heads': jnp.concatenate([kept['heads'], jnp.broadcast_to(new_heads, lead)], 2),
    'first': first.astype(jnp.int32),
    'base': jnp.full((b,), count, jnp.int32),
  }


def evict(
  state: State,
  entries: Array,
  *,
  length: int,
  room: int,
  rerotate: tuple[float, str] | None = None,
) -> State:
  """The cache of a prefilled `length`-token context keeping only `entries`, with `room` more
  positions to decode: the press's eviction, which really frees what it drops.

  `entries [B, K', M]` index the context's slots flattened head-major, `[K * length]` (entry e is
  key/value head `e // length` at position `e % length`): K' = K rows of M = the positions each
  head keeps (a uniform budget), or K' = 1 row of a layer's kept entries over all its heads (a
  budget per head, AdaKV's). Each new position then takes W = K / K' slots, one per head.

  Returns:
    `{'k': [B, K', M + room * W, H], 'v': [..., Dv], 'positions': [B, K', M + room * W] int32,
    'heads': [...] int32, 'first': [B], 'base': [B]}`: every slot's position and key/value
    head, set here for the slots still to be written (position `length + j // W` in slot M + j),
    so a decoding step writes keys and values only; `first` = length, `base` = M.

  An entry below 0 is an empty slot (position -1, which no query reads): rows of one batch may
  then keep different counts in one shape (a study's presses at several ratios, answered as one
  batch), every row decoding on from slot M.

  With `rerotate` (the rotary `(base, layout)` the keys were rotated with), every head's kept
  keys move to positions 0 .. M-1 in their order, rotated on by the difference (rotations
  compose), and new positions start at M: kvpress's KeyRerotationPress. Every head keeps M (no
  empty entries).
  """
  b, k = state['k'].shape[:2]
  kept_slot = entries >= 0
  index = jnp.where(kept_slot, entries, 0)

  def gather(buffer: Array) -> Array:
    flat = buffer[:, :, :length].reshape(b, 1, k * length, buffer.shape[-1])
    return jnp.take_along_axis(flat, index[..., None], axis=2)  # [B, K', M, X]

  kept = {
    'k': gather(state['k']),
    'v': gather(state['v']),
    'positions': jnp.where(kept_slot, entries % length, -1).astype(jnp.int32),
    'heads': jnp.where(kept_slot, entries // length, -1).astype(jnp.int32),
  }
  if rerotate is None:
    return _with_room(kept, jnp.full((b,), length, jnp.int32), room, k)
  if entries.shape[1] != k:
    raise ValueError('rerotate: every key/value head must keep as many positions (one budget).')
  count = entries.shape[2]
  moved = jnp.arange(count) - kept['positions']  # [B, K, M]: how far each kept key moves
  kept['k'] = rotary_embedding(kept['k'], moved, base=rerotate[0], layout=rerotate[1])
  kept['positions'] = jnp.broadcast_to(jnp.arange(count, dtype=jnp.int32), moved.shape)
  return _with_room(kept, jnp.full((b,), count, jnp.int32), room, k)


def evict_again(state: State, slots: Array, *, room: int, kv_heads: int) -> State:
  """An evicted cache (`evict`) whose room is full, keeping only `slots [B, K', M]` of each row
  (increasing, so the slots stay in position order), with room for `room` more positions:
  compression while decoding, so that a long generation runs in fixed memory."""
  take = lambda x: jnp.take_along_axis(x, slots if x.ndim == 3 else slots[..., None], axis=2)
  kept = {name: take(state[name]) for name in ('k', 'v', 'positions', 'heads')}
  written = jnp.max(state['positions'], axis=(1, 2))  # [B]: the last position decoded
  return _with_room(kept, written + 1, room, kv_heads)


def kept_mask(q_positions: Array, state: State, num_heads: int, kv_heads: int) -> Array:
  """Which slots of an evicted cache each query may read, `[B, N, T, L]`: a slot written at a
  position not after the query's, holding the key/value head the query head reads."""
  positions, heads = state['positions'], state['heads']  # [B, K', L]
  rows = positions.shape[1]
  seen = (positions[:, :, None, :] <= q_positions[:, None]) & (positions[:, :, None, :] >= 0)
  seen = jnp.repeat(seen, num_heads // rows, axis=1)  # [B, N, T, L]
  own = (
    jnp.repeat(heads, num_heads // rows, axis=1)
    == (jnp.arange(num_heads) // (num_heads // kv_heads))[None, :, None]
  )  # [B, N, L]
  return seen & own[:, :, None, :]


def kept_step(
  state: State, q: Array, k: Array, v: Array, step: Array, *, attend: Callable[..., Array]
) -> tuple[Array, State]:
  """Positions `step .. step+T-1` on an evicted cache (`evict`): their keys and values go to
  their slots (one per head), then the queries attend to every visible slot.

  `attend(q, keys, values, mask)` is the layer's variant with an explicit mask `[B, N, T, L]`.
  """
  b, kv_heads, t, _ = k.shape
  rows = state['k'].shape[1]
  slot = state['base'][0] + (step - state['first'][0]) * (kv_heads // rows)

  def write(buffer: Array, new: Array) -> Array:
    # [B, K, T, X] -> [B, K', T * W, X]: a position's W heads side by side, as `evict` laid out.
    grouped = new.reshape(b, rows, kv_heads // rows, t, new.shape[-1]).swapaxes(2, 3)
    grouped = grouped.reshape(b, rows, t * (kv_heads // rows), new.shape[-1])
    return jax.lax.dynamic_update_slice_in_dim(buffer, grouped.astype(buffer.dtype), slot, axis=2)

  state = {**state, 'k': write(state['k'], k), 'v': write(state['v'], v)}
  positions = step + jnp.arange(t)
  mask = kept_mask(positions, state, q.shape[1], kv_heads)
  return attend(q, state['k'], state['v'], mask), state
