"""Presses on a tiny decoder beyond one prefill's eviction: compression while decoding
(`compression.press_again`, `generate.py --press_every`: the evicted cache keeps the slots the
press chose, in position order, and stays the same size), re-rotation, a press in
`continue_prompt`, and KVzip's kept sets from its repeat block."""

from conftest import build_model
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from models import compression, generation

CONTEXT, ROOM, KEPT = 40, 4, 20
PRESS = attention.get_press  # what an entry point resolves a press's name with


@pytest.fixture(scope='module')
def model():
  return build_model(
    'decoder_lm',
    vocab_size=50,
    pad_id=0,
    num_layers=2,
    d_model=24,
    num_heads=6,
    num_kv_heads=2,
    d_ff=32,
    dropout_rate=0.0,
    max_length=128,
    positions='rope',
    rngs=nnx.Rngs(0),
  )


def _decoded(model, name):
  """The prompt's cache pressed to KEPT positions per head, then ROOM tokens decoded on it."""
  prompt = jnp.asarray(np.random.default_rng(0).integers(1, 50, (1, CONTEXT + 1)), jnp.int32)
  cache, queries = compression.prefill(model, prompt, ROOM)
  ratio = 1 - KEPT / CONTEXT
  press = attention.get_press(name)
  scores = compression.layer_scores(model, cache, queries, press, ratio)
  cache = compression.compress(cache, compression.kept_entries(scores, press, ratio), CONTEXT, ROOM)
  for step in range(ROOM):
    cache = model.decode_step(prompt[:, -1], jnp.int32(step), cache)[1]
  return cache


def test_streaming_llm_keeps_the_first_tokens_and_the_latest_while_decoding(model):
  cache = _decoded(model, 'streaming_llm')
  assert cache['layers'][0]['positions'][0, 0].tolist() == [0, 1, 2, 3, *range(24, 44)]
  again = compression.press_again(model, cache, PRESS('streaming_llm'), KEPT, ROOM)
  layer = again['layers'][1]
  latest = [*range(28, 44)]
  assert layer['positions'][0, 1].tolist() == [0, 1, 2, 3, *latest, 44, 45, 46, 47]
  assert layer['heads'][0].tolist() == [[0] * (KEPT + ROOM), [1] * (KEPT + ROOM)]
  assert int(layer['first'][0]) == 44 and int(layer['base'][0]) == KEPT
  assert jax.tree.map(jnp.shape, again) == jax.tree.map(jnp.shape, cache)
  # The kept slots carry their own keys: position 28's key moved from its slot to slot 4.
  before = cache['layers'][1]
  slot = before['positions'][0, 1].tolist().index(28)
  np.testing.assert_array_equal(layer['k'][0, 1, 4], before['k'][0, 1, slot])


def test_knorm_keeps_the_smallest_keys_of_each_head_while_decoding(model):
  cache = _decoded(model, 'knorm')
  layer = cache['layers'][0]
  again = compression.press_again(model, cache, PRESS('knorm'), KEPT, ROOM)['layers'][0]
  for head in range(2):
    norms = np.linalg.norm(np.asarray(layer['k'][0, head]), axis=-1)
    smallest = np.sort(np.argsort(norms, kind='stable')[:KEPT])
    expected = np.asarray(layer['positions'][0, head])[smallest]
    assert again['positions'][0, head, :KEPT].tolist() == expected.tolist()


def test_a_continuation_pressed_every_few_tokens_runs_in_fixed_memory(model):
  prompt = jnp.asarray(np.random.default_rng(1).integers(1, 50, (1, 31)), jnp.int32)
  settings = dict(max_length=11, rng=jax.random.key(0), temperature=0.0)
  tokens = list(
    generation.stream_prompt(model, prompt, **settings, press=(PRESS('knorm'), 0.5), press_every=3)
  )
  assert len(tokens) == 11 and all(0 <= t < 50 for t in tokens)
  with pytest.raises(ValueError, match="press 'tova' reads the prompt's queries"):
    compression.check_settings(PRESS('tova'), 0.5, 30, every=3)  # generate.py's, before the model


def test_rerotated_keys_sit_at_positions_0_to_m_and_decoding_goes_on_from_m(model):
  prompt = jnp.asarray(np.random.default_rng(2).integers(1, 50, (1, CONTEXT + 1)), jnp.int32)
  cache, queries = compression.prefill(model, prompt, ROOM)
  scores = compression.layer_scores(model, cache, queries, PRESS('knorm'), 0.5)
  entries = compression.kept_entries(scores, PRESS('knorm'), 0.5)
  plain = compression.compress(cache, entries, CONTEXT, ROOM)
  rotary = compression.rerotation(model, PRESS('knorm'))
  moved = compression.compress(cache, entries, CONTEXT, ROOM, rotary)
  assert moved['offset'].tolist() == [KEPT]
  layer, before = moved['layers'][1], plain['layers'][1]
  assert layer['positions'][0, 0].tolist() == [*range(KEPT), *range(KEPT, KEPT + ROOM)]
  # Rotated back by where each key was, a moved key is the key the prefill cached.
  back = attention.rotary_embedding(
    layer['k'][:, :, :KEPT], before['positions'][:, :, :KEPT] - jnp.arange(KEPT), base=10000.0
  )
  np.testing.assert_allclose(back, before['k'][:, :, :KEPT], atol=1e-5)
  settings = dict(max_length=5, rng=jax.random.key(0), temperature=0.0, press=(PRESS('knorm'), 0.5))
  assert len(list(generation.stream_prompt(model, prompt, **settings, press_rerotate=True))) == 5
  with pytest.raises(ValueError, match='re-rotation takes a uniform budget'):
    compression.rerotation(model, PRESS('adakv'))


def test_continue_prompt_with_a_press_that_keeps_everything_changes_nothing(model):
  prompt = jnp.asarray(np.random.default_rng(3).integers(1, 50, (2, 21)), jnp.int32)
  settings = dict(max_length=6, rng=jax.random.key(0), temperature=0.0)
  plain = generation.continue_prompt(model, prompt, **settings)
  pressed = generation.continue_prompt(model, prompt, **settings, press=(PRESS('tova'), 0.0))
  np.testing.assert_array_equal(pressed, plain)
  with pytest.raises(
    ValueError, match=r"press 'snapkv' scores by the last 64 queries; the context \(20"
  ):
    generation.continue_prompt(model, prompt, **settings, press=(PRESS('snapkv'), 0.5))


def test_kvzip_keeps_a_layers_budget_over_its_heads_and_the_sink(model):
  context = jnp.asarray(np.random.default_rng(0).integers(1, 50, (1, 61)), jnp.int32)
  repeat = jnp.concatenate([jnp.asarray([[7, 8, 9]]), context[:, 5:]], axis=1)
  masks = compression.kept_positions(model, context, PRESS('kvzip'), 0.25, repeat=repeat, prefix=5)
  for mask in masks:
    # kvpress's count: K * S - int(K * S * ratio) = 122 - 30, two more than K x the per-head
    # budget (2 x int(45.75)); split over the heads as the scores fall.
    assert int(mask.sum()) == 92
    assert bool(mask[0, :, :4].all()) and not bool(mask[0, :, 4].any())  # sink kept, opening 0
