"""Vision models and the attention functions they use: patches, 2-D positions, rollout, the
doubly stochastic penalty, ViT and the Captioner, against hand-computed values."""

import functools

from conftest import build_model
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from attention import attention_rollout, doubly_stochastic_penalty, sinusoidal_positions_2d
import models
from models import generation
from models.captioning import Captioner
from models.interfaces import EncoderDecoder, ImageCaptioner, ImageClassifier
from models.vision import ViT, interpolate_positions, patchify, unpatchify

SHAPE = (8, 12, 1)  # rectangular on purpose: rows and columns must not be mixed up
TINY = dict(d_model=16, num_heads=4, d_ff=32)  # L = 2 layers, N = 4 heads: axes told apart
PAD, BOS, EOS, VOCAB = 0, 1, 2, 9


def images(batch: int = 2, shape=SHAPE, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).random((batch, *shape)).astype(np.float32)


# Whole calls compiled once: run op by op, every small op of a new shape compiles on its own.
@nnx.jit
def classify(model, x):
  return model.classify_image(x)


@nnx.jit
def classify_weights(model, x):
  """`(logits, self-attention [B, L, N, T, T])`, the role `self` of `ViT.attention_names` read by
  capture (inside the jit)."""
  logits, captured = models.interventions.capture(model, x, method='classify_image')
  return logits, models.interventions.stack(captured, ViT.attention_names['self'])


@nnx.jit
def vit_states(model, x):
  return model.encoder(x)


@nnx.jit
def encode(model, x):
  return model.encode_image(x)


@nnx.jit
def caption(model, x, ids):
  return model.caption_logits(x, ids)


@nnx.jit
def caption_weights(model, x, ids):
  """`(logits, {role: weights [B, L, ...]})` for each role of the captioner's `attention_names`
  (they depend on its encoder and decoder), read by capture (inside the jit)."""
  logits, captured = models.interventions.capture(model, x, ids, method='caption_logits')
  stack = models.interventions.stack
  return logits, {role: stack(captured, p) for role, p in model.attention_names.items()}


@nnx.jit(static_argnames='max_length')
def init_cache(model, x, max_length):
  return model.init_decode_cache(x, max_length)


@nnx.jit
def decode_step(model, ids, step, cache):
  return model.decode_step(ids, step, cache)


def test_patchify_order_and_round_trip():
  """Patch 0 is the top-left block, patch 1 the block to its right, patch gw the one below."""
  x = np.arange(2 * 4 * 6 * 2, dtype=np.float32).reshape(2, 4, 6, 2)  # [B, H=4, W=6, C=2]
  patches = np.asarray(patchify(x, (2, 3)))  # grid 2 x 2
  assert patches.shape == (2, 4, 2 * 3 * 2)
  np.testing.assert_array_equal(patches[:, 0], x[:, 0:2, 0:3].reshape(2, -1))
  np.testing.assert_array_equal(patches[:, 1], x[:, 0:2, 3:6].reshape(2, -1))
  np.testing.assert_array_equal(patches[:, 2], x[:, 2:4, 0:3].reshape(2, -1))
  np.testing.assert_array_equal(unpatchify(patches, (2, 2), (2, 3)), x)
  square = np.asarray(patchify(x, 2))  # grid 2 x 3
  np.testing.assert_array_equal(square[:, 2], x[:, 0:2, 4:6].reshape(2, -1))
  np.testing.assert_array_equal(square[:, 3], x[:, 2:4, 0:2].reshape(2, -1))
  np.testing.assert_array_equal(unpatchify(square, (2, 3), 2), x)


def test_patch_size_that_does_not_divide_the_image_raises():
  with pytest.raises(ValueError, match=r'patch_size \(4, 4\).*\(4, 6\)'):
    patchify(np.zeros((1, 4, 6, 1), np.float32), 4)
  with pytest.raises(ValueError, match='patch_size'):
    ViT(image_shape=SHAPE, num_classes=3, patch_size=3, rngs=nnx.Rngs(0))


def test_interpolate_positions():
  """Same grid: the table itself; 1x2 -> 1x3 by hand: the ends stay, the middle is the mean."""
  table = np.array([[1.0, 10.0], [3.0, 30.0]], np.float32)  # [1*2, D=2]
  assert interpolate_positions(table, (1, 2), (1, 2)) is table
  np.testing.assert_allclose(
    interpolate_positions(jnp.asarray(table), (1, 2), (1, 3)),
    [[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]],
    atol=1e-6,
  )


def test_sinusoidal_positions_2d_matches_the_formula():
  """First half: PE(row) with F/2 features; second half: PE(column); row-major order."""
  h, w, f = 2, 3, 8

  def pe(p, dim):
    i = np.arange(dim) // 2
    angle = p / 10000.0 ** (2 * i / dim)
    return np.where(np.arange(dim) % 2 == 0, np.sin(angle), np.cos(angle))

  expected = [np.concatenate([pe(r, f // 2), pe(c, f // 2)]) for r in range(h) for c in range(w)]
  np.testing.assert_allclose(sinusoidal_positions_2d(h, w, f), expected, atol=1e-6)
  with pytest.raises(ValueError, match='multiple of 4'):
    sinusoidal_positions_2d(2, 2, 6)


def test_attention_rollout_hand_example():
  """Two layers, two heads, two tokens, worked by hand.

  Layer 1: heads [[1,0],[1,0]] and [[1,0],[0,1]] average to [[1,0],[.5,.5]]; with the residual,
  0.5 A + 0.5 I = [[1,0],[.25,.75]]. Layer 2: both heads swap, [[0,1],[1,0]] -> [[.5,.5],[.5,.5]].
  Rollout = A2 A1 = [[.625,.375],[.625,.375]]; without the residual [[0,1],[1,0]] [[1,0],[.5,.5]].
  """
  layer1 = [[[1, 0], [1, 0]], [[1, 0], [0, 1]]]
  layer2 = [[[0, 1], [1, 0]], [[0, 1], [1, 0]]]
  weights = np.array([layer1, layer2], np.float32)  # [L=2, N=2, T=2, T=2]
  np.testing.assert_allclose(attention_rollout(weights), [[0.625, 0.375], [0.625, 0.375]])
  np.testing.assert_allclose(attention_rollout(weights, residual=False), [[0.5, 0.5], [1, 0]])


def test_attention_rollout_batched_under_jit_matches_numpy():
  weights = np.random.default_rng(0).dirichlet(np.ones(5), size=(3, 4, 2, 5))  # [B, L, N, T, T]
  rollout = jax.jit(attention_rollout)(weights)  # [B=3, T, T]
  expected = np.broadcast_to(np.eye(5), (3, 5, 5))
  for layer in range(4):
    mixed = 0.5 * weights[:, layer].mean(axis=1) + 0.5 * np.eye(5)  # [B, T, T]
    expected = mixed @ expected
  assert rollout.shape == (3, 5, 5)
  np.testing.assert_allclose(rollout, expected, atol=1e-5)
  np.testing.assert_allclose(rollout.sum(-1), 1.0, atol=1e-5)


def test_doubly_stochastic_penalty_by_hand():
  """Regions' sums over steps: (.9+.6, .1+.4) = (1.5, .5) -> .25 + .25; unmasked (2, 1) -> 1."""
  alpha = np.array([[0.9, 0.1], [0.6, 0.4], [0.5, 0.5]], np.float32)  # [T=3, R=2]
  batch = np.stack([alpha, alpha])
  mask = np.array([[True, True, False], [True, True, True]])
  np.testing.assert_allclose(doubly_stochastic_penalty(batch, mask), [0.5, 1.0], atol=1e-6)
  np.testing.assert_allclose(doubly_stochastic_penalty(alpha), 1.0, atol=1e-6)
  grads = jax.grad(lambda a: doubly_stochastic_penalty(a, mask).sum())(jnp.asarray(batch))
  np.testing.assert_array_equal(grads[0, 2], 0.0)  # the padding step gets no gradient


def vit(**overrides) -> ViT:
  return _vit(**overrides)


@functools.cache  # one model per setting for the whole file: building compiles its initialisers
def _vit(**overrides) -> ViT:
  settings = dict(image_shape=SHAPE, num_classes=3, patch_size=(2, 4), num_layers=2, **TINY)
  return build_model('vit', **{**settings, **overrides}, rngs=nnx.Rngs(0))


@pytest.mark.parametrize('pooling, tokens', [('cls', 1 + 4 * 3), ('mean', 4 * 3)])
def test_vit_shapes_and_pooling(pooling, tokens):
  """Grid (8/2, 12/4) = (4, 3); 'cls' classifies token 0, 'mean' the mean of the patches."""
  model = vit(pooling=pooling)
  x = images()
  logits, weights = classify_weights(model, x)
  assert model.grid == (4, 3) and logits.shape == (2, 3) and logits.dtype == jnp.float32
  assert weights.shape == (2, 2, 4, tokens, tokens)
  np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
  states = vit_states(model, x)  # [B, T, D]
  pooled = states[:, 0] if pooling == 'cls' else states.mean(axis=1)
  np.testing.assert_allclose(logits, model.head(pooled), atol=1e-5)


def test_vit_sinusoidal_positions_have_no_parameters():
  learned, fixed = vit(), vit(positions='sinusoidal')
  count = lambda m: sum(x.size for x in jax.tree.leaves(nnx.state(m, nnx.Param)))
  assert count(learned) - count(fixed) == 4 * 3 * 16
  assert np.all(np.isfinite(classify(fixed, images())))
  with pytest.raises(ValueError, match='d_model must be a multiple of 4'):
    vit(positions='sinusoidal', d_model=18, num_heads=3)


def test_vit_rejects_bad_images_and_arguments():
  model = vit()
  with pytest.raises(ValueError, match=r'image_shape=\(8, 12, 1\)'):
    model.classify_image(np.zeros((2, 12, 8, 1), np.float32))
  with pytest.raises(ValueError, match='image_shape must be three positive integers'):
    vit(image_shape=(8, 12))
  with pytest.raises(ValueError, match='pooling'):
    vit(pooling='max')


def test_vit_train_steps_reduce_the_loss():
  """A jitted step over split parameters, dropout on, as training/ runs one."""
  model = vit()  # dropout_rate=0.1; split below, so the shared model is not changed
  graphdef, params, other = nnx.split(model, nnx.Param, ...)
  tx = optax.adam(3e-3)
  x, labels = jnp.asarray(images(batch=6)), jnp.array([0, 1, 2, 0, 1, 2])

  def loss_of(params, key=None):
    model = nnx.merge(graphdef, params, other)
    run = dict(deterministic=key is None, rngs=None if key is None else nnx.Rngs(dropout=key))
    logits = model.classify_image(x, **run)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

  @jax.jit
  def step(params, opt_state, key):
    grads = jax.grad(loss_of)(params, key)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  evaluate = jax.jit(loss_of)
  before, opt_state = evaluate(params), tx.init(params)
  for i in range(5):
    params, opt_state = step(params, opt_state, jax.random.key(i))
  assert float(evaluate(params)) < float(before) - 0.1


CAPTIONERS = {
  'gru-cnn': dict(decoder='gru', encoder='cnn'),
  'transformer-cnn': dict(decoder='transformer', encoder='cnn', decoder_layers=2),
  'gru-vit': dict(decoder='gru', encoder='vit', patch_size=4, encoder_layers=1),
}


@functools.cache
def captioner(decoder='gru', encoder='cnn', **overrides) -> Captioner:
  settings = dict(
    image_shape=SHAPE,
    vocab_size=VOCAB,
    pad_id=PAD,
    encoder=encoder,
    decoder=decoder,
    cnn_channels=(4, 8),
    embed_dim=8,
    **TINY,
  )
  return Captioner(**{**settings, **overrides}, rngs=nnx.Rngs(1))


@pytest.mark.parametrize('name', sorted(CAPTIONERS))
def test_captioner_shapes_and_cached_decoding(name):
  """Cross-attention sums to one over the regions; step-by-step decoding = teacher forcing."""
  model = captioner(**CAPTIONERS[name])
  x, ids = images(), np.random.default_rng(1).integers(1, VOCAB, (2, 5))
  logits, weights = caption_weights(model, x, ids)
  np.testing.assert_allclose(caption(model, x, ids), logits, atol=1e-5)
  assert model.grid == (2, 3)  # cnn: (8, 12) / 2^2; vit: (8, 12) / 4
  assert logits.shape == (2, 5, VOCAB) and logits.dtype == jnp.float32
  # Per layer and head [B, L, N, T, R]; the GRU attends once a step with one query [B, 1, T, 1, R].
  cross = (2, 2, 4, 5, 6) if model.decoder_kind == 'transformer' else (2, 1, 5, 1, 6)
  assert weights['cross'].shape == cross
  np.testing.assert_allclose(weights['cross'].sum(-1), 1.0, atol=1e-5)
  extra = {
    'transformer-cnn': {'decoder_self': (2, 2, 4, 5, 5)},
    'gru-vit': {'encoder_self': (2, 1, 4, 6, 6)},
  }.get(name, {})
  assert {key: w.shape for key, w in weights.items() if key != 'cross'} == extra
  assert nnx.eval_shape(lambda m, x: m.encode_image(x), model, x).shape == (2, 6, 16)
  cache = init_cache(model, x, max_length=5)
  assert all(leaf.shape[0] == 2 for leaf in jax.tree.leaves(cache))
  stepped = []
  for t in range(5):
    out, cache = decode_step(model, jnp.asarray(ids[:, t]), jnp.int32(t), cache)
    stepped.append(out)
  np.testing.assert_allclose(np.stack(stepped, axis=1), logits, atol=1e-5)


@pytest.mark.parametrize('name, beam_size', [('gru-cnn', 2), ('transformer-cnn', 1)])
def test_generate_captions_images(name, beam_size):
  model = captioner(**CAPTIONERS[name])
  out = generation.generate(
    model, images(), max_length=4, bos_id=BOS, eos_id=EOS, pad_id=PAD, beam_size=beam_size
  )
  assert out.shape == (2, 4) and out.dtype == jnp.int32
  assert np.all((np.asarray(out) >= 0) & (np.asarray(out) < VOCAB))


def test_cnn_regions_see_their_own_part_of_the_image():
  """Region r is grid row r // gw, column r % gw, and sees little beyond its own 4x4 pixels.

  Two stages give region (i, j) a receptive field of rows 4i-3 .. 4i+6 and columns 4j-3 .. 4j+6,
  so pixel (7, 0), the bottom-left one, reaches region 3 = (1, 0) only.
  """
  model = captioner()  # grid 2 x 3
  x = images(batch=1)
  changed = x.copy()
  changed[0, 7, 0] += 1.0
  regions = encode(model, np.concatenate([x, changed]))  # [2, R, D]
  delta = np.abs(regions[1] - regions[0]).max(-1)  # [R]
  assert delta[3] > 0
  np.testing.assert_array_equal(delta[[0, 1, 2, 4, 5]], 0.0)


def test_captioner_rejects_bad_arguments_and_inputs():
  with pytest.raises(ValueError, match='divisible by 8'):
    captioner(cnn_channels=(4, 8, 8), image_shape=(8, 12, 1))
  with pytest.raises(ValueError, match='patch_size'):
    captioner(encoder='vit', patch_size=3)
  with pytest.raises(ValueError, match='encoder must be one of'):
    captioner(encoder='rnn')
  with pytest.raises(ValueError, match='score'):
    captioner(score='nope')
  model = captioner()
  with pytest.raises(ValueError, match='decoder_inputs'):
    model.caption_logits(images(), np.zeros((3, 4), np.int32))
  with pytest.raises(ValueError, match='images'):
    model.caption_logits(images(shape=(12, 8, 1)), np.zeros((2, 4), np.int32))


def test_registry_configs_and_interfaces():
  """default_config leaves out exactly the data args; build takes them from the task."""
  # The tests' tiny sizes, whose initialisers and calls are compiled already.
  vit_config = models.default_config('vit', patch_size=4, num_layers=2, **TINY)
  assert 'image_shape' not in vit_config and 'num_classes' not in vit_config
  assert vit_config.pooling == 'cls' and vit_config.positions == 'learned'
  model = models.build(vit_config, rngs=nnx.Rngs(0), image_shape=SHAPE, num_classes=3)
  assert isinstance(model, ViT) and classify(model, images()).shape == (2, 3)
  cap_config = models.default_config('captioner', cnn_channels=(4, 8), embed_dim=8, **TINY)
  assert {'image_shape', 'vocab_size', 'pad_id'}.isdisjoint(cap_config)
  assert cap_config.encoder == 'cnn' and cap_config.decoder == 'gru'
  model = models.build(
    cap_config, rngs=nnx.Rngs(0), image_shape=SHAPE, vocab_size=VOCAB, pad_id=PAD
  )
  assert caption(model, images(), np.ones((2, 5), np.int32)).shape == (2, 5, VOCAB)
  assert models.fitting(ImageClassifier) == ['vit']
  assert models.fitting(ImageCaptioner) == ['captioner']
  assert 'captioner' not in models.fitting(EncoderDecoder)
