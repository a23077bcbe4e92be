"""KV-cache presses against NumPy references written from kvpress 0.5 (tests/press_reference.py):
each score, the kept sets (uniform, AdaKV, PyramidKV), attention over an evicted cache, and a
decoder's prefill -> press -> answer (models/compression.py) with its refusals."""

import functools
import itertools
import math
import re

from conftest import build_model
from flax import nnx
from float64 import model_in_float64
import jax
import jax.numpy as jnp
import numpy as np
import press_reference as ref
import pytest

import attention
from attention import presses
from attention.kv_cache import kv_step
from models import compression, generation

B, N, K, S, H, DV = 2, 6, 2, 12, 8, 5  # grouped heads: 3 query heads per key/value head
SCALE = 0.3  # the layer's query scale, not kvpress's 1/sqrt(H) = 0.354: the press must use it
BASE = 100.0  # not the default 10,000: a press that ignored the layer's rope base would differ
RATIO = 0.25
SETTINGS = dict(window=4, kernel=3, sink=2, future=5, block=5)  # 3 blocks of queries, one short
# Float64 scores: sums of at most S * H = 96 products of unit-normal numbers, then softmax and
# means; two summation orders differ by about 100 * 1.1e-16 relative (measured: <= 3e-16). A
# formula's difference (a rope base ignored, a window off by one, a missing 1/2) moves scores
# by 1e-3 or more, seven orders above this tolerance.
TOL = dict(rtol=1e-10, atol=1e-12)


def _layer(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """One layer's float64 queries [B, N, S, H], keys [B, K, S, H], values [B, K, S, Dv]."""
  rng = np.random.default_rng(seed)
  return tuple(rng.standard_normal(shape) for shape in ((B, N, S, H), (B, K, S, H), (B, K, S, DV)))


# kvpress's score of each press with a reference here, from `(q, k, v, rope, settings)`; random
# has none (kvpress draws torch.rand), so it is checked for its seeding.
_SNAPKV = lambda q, k, v, rope, o: ref.snapkv(
  q, k, scale=SCALE, window=o['window'], kernel=o['kernel']
)
REFERENCES = {
  'streaming_llm': lambda q, k, v, rope, o: ref.streaming_llm(k, ratio=RATIO, sink=o['sink']),
  'knorm': lambda q, k, v, rope, o: ref.knorm(k),
  'snapkv': _SNAPKV,
  'pyramidkv': _SNAPKV,  # the budgeted presses score as SnapKV
  'adakv': _SNAPKV,
  'tova': lambda q, k, v, rope, o: ref.tova(q, k, scale=SCALE),
  'observed_attention': lambda q, k, v, rope, o: ref.observed_attention(q, k, scale=SCALE),
  'expected_attention': lambda q, k, v, rope, o: ref.expected_attention(
    q, k, v, scale=SCALE, rope=rope, **{key: o[key] for key in ('future', 'sink', 'covariance')}
  ),
}


@pytest.mark.parametrize(
  'name, layout, covariance',
  [(name, 'pairs', True) for name in REFERENCES]
  + [('expected_attention', *case) for case in (('halves', True), (None, True), ('halves', False))],
)
def test_scores_equal_the_numpy_reference(name, layout, covariance):
  """Each press as `layer_scores` calls it, in float64; the rope layout matters to expected
  attention only (the others read rotated queries and keys)."""
  q, k, v = _layer()
  rope = None if layout is None else (BASE, layout)
  press = presses.PRESSES[name]
  settings = {**dict(press.settings), **SETTINGS, 'covariance': covariance}
  with jax.enable_x64(True):
    # One program per press: eagerly, every operation would compile on its own.
    score = jax.jit(
      lambda q, k, v: press.score(q, k, v, scale=SCALE, rope=rope, ratio=RATIO, layer=1, **settings)
    )
    scores = score(q, k, v)
    assert scores.dtype == jnp.float64 and scores.shape == (B, K, S)
    np.testing.assert_allclose(scores, REFERENCES[name](q, k, v, rope, settings), **TOL)


@pytest.mark.parametrize('layout', ('pairs', 'halves'))
def test_reference_rotation_matrices_are_the_projects_rope(layout):
  """The reference's `cos I + sin P` at each position rotates as `attention.rotary_embedding`
  (itself checked against a complex-number RoPE in tests/test_language_models.py), so the
  averaged matrix of expected attention is built independently of the JAX identity trick."""
  x = np.random.default_rng(1).standard_normal((2, 5, H))
  positions = np.arange(5) + 7
  with jax.enable_x64(True):
    want = attention.rotary_embedding(jnp.asarray(x), positions, base=BASE, layout=layout)
  np.testing.assert_allclose(ref.rotate(x, positions, BASE, layout), want, **TOL)


def test_random_scores_are_uniform_and_drawn_per_seed_and_layer():
  """kvpress draws torch.rand, which no NumPy reference reproduces: one draw per (seed, layer)."""
  q, k, v = _layer()
  first = np.asarray(presses.random_scores(q, k, v, seed=0, layer=0))
  assert first.shape == (B, K, S) and ((first >= 0) & (first < 1)).all()
  np.testing.assert_array_equal(presses.random_scores(q, k, v, seed=0, layer=0), first)
  for other in (dict(seed=0, layer=1), dict(seed=1, layer=0)):
    assert not np.allclose(presses.random_scores(q, k, v, **other), first)


def test_top_positions_is_kvpress_topk():
  q, k, _ = _layer()
  # SnapKV's scores: their padded window ties at max + 1 in every head.
  scores = ref.snapkv(q, k, scale=SCALE, window=4, kernel=3)
  for ratio in (0.0, 0.25, 0.6, 0.9):
    count = presses.kept_count(S, ratio)
    kept = np.asarray(presses.top_positions(jnp.asarray(scores), count))
    assert kept.shape == (B, K, count) and (np.diff(kept, axis=-1) > 0).all()
    np.testing.assert_array_equal(
      ref.entries_mask(kept + np.arange(K)[:, None] * S, (B, K, S)), ref.scorer_kept(scores, ratio)
    )


def test_ties_keep_the_lower_position():
  """The module docstring's promise, on constructed ties, for both rankings."""
  scores = jnp.asarray([[[1.0, 2.0, 2.0, 0.0, 2.0, 2.0]]])
  np.testing.assert_array_equal(presses.top_positions(scores, 3), [[[1, 2, 4]]])
  np.testing.assert_array_equal(ref.budget_kept(scores, 3), [[[0, 1, 1, 0, 1, 0]]])
  # AdaKV, count 2, floor 0.5: position 0 of each head is safe; then three entries tie at 1 for
  # the last two places, and the lower ones (flat 1 and 2, both of head 0) are kept.
  scores = jnp.asarray([[[3.0, 1.0, 1.0, 0.0], [3.0, 1.0, 0.0, 0.0]]])
  np.testing.assert_array_equal(presses.adaptive_entries(scores, 2, 0.5), [[0, 1, 2, 4]])
  np.testing.assert_array_equal(
    ref.adakv_kept(np.asarray(scores), 0.5, 0.5), [[[1, 1, 1, 0], [1, 0, 0, 0]]]
  )


def test_adaptive_entries_are_adakvs_safeguard_and_global_pruning():
  q, k, _ = _layer()
  rng = np.random.default_rng(4)
  # SnapKV's scores (every head's window tied at max + 1), heads of different spread; and scores
  # where head 1 outranks head 0 everywhere, so that only the safeguard keeps head 0's best.
  snapkv = ref.snapkv(q, k, scale=SCALE, window=4, kernel=3) * np.array([1.0, 5.0])[:, None]
  apart = rng.uniform(size=(B, K, S)) + np.array([0.0, 10.0])[:, None]
  for scores, (ratio, floor) in itertools.product(
    (snapkv, apart), ((0.25, 0.2), (0.5, 0.0), (0.5, 0.5), (0.8, 0.2))
  ):
    count = presses.kept_count(S, ratio)
    entries = presses.adaptive_entries(jnp.asarray(scores), count, floor)
    assert entries.shape == (B, K * count) and (np.diff(entries, axis=-1) > 0).all()
    kept = ref.entries_mask(entries, (B, K, S))
    np.testing.assert_array_equal(kept, ref.adakv_kept(scores, ratio, floor))
    per_head = kept.sum(-1)  # [B, K]
    assert (per_head >= int(count * floor)).all() and len(np.unique(per_head)) > 1
    if scores is apart and ratio == 0.5:  # head 1 would take all S = K * count entries
      np.testing.assert_array_equal(per_head[:, 0], int(count * floor))


def test_pyramid_budget_is_kvpress_rule():
  grid = ((10, 100, 1000, 4096), (0.0, 0.1, 0.5, 0.9), (4, 64), (1, 2, 20), (1, 2, 32))
  for length, ratio, window, beta, layers in itertools.product(*grid):
    for i in range(layers):
      want = ref.pyramid_budget(length, ratio, i, layers, window, beta)
      assert presses.pyramid_budget(length, ratio, i, layers, window=window, beta=beta) == want
  # A pyramid, not the uniform fallback: decreasing, about the uniform budget on average.
  budgets = [presses.pyramid_budget(1000, 0.5, i, 4, window=64, beta=20) for i in range(4)]
  assert budgets == sorted(budgets, reverse=True) and budgets[0] > 500 > budgets[-1]
  assert abs(sum(budgets) / 4 - 500) <= 1


# An evicted cache: a context of C positions, then two decoding calls of T positions each.
C, T, ROOM = 8, 2, 4


def _attend(q, keys, values, mask):
  return attention.VARIANTS['softmax'].attend(q, keys, values, mask=mask, scale=SCALE)


def _attend_at(q, keys, values, q_positions, k_positions):
  return _attend(q, keys, values, attention.window_mask(q_positions, k_positions, 0))


WHOLE = dict(window=0, sink_tokens=0, attend_at=_attend_at, options={})  # `kv_step`'s full cache


@functools.partial(jax.jit, static_argnames='evicted')
def _decode(cache, entries, queries, keys, values, *, evicted: bool):
  """Positions C .. C+T-1, then C+T .. C+2T-1 (`queries [2, B, N, T, H]`, `keys`, `values`
  `[2, B, K, T, H|Dv]`) on the context's cache evicted to `entries`, or on the whole cache."""
  if evicted:
    cache = attention.evict(cache, entries, length=C, room=ROOM)
  outputs = []
  for i in range(2):
    block = (cache, queries[i], keys[i], values[i], jnp.int32(C + i * T))
    out, cache = (
      attention.kept_step(*block, attend=_attend) if evicted else kv_step(*block, **WHOLE)
    )
    outputs.append(out)
  return jnp.stack(outputs)  # [2, B, N, T, Dv]


def _decode_evicted(entries, kept: np.ndarray):
  """Decodes over a random context's cache evicted to `entries`; each
  output must be NumPy's attention over exactly the kept positions of its key/value head
  (`kept [B, K, C]`) and the new ones. Returns the inputs and the outputs."""
  rng = np.random.default_rng(2)
  keys = rng.standard_normal((B, K, C + ROOM, H))
  values = rng.standard_normal((B, K, C + ROOM, DV))
  queries = rng.standard_normal((2, B, N, T, H))
  written = np.arange(C + ROOM)[:, None] < C  # the room is not written yet
  cache = {'k': np.where(written, keys, 0), 'v': np.where(written, values, 0)}
  blocks = [np.moveaxis(x[:, :, C:].reshape(B, K, 2, T, -1), 2, 0) for x in (keys, values)]
  outputs = _decode(cache, entries, queries, *blocks, evicted=True)
  own = np.concatenate([kept, np.ones((B, K, ROOM), bool)], axis=-1)  # [B, K, C + ROOM]
  own = np.repeat(own, N // K, axis=1)[:, :, None]  # [B, N, 1, C + ROOM]
  for i in range(2):
    causal = np.arange(C + ROOM) <= C + i * T + np.arange(T)[:, None]  # [T, C + ROOM]
    want = ref.masked_attention(queries[i], keys, values, own & causal, SCALE)
    np.testing.assert_allclose(outputs[i], want, **TOL)
  return (cache, entries, queries, *blocks), outputs


def test_evicted_cache_at_ratio_zero_is_the_full_cache():
  with jax.enable_x64(True):
    everything = np.broadcast_to(np.arange(K)[:, None] * C + np.arange(C), (B, K, C))
    inputs, outputs = _decode_evicted(everything, np.ones((B, K, C), bool))
    np.testing.assert_allclose(outputs, _decode(*inputs, evicted=False), **TOL)


def test_evicted_cache_attends_to_each_heads_own_positions():
  """Different kept positions per head and per batch row, uniform (one row per head) and AdaKV's
  flat layout (one row of all heads' entries: 6 + 2 and 1 + 7 per head)."""
  uniform = np.array([[[0, 2, 5, 7], [1, 3, 4, 6]], [[0, 1, 2, 3], [4, 5, 6, 7]]])
  flat = np.array(
    [[0, 1, 2, 4, 5, 7, C + 3, C + 6], [7, C, C + 1, C + 2, C + 3, C + 5, C + 6, C + 7]]
  )
  with jax.enable_x64(True):
    for entries in (uniform + np.arange(K)[:, None] * C, flat[:, None]):
      _decode_evicted(entries, ref.entries_mask(entries, (B, K, C)))


def test_empty_entries_let_rows_keep_different_counts_in_one_shape():
  """A row keeping fewer positions than another fills its entries with -1 (empty slots no
  query reads): each row's outputs are attention over its own kept positions alone."""
  positions = np.array([[[0, 2, 5, 7], [1, 3, 4, 6]], [[0, 6, -1, -1], [4, -1, -1, -1]]])
  entries = np.where(positions >= 0, positions + np.arange(K)[:, None] * C, -1)
  kept = np.zeros((B, K, C), bool)
  for b, k, i in zip(*np.nonzero(positions >= 0)):
    kept[b, k, positions[b, k, i]] = True
  with jax.enable_x64(True):
    _decode_evicted(entries, kept)


def test_evicted_cache_bytes_drop_by_the_ratio():
  """Keys and values take `1 - ratio` of the full cache's bytes, in either layout; the eviction
  adds an int32 position and head per slot and two int32 per batch row (8 bytes per slot, 1.6%
  of a slot of 128 + 128 bfloat16 features). Shapes alone: `jax.eval_shape`."""
  length, ratio = 16, 0.25
  kept = presses.kept_count(length, ratio)
  full = {
    name: jax.ShapeDtypeStruct((B, K, length, d), jnp.bfloat16) for name, d in (('k', H), ('v', DV))
  }
  size = lambda *leaves: sum(math.prod(leaf.shape) * leaf.dtype.itemsize for leaf in leaves)
  evict = functools.partial(attention.evict, length=length, room=0)
  for rows in (K, 1):  # a budget per head, AdaKV's one row
    entries = jax.ShapeDtypeStruct((B, rows, K * kept // rows), jnp.int32)
    state = jax.eval_shape(evict, full, entries)
    assert size(state['k'], state['v']) == (1 - ratio) * size(full['k'], full['v'])
    extra = size(*(state[name] for name in ('positions', 'heads', 'first', 'base')))
    assert extra == 4 * (2 * B * K * kept + 2 * B)


V = 13  # a tiny decoder: 2 layers, 6 query heads over 2 key/value heads of 4 features


@functools.cache
def _decoder(**overrides):
  sizes = dict(vocab_size=V, pad_id=0, num_layers=2, d_model=24, num_heads=6, num_kv_heads=2)
  # An untied output: the tied one's greedy text repeats one token whatever the context.
  sizes.update(d_ff=16, dropout_rate=0.0, max_length=32, tie_output=False)
  rngs = nnx.Rngs(params=jax.random.key(0, impl='rbg'))
  return build_model('decoder_lm', **{**sizes, **overrides}, rngs=rngs)


def _ids(shape, seed=0):
  return jnp.asarray(np.random.default_rng(seed).integers(1, V, shape), jnp.int32)


@pytest.mark.parametrize('name', ('snapkv', 'adakv'))
def test_answer_at_ratio_zero_is_greedy_continuation(name):
  """kvpress's protocol with nothing evicted: the context's cache evicted to every position (a
  uniform budget, AdaKV's flat layout), then the question and a greedy answer: `continue_prompt`'s
  on context + question (attention's exactness over an evicted cache is tested above, in float64;
  a slot read by the wrong head or a key hidden from its own query changes this answer)."""
  model, context, question, answer = _decoder(), _ids((2, 10)), _ids((2, 3), 1), 5
  prompt = jnp.concatenate([context, question], 1)
  want = generation.continue_prompt(
    model, prompt, max_length=answer, rng=jax.random.key(0), temperature=0.0
  )
  assert len(np.unique(want)) > 2  # not one token repeated, which an attention change would keep
  room = question.shape[1] - 1 + answer
  settings = dict(window=4, kernel=3)

  @jax.jit
  def pressed(context, question):
    head = jnp.concatenate([context, question[:, :1]], axis=1)  # its last token is not read
    cache, queries = compression.prefill(model, head, room)
    press = presses.get_press(name)
    scores = compression.layer_scores(model, cache, queries, press, 0.0, **settings)
    entries = compression.kept_entries(scores, press, 0.0, **settings)
    cache = compression.compress(cache, entries, context.shape[1], room)
    assert all('positions' in layer for layer in cache['layers'])  # really evicted
    return compression.answer(model, cache, question, max_length=answer)

  tokens = pressed(context, question)
  np.testing.assert_array_equal(tokens, want)


def _kept_positions(model, context, name: str, ratio: float, **settings) -> list:
  """`compression.kept_positions` as one compiled program (eagerly it compiles every operation)."""
  press = presses.get_press(name)
  kept = jax.jit(lambda ids: compression.kept_positions(model, ids, press, ratio, **settings))
  return kept(context)


def test_kept_positions_per_layer():
  """A windowed layer is left whole (None); a pressed one keeps its budget: AdaKV's (K * count in
  all, at least the floor per head) or PyramidKV's (more in the first layer)."""
  context, count = _ids((2, 10)), presses.kept_count(10, 0.5)
  windowed = _decoder(window=3, global_every=2)  # layer 0 windowed, layer 1 global
  masks = _kept_positions(windowed, context, 'adakv', 0.5, window=4, kernel=3)
  assert len(masks) == 2 and masks[0] is None and masks[1].dtype == jnp.bool_
  kept = np.asarray(masks[1]).sum(-1)  # [B, K]
  assert (kept.sum(-1) == K * count).all() and (kept >= int(count * 0.2)).all()
  pyramid = dict(window=1, kernel=3, beta=2)  # a pyramid even in 10 tokens
  budgets = [presses.pyramid_budget(10, 0.75, i, 2, window=1, beta=2) for i in range(2)]
  assert budgets[0] > budgets[1]
  masks = _kept_positions(_decoder(), context, 'pyramidkv', 0.75, **pyramid)
  for mask, budget in zip(masks, budgets):
    np.testing.assert_array_equal(mask.sum(-1), np.full((2, K), budget))


def test_kept_positions_score_the_prefill_as_the_reference():
  """`layer_scores` hands each press the layer's rotated queries, its cached keys and values, its
  query scale and its rope: expected attention (halves, base 500) on a float64 model's prefill
  keeps what the NumPy reference keeps, `int(S / 2)` positions per head."""
  model = _decoder(rope_layout='halves', rope_base=500.0)
  context, ratio, settings = _ids((2, 10)), 0.5, dict(sink=2, future=8)
  with model_in_float64(model) as wide:

    @jax.jit
    def kept_and_prefill(context):
      expected = presses.get_press('expected_attention')
      masks = compression.kept_positions(wide, context, expected, ratio, **settings)
      cache, queries = compression.prefill(wide, jnp.pad(context, ((0, 0), (0, 1))), 1)
      return masks, queries, cache['layers']

    masks, queries, layers = kept_and_prefill(context)
  for mask, q, layer in zip(masks, queries, layers):
    assert q.dtype == np.float64
    k, v = np.asarray(layer['k'][:, :, :10]), np.asarray(layer['v'][:, :, :10])
    scores = ref.expected_attention(
      np.asarray(q), k, v, scale=4**-0.5, rope=(500.0, 'halves'), covariance=True, **settings
    )
    np.testing.assert_array_equal(mask, ref.scorer_kept(scores, ratio))


def _checked(model, name: str, ratio: float, context: int) -> None:
  """An entry point's checks: the name resolved, the settings, then what the model refuses."""
  press = presses.get_press(name)
  compression.check_settings(press, ratio, context)
  compression.check_press(model, press, context)


@pytest.mark.parametrize(
  'overrides, name, ratio, field',
  [
    ({}, 'snapkv_typo', 0.5, 'snapkv_typo'),
    ({}, 'knorm', 1.0, 'ratio'),
    ({}, 'knorm', -0.1, 'ratio'),
    ({'attention': 'linear'}, 'knorm', 0.5, "attention='linear'"),
    ({'attention': 'sigmoid'}, 'snapkv', 0.5, "attention='sigmoid'"),
    ({'positions': 'alibi'}, 'knorm', 0.5, "positions='alibi'"),
    ({'window': 4}, 'knorm', 0.5, 'window'),
  ],
)
def test_check_press_refuses_in_one_sentence(overrides, name, ratio, field):
  model = _decoder(**overrides)
  with pytest.raises(ValueError) as error:
    _checked(model, name, ratio, 10)
  message = str(error.value)
  assert field in message and message.endswith('.'), message
  assert not re.search(r'[.;:]\s+[A-Z]', message), message  # one sentence
  if name == 'snapkv_typo':
    assert all(valid in message for valid in presses.PRESSES)


def test_check_press_accepts_what_it_can_press():
  """The refusals above are each for their reason: the same models pass a press they can serve."""
  for name in (*REFERENCES, 'random'):
    _checked(_decoder(), name, 0.5, 65)  # past SnapKV's window of 64
  _checked(_decoder(attention='sigmoid'), 'knorm', 0.5, 10)
  _checked(_decoder(window=4, global_every=2), 'knorm', 0.5, 10)
