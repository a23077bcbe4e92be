"""KV-cache compression of a decoder's prefill: a press (`attention.PRESSES`) on every layer.

kvpress's protocol, for any decoder with `init_decode_cache` / `decode_step` (`DecoderLM`): the
context is prefilled as usual, each layer's queries read through the `queries` tap, then every
layer whose cache keeps every position is scored by the press and evicted to its budget
(`attention.evict`); decoding goes on from the smaller cache, the context's kept keys at their
original positions. A layer with a window (Gemma 3's local layers, a StreamingLLM window) already
holds a bounded ring and is left as it is; its budget is its window.

One prefill serves any number of presses: `prefill` returns the cache and the queries,
`layer_scores` scores them, `compress` builds each press's cache (`tasks`-free, pure functions of
arrays). A press arrives as an `attention.Press`: an entry point turns its name into one
(`attention.get_press`) and checks its settings once (`check_settings`), before a model is read.
"""

from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp

import attention
from attention.presses import (
  PRESSES,
  Press,
  adaptive_entries,
  kept_count,
  layer_entries,
  pyramid_budget,
  top_positions,
)
from models import interventions
from models.attention_layer import MultiHeadAttention
from models.attention_paths import attention_layers
from models.decoding import greedy_search

# The variants whose decoding cache a press evicts from: per-head keys and values, one map each
# (not linear attention's running sums, a delta rule's state, latents or differential pairs).
PRESSABLE = ('softmax', 'sigmoid')

Array = jax.Array


def pressed(layer: nnx.Module) -> bool:
  """Whether a press evicts from this layer's cache: one that keeps every position."""
  return not layer.config.window


def check_settings(
  press: Press, ratio: float, context: int, every: int = 0, repeat: bool = False
) -> None:
  """What an entry point refuses before a model is read, one sentence each: a ratio outside
  [0, 1), a context of fewer than 2 tokens, KVzip without its repeat block (`repeat`: the caller
  forms it), a negative `every` (compressing again every that many decoded tokens,
  `press_again`), or compressing while decoding with a press that reads queries."""
  kept_count(context, ratio)
  if context < 2:
    raise ValueError(f'press: the context must hold at least 2 tokens, got {context}.')
  if press.repeat and not repeat:
    raise ValueError(
      f'press {press.name!r} scores the context by how the model repeats it; it needs that repeat '
      'block (studies.presses forms it; in Python, compression.kept_positions(repeat=...)).'
    )
  if every < 0:
    raise ValueError(f'press_every must be 0 (never) or more, got {every}.')
  if every and (press.queries or press.budget != 'uniform'):
    keys_alone = ', '.join(sorted(n for n, p in PRESSES.items() if not p.queries))
    raise ValueError(
      f"press {press.name!r} reads the prompt's queries or splits its budget unevenly; compressing "
      f'while decoding (every {every} tokens) takes a press that scores keys alone: {keys_alone}.'
    )


def check_press(model: nnx.Module, press: Press, context: int, **settings) -> None:
  """One sentence before any work for what the press cannot do on this model and a `context` of
  that many tokens (`settings`: the press's, e.g. SnapKV's `window`, which the context must
  exceed); its own settings are the entry point's to check (`check_settings`).

  Raises:
    ValueError: a layer whose cache is no per-head keys and values (`PRESSABLE`), a weights
      press on a variant without softmax weights, a position bias (a kept key's would need its
      offset per head), no layer to press, or a context no longer than the press's window.
  """
  for path, module in interventions.modules_by_path(model).items():
    runs = module.config.attention if isinstance(module, MultiHeadAttention) else None
    if path.endswith('self_attn') and runs not in PRESSABLE:
      kind = type(module).__name__ if runs is None else f'attention={runs!r}'
      raise ValueError(
        f'press: {path} is a {kind} layer, whose cache holds no per-head keys and values a '
        'press can evict; a press takes softmax or sigmoid multi-head attention.'
      )
  layers = list(attention_layers(model).values())
  for layer in layers:
    config = layer.config
    if press.weights and config.attention != 'softmax':
      raise ValueError(
        f'press {press.name!r} reads softmax attention weights, which '
        f'attention={config.attention!r} does not form; choose a press that scores keys alone '
        '(knorm, expected_attention, random, streaming_llm).'
      )
    if config.position_bias is not None:
      raise ValueError(
        f'press: positions={config.positions!r} adds a position bias, which an evicted cache '
        "does not support (rotary positions do: positions='rope')."
      )
  if not any(pressed(layer) for layer in layers):
    raise ValueError('press: every layer has a window, so no cache holds the whole context.')
  window = press.options(**settings).get('window', 0)
  if context <= window:
    raise ValueError(
      f'press {press.name!r} scores by the last {window} queries; the context ({context} '
      'tokens) must be longer.'
    )


def prefill(model: nnx.Module, prompt: Array, room: int) -> tuple[dict[str, Any], list[Array]]:
  """The cache of `prompt[:, :-1]` (the context; the last token is decoding's first input, as
  `init_decode_cache` reads a prompt) with room for `room` steps, and each layer's queries
  `[B, N, S, H]` from the prefill (None for a layer that no press touches)."""
  with interventions.editing(model) as run:
    cache = model.init_decode_cache(prompt, room)
  return cache, _tapped_queries(model, run.captured)


def _tapped_queries(model: nnx.Module, captured: dict[str, Array]) -> list[Array | None]:
  """Each pressed layer's `queries` tap from a capture of `model`, None for the others."""
  return [
    captured[f'{path}/queries'] if pressed(layer) else None
    for path, layer in attention_layers(model).items()
  ]


def pressed_prefill(
  model: nnx.Module,
  prompt: Array,
  room: int,
  pressing: tuple[Press, float] | None,
  rerotate: bool = False,
) -> dict[str, Any]:
  """`init_decode_cache(prompt, room)`, the prompt's cache then pressed by `pressing` =
  `(press, ratio)` (None: kept whole); `rerotate`: its kept keys moved to 0 .. M-1 (`compress`).
  What generation reads a prompt with (`models.generation`)."""
  if pressing is None:
    return model.init_decode_cache(prompt, room)
  press, ratio = pressing
  cache, queries = prefill(model, prompt, room)
  entries = kept_entries(layer_scores(model, cache, queries, press, ratio), press, ratio)
  rotary = rerotation(model, press) if rerotate else None
  return compress(cache, entries, prompt.shape[1] - 1, room, rotary)


def repeated(model: nnx.Module, cache: dict[str, Any], repeat: Array) -> tuple[list, dict]:
  """The queries `[B, N, R, H]` of `repeat [B, R]` read on top of a context's cache (KVzip's
  repeat block), per pressed layer (None elsewhere), and the cache with the block in its room
  (a copy: `compress` reads the context's slots only)."""
  with interventions.editing(model) as run:
    _, extended = model.decode_step(repeat, jnp.int32(0), cache)
  return _tapped_queries(model, run.captured), extended


def layer_scores(
  model: nnx.Module,
  cache: dict[str, Any],
  queries: list[Array],
  press: Press,
  ratio: float,
  *,
  context: int = 0,
  **settings,
) -> list[Array | None]:
  """The press's scores `[B, K, S]` of every pressed layer (None elsewhere), S the `context`
  (default: as many positions as the queries). A press on a repeat block (KVzip) takes the
  block's queries and the cache it extended (`repeated`), and `context`."""
  options = press.options(**settings)
  scores = []
  for index, (layer, q) in enumerate(zip(attention_layers(model).values(), queries)):
    if q is None:
      scores.append(None)
      continue
    config, s = layer.config, context or q.shape[2]
    read = s + q.shape[2] if press.repeat else s  # a repeat block's own keys after the context's
    layer_cache = cache['layers'][index]
    scores.append(
      press.score(
        q,
        layer_cache['k'][:, :, :read],
        layer_cache['v'][:, :, :read],
        scale=config.query_scale or layer.d_k**-0.5,
        rope=(config.rope_base, config.rope_layout) if config.positions == 'rope' else None,
        ratio=ratio,
        layer=index,
        context=s,
        **options,
      )
    )
  return scores


def kept_entries(scores: list[Array | None], press: Press, ratio: float, **settings) -> list:
  """Each pressed layer's kept entries for `attention.evict`, `[B, K', M]` (see there)."""
  options = press.options(**settings)
  num_layers = len(scores)
  entries = []
  for index, layer_scores in enumerate(scores):
    if layer_scores is None:
      entries.append(None)
      continue
    b, k, s = layer_scores.shape
    count = kept_count(s, ratio)
    if press.budget == 'pyramid':
      count = pyramid_budget(
        s, ratio, index, num_layers, window=options['window'], beta=options['beta']
      )
    if press.budget == 'adaptive':
      entries.append(adaptive_entries(layer_scores, count, options['floor'])[:, None])
    elif press.budget == 'layer':
      entries.append(layer_entries(layer_scores, ratio)[:, None])
    else:
      entries.append(top_positions(layer_scores, count) + (jnp.arange(k) * s)[:, None])
  return entries


def compress(
  cache: dict[str, Any],
  entries: list,
  length: int,
  room: int,
  rerotate: list[tuple[float, str] | None] | None = None,
) -> dict[str, Any]:
  """The cache of a `length`-token context with each pressed layer evicted to its entries, and
  room for `room` more positions. `rerotate` (per layer, `rerotation(model, press)`) moves every
  head's kept keys to positions 0 .. M-1 and decoding on from M (`attention.evict`)."""
  rerotate = rerotate or [None] * len(entries)
  layers = [
    layer_cache
    if kept is None
    else attention.evict(layer_cache, kept, length=length, room=room, rerotate=rope)
    for layer_cache, kept, rope in zip(cache['layers'], entries, rerotate)
  ]
  if not any(rerotate):
    return {**cache, 'layers': layers}
  count = next(kept.shape[2] for kept in entries if kept is not None)
  return {'offset': jnp.full_like(cache['offset'], count), 'layers': layers}


def rerotation(model: nnx.Module, press: Press) -> list[tuple[float, str] | None]:
  """Per layer, the rotary `(base, layout)` that `compress` re-rotates the kept keys with.

  Raises:
    ValueError: the press splits its budget unevenly (heads or layers would sit at different
      positions), a layer keeps a window (its ring stays at true positions), or a layer's
      positions are not rotary.
  """
  layers = list(attention_layers(model).values())
  if press.budget != 'uniform':
    raise ValueError(
      f'rerotate: press {press.name!r} gives heads or layers different budgets, so their kept keys '
      'could not share positions; re-rotation takes a uniform budget.'
    )
  if not all(pressed(layer) for layer in layers):
    raise ValueError(
      'rerotate: a layer with a window keeps its ring at true positions; re-rotation takes a '
      'model whose every layer is pressed.'
    )
  if any(layer.config.positions != 'rope' for layer in layers):
    raise ValueError("rerotate: only rotary keys can be moved (positions='rope').")
  return [(layer.config.rope_base, layer.config.rope_layout) for layer in layers]


def press_again(
  model: nnx.Module, cache: dict[str, Any], press: Press, count: int, room: int, **settings
) -> dict[str, Any]:
  """Every evicted layer of `cache`, its room full, back to `count` positions per head with room
  for `room` more: compression while decoding (kvpress's DecodingPress), every `room` tokens, so
  that a long generation runs in `count + room` slots per head. For a press that scores keys and
  values alone (`Press.queries` False) on uniform budgets (`check_settings(..., every=room)`)."""
  options = press.options(**settings)
  layers = []
  pairs = zip(attention_layers(model).values(), cache['layers'])
  for index, (layer, layer_cache) in enumerate(pairs):
    if 'positions' not in layer_cache:
      layers.append(layer_cache)
      continue
    total = layer_cache['positions'].shape[-1]
    scores = press.score(
      None,
      layer_cache['k'],
      layer_cache['v'],
      ratio=1 - (count + 0.5) / total,  # int(total * (1 - ratio)) == count, rounding aside
      layer=index,
      **options,
    )
    slots = top_positions(scores, count)
    layers.append(attention.evict_again(layer_cache, slots, room=room, kv_heads=layer.num_kv_heads))
  return {**cache, 'layers': layers}


def answer(
  model: nnx.Module, cache: dict[str, Any], question: Array, *, max_length: int, eos_id: int = -1
) -> Array:
  """Greedy tokens after `question [B, Q]` read on top of `cache` (a context's, pressed or not,
  whose offset is the question's first position): kvpress's question after the context.
  Returns ids `[B, max_length]`, `pad_id` 0 after an EOS."""

  q = question.shape[1]
  if q > 1:  # the question but its last token, in one pass
    cache = model.decode_step(question[:, :-1], jnp.int32(0), cache)[1]
  # The search counts its steps from 0: it starts at the question's last token.
  cache = {**cache, 'offset': cache['offset'] + q - 1}
  return greedy_search(
    model.decode_step,
    cache,
    batch_size=question.shape[0],
    max_length=max_length,
    bos_id=question[:, -1],
    eos_id=eos_id,
    pad_id=0,
  )


def kept_positions(
  model: nnx.Module,
  context: Array,
  press: Press,
  ratio: float,
  *,
  repeat: Array | None = None,
  **settings,
) -> list:
  """What the press keeps of `context [B, S]`: per layer a boolean `[B, K, S]` (True: kept), or
  None for a layer it leaves whole. KVzip also takes its `repeat [B, R]` block (and `prefix`,
  see `attention.presses.kvzip_scores`). For inspection: the explorer, tests against kvpress
  (the press's settings are its caller's to check, `check_settings`)."""
  context = jnp.asarray(context)
  s = context.shape[1]
  check_press(model, press, s, **settings)
  prompt = jnp.pad(context, ((0, 0), (0, 1)))  # a last token that is never read
  if press.repeat:
    if repeat is None:
      raise ValueError(
        f'press {press.name!r} reads a block that repeats the context: pass repeat=.'
      )
    cache, _ = prefill(model, prompt, jnp.shape(repeat)[1])
    queries, cache = repeated(model, cache, jnp.asarray(repeat))
  else:
    cache, queries = prefill(model, prompt, 1)
  scores = layer_scores(model, cache, queries, press, ratio, context=s, **settings)
  masks = []
  for kept in kept_entries(scores, press, ratio, **settings):
    if kept is None:
      masks.append(None)
      continue
    b, k = kept.shape[0], cache['layers'][0]['k'].shape[1]
    flat = jnp.zeros((b, k * s), bool).at[jnp.arange(b)[:, None], kept.reshape(b, -1)].set(True)
    masks.append(flat.reshape(b, k, s))
  return masks
