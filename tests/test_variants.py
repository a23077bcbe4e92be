"""Attention variants: ALiBi slopes, T5 buckets, linear and sigmoid attention by hand; the
registry and the options each variant declares; every variant's cached decoding equals the full
pass in every model that decodes; the config's checks; a checkpoint saved before the variants
existed still loads and computes the same logits."""

import json
import os

from conftest import build_model
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
import models
from models import interventions
from models.attention_layer import MultiHeadAttention
from models.stack_config import AttentionConfig
from training.checkpoints import Checkpointer

FIXTURE = os.path.join(os.path.dirname(__file__), 'fixtures', 'gpt_before_variants')


def test_alibi_slopes_are_the_papers():
  """8 heads: 1/2, 1/4, ..., 1/256; 6 heads: those of 4, then every other one of 8."""
  np.testing.assert_allclose(attention.alibi_slopes(8), [2.0**-i for i in range(1, 9)])
  np.testing.assert_allclose(
    attention.alibi_slopes(6), [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
  )
  bias = attention.alibi_bias(jnp.asarray([0.5]), jnp.arange(3), jnp.arange(3))
  np.testing.assert_allclose(bias[0], [[0, -0.5, -1], [-0.5, 0, -0.5], [-1, -0.5, 0]])


def test_alibi_bias_at_per_example_slopes_a_scalar_slope_and_a_dtype():
  """Slopes [B, N] give each example its own heads; a scalar slope gives no head axis."""
  relative = jnp.asarray([[0, 1, 2], [-1, 0, 1]])  # [T=2, S=3], j - i
  bias = attention.alibi_bias_at(jnp.asarray([[0.5, 1.0], [0.25, 2.0]]), relative)
  assert bias.shape == (2, 2, 2, 3)  # [B, N, T, S]
  np.testing.assert_allclose(bias[0, 0], [[0, -0.5, -1], [-0.5, 0, -0.5]])
  np.testing.assert_allclose(bias[1, 1], [[0, -2, -4], [-2, 0, -2]])
  scalar = attention.alibi_bias_at(0.25, relative, jnp.bfloat16)
  assert scalar.shape == (2, 3) and scalar.dtype == jnp.bfloat16
  np.testing.assert_allclose(scalar.astype(jnp.float32), [[0, -0.25, -0.5], [-0.25, 0, -0.25]])


@pytest.mark.parametrize(
  'bidirectional, relative, bucket',
  [
    # 16 buckets a direction, 8 exact: offsets 0..7 are their own buckets, then log-spaced:
    # 8 + int(log(d / 8) / log(128 / 8) * 8), capped at 15; keys after the query add 16.
    (True, [0, -3, 3, -8, -20, -127, -500, 500], [0, 3, 19, 8, 10, 15, 15, 31]),
    # 32 buckets, 16 exact: 16 + int(log(20 / 16) / log(8) * 16) = 17; the future is bucket 0.
    (False, [0, -3, 5, -15, -20, -1000], [0, 3, 0, 15, 17, 31]),
  ],
)
def test_t5_buckets_by_hand(bidirectional, relative, bucket):
  got = attention.t5_buckets(jnp.asarray(relative), bidirectional=bidirectional)
  np.testing.assert_array_equal(got, bucket)


def test_t5_bias_reads_the_table_by_bucket():
  table = jnp.arange(64, dtype=jnp.float32).reshape(32, 2)  # [buckets, N=2]
  bias = attention.t5_bias(table, jnp.asarray([5]), jnp.asarray([2, 5, 9]), bidirectional=True)
  # key - query = -3, 0, 4 -> buckets 3, 0, 20; head n reads column n.
  np.testing.assert_array_equal(bias[:, 0], [[6, 0, 40], [7, 1, 41]])


# φ(x) = elu(x) + 1: q = [[0,0],[1,0],[0,2]] -> φq = [[1,1],[2,1],[1,3]];
# k = [[0,1],[1,0],[0,0]] -> φk = [[1,2],[2,1],[1,1]]; v = [1, 2, 4].
LIN_Q = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]], np.float32)
LIN_K = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]], np.float32)
LIN_V = np.array([[1.0], [2.0], [4.0]], np.float32)


@pytest.mark.parametrize(
  'is_causal, expected',
  [
    # i=0: one key; i=1: weights φq1·φk = 4, 5 -> (4 + 10) / 9; i=2: 7, 5, 4 -> 33 / 16.
    (True, [1.0, 14 / 9, 33 / 16]),
    # Every query sees every key: i=0: 3, 3, 2 -> 17 / 8; i=1: 4, 5, 3 -> 26 / 12; i=2: 33 / 16.
    (False, [17 / 8, 26 / 12, 33 / 16]),
  ],
)
def test_linear_attention_three_tokens_by_hand(is_causal, expected):
  out = attention.linear_attention(LIN_Q, LIN_K, LIN_V, is_causal=is_causal, chunk=2)
  np.testing.assert_allclose(out[:, 0], expected, rtol=1e-6)
  weights = attention.linear_attention_weights(LIN_Q, LIN_K, is_causal=is_causal)
  np.testing.assert_allclose(weights @ LIN_V, out, rtol=1e-6)


def test_linear_attention_state_continues_a_sequence(rng):
  """Two blocks through the running state equal one causal pass; a masked key adds nothing."""
  q, k, v = (rng.standard_normal((2, 7, 4)).astype(np.float32) for _ in range(3))
  whole = attention.linear_attention(q, k, v, is_causal=True, chunk=3)
  first, state = attention.linear_attention(
    q[:, :4], k[:, :4], v[:, :4], is_causal=True, return_state=True
  )
  second = attention.linear_attention(q[:, 4:], k[:, 4:], v[:, 4:], is_causal=True, state=state)
  np.testing.assert_allclose(np.concatenate([first, second], 1), whole, atol=1e-5)
  mask = np.ones((2, 7), bool)
  mask[:, 3] = False
  dropped = attention.linear_attention(q, k, v, mask=mask)
  kept = [0, 1, 2, 4, 5, 6]
  np.testing.assert_allclose(
    dropped, attention.linear_attention(q, k[:, kept], v[:, kept]), atol=1e-5
  )


def test_hedgehog_feature_map_by_hand():
  """`[softmax(x W), softmax(-x W)]`: with W the identity, x = (0, ln 2) gives (1/3, 2/3) and
  (2/3, 1/3); W's columns are the features (a swap swaps them)."""
  x = jnp.asarray([[0.0, np.log(2.0)]])
  np.testing.assert_allclose(
    attention.hedgehog_feature_map(x, jnp.eye(2)), [[1 / 3, 2 / 3, 2 / 3, 1 / 3]], rtol=1e-6
  )
  swap = jnp.asarray([[0.0, 1.0], [1.0, 0.0]])
  np.testing.assert_allclose(
    attention.hedgehog_feature_map(x, swap), [[2 / 3, 1 / 3, 1 / 3, 2 / 3]], rtol=1e-6
  )


def test_hedgehog_layer_with_grouped_heads_matches_numpy(rng):
  """Learned feature maps reach the right heads: each query head its own W, each key/value head
  its own, under grouped-query attention, in the weights, the output and a decode step."""
  config = AttentionConfig(
    d_model=8, num_heads=4, num_kv_heads=2, attention='linear', feature_map='hedgehog'
  )
  mha = MultiHeadAttention(config, rngs=nnx.Rngs(0))
  assert mha.query_features.shape == (4, 2, 2) and mha.key_features.shape == (2, 2, 2)
  mha.query_features.value = jnp.asarray(rng.standard_normal((4, 2, 2)), jnp.float32)
  mha.key_features.value = jnp.asarray(rng.standard_normal((2, 2, 2)), jnp.float32)
  x = jnp.asarray(rng.standard_normal((2, 5, 8)), jnp.float32)
  out, captured = interventions.capture(mha, x, is_causal=True)
  q, k, v = (np.asarray(captured[name], np.float64) for name in ('queries', 'keys', 'values'))

  def features(x, w):  # [B, heads, L, H], [heads, H, F]
    y = np.einsum('bnlh,nhf->bnlf', x, w)
    e, f = np.exp(y - y.max(-1, keepdims=True)), np.exp(-y - (-y).max(-1, keepdims=True))
    return np.concatenate([e / e.sum(-1, keepdims=True), f / f.sum(-1, keepdims=True)], -1)

  phi_q = features(q, np.asarray(mha.query_features.value, np.float64))
  phi_k = np.repeat(features(k, np.asarray(mha.key_features.value, np.float64)), 2, axis=1)
  scores = np.einsum('bntf,bnsf->bnts', phi_q, phi_k) * np.tril(np.ones((5, 5)))
  expected = scores / scores.sum(-1, keepdims=True)
  np.testing.assert_allclose(captured['weights'], expected, atol=1e-6)
  heads = np.einsum('bnts,bnsv->bntv', expected, np.repeat(v, 2, axis=1))
  np.testing.assert_allclose(captured['heads'], heads, atol=1e-5)
  np.testing.assert_allclose(out, mha(x, is_causal=True), atol=1e-6)
  cache = mha.init_cache(2, 5)  # the running sums over 2 x 2 features
  assert cache['s'].shape == (2, 2, 4, 2)
  first, cache = mha.decode_step(x[:, :3], cache, jnp.int32(0))
  last, _ = mha.decode_step(x[:, 3:], cache, jnp.int32(3))
  np.testing.assert_allclose(jnp.concatenate([first, last], 1), out, atol=1e-5)


def test_window_with_sink_tokens_by_hand():
  """Window 2 with the first token kept: visible keys and the offsets a streaming cache sees."""
  positions = jnp.arange(5)
  mask = attention.window_mask(positions, positions, 2, sink_tokens=1)
  np.testing.assert_array_equal(
    mask, [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 1, 1, 0], [1, 0, 0, 1, 1]]
  )
  offsets = attention.cache_offsets(positions, positions, 2, sink_tokens=1)
  # Token 0 sits right before the window: at most 2 + 1 - 1 - 0 = 2 positions back.
  np.testing.assert_array_equal(
    np.where(mask, offsets, 9),
    [[0, 9, 9, 9, 9], [-1, 0, 9, 9, 9], [-2, -1, 0, 9, 9], [-2, 9, -1, 0, 9], [-2, 9, 9, -1, 0]],
  )
  np.testing.assert_array_equal(
    attention.cache_offsets(positions, positions, 2), positions[None, :] - positions[:, None]
  )


def test_registry_error_lists_the_variants():
  with pytest.raises(ValueError, match=f'valid variants: {", ".join(sorted(attention.VARIANTS))}'):
    attention.get_variant('performer')


@pytest.mark.parametrize(
  'overrides, match',
  [
    (dict(attention='linear', window=4), "attention='linear' cannot take window=4"),
    (dict(attention='sigmoid', softcap=2.0), "needs the variant option 'softcap'"),
    (dict(attention='linear', positions='alibi'), "cannot take positions='alibi'"),
    (dict(attention='linear', score='dot'), "cannot take score='dot'"),
    (dict(feature_map='hedgehog'), "feature_map='hedgehog'.*use attention='linear' or leave"),
    (dict(attention='linear', feature_map='relu'), "feature_map must be one of 'elu', 'hedgehog'"),
    (dict(num_kv_heads=3), 'num_kv_heads must divide num_heads=2'),
    (dict(window=-1), 'window must be a non-negative integer'),
    (dict(softcap=-1.0), 'softcap must be a non-negative number'),
    (
      dict(attention='performer'),
      f'attention must be one of {", ".join(map(repr, sorted(attention.VARIANTS)))}',
    ),
    (dict(cache_dtype='int8'), "cache_dtype must be one of 'float32', 'bfloat16'"),
    (
      dict(sink_tokens=2, positions='alibi'),
      'sink_tokens=2 keeps the first tokens visible past a sliding window; set window > 0 too',
    ),
    (dict(sink_tokens=-1), 'sink_tokens must be a non-negative integer'),
    (
      dict(sink_tokens=1, window=4, positions='rope', attention='sigmoid'),
      "sink_tokens=1, which needs the variant option 'scores'",
    ),
    (
      dict(sink_tokens=1, window=4, positions='learned'),
      "positions='learned' fixes in the embeddings",
    ),
  ],
)
def test_bad_variant_settings_are_one_sentence(overrides, match):
  config = models.default_config(
    'decoder_lm', num_layers=1, d_model=8, num_heads=2, d_ff=8, **overrides
  )
  with pytest.raises(ValueError, match=match):
    models.build(config, vocab_size=5, pad_id=0, rngs=nnx.Rngs(0))
  vit = models.default_config('vit', positions='none')
  with pytest.raises(
    ValueError, match="positions must be one of 'learned', 'sinusoidal', 'rope', 'alibi', 't5'"
  ):
    models.build(vit, image_shape=(4, 4, 1), num_classes=2, rngs=nnx.Rngs(0))


def test_grouped_heads_and_qk_norm_match_numpy(rng):
  """GQA (4 query heads, 2 key/value heads) with qk-norm and a sink equals NumPy."""
  config = AttentionConfig(d_model=8, num_heads=4, num_kv_heads=2, qk_norm=True, sink=True)
  mha = MultiHeadAttention(config, rngs=nnx.Rngs(0))
  mha.sink[...] = jnp.asarray([0.5, -1.0, 0.0, 2.0])
  x = rng.standard_normal((2, 5, 8)).astype(np.float32)
  out = mha(jnp.asarray(x), is_causal=True)
  weights = interventions.capture(mha, jnp.asarray(x), is_causal=True)[1]['weights']
  param = lambda p: np.asarray(p[...], np.float64)
  heads = lambda linear, n: (
    (x @ param(linear.kernel) + param(linear.bias)).reshape(2, 5, n, 2).transpose(0, 2, 1, 3)
  )  # [B, n, T, 2]
  rms = lambda y: y / np.sqrt(np.mean(y * y, -1, keepdims=True) + 1e-6)
  q, k, v = rms(heads(mha.w_q, 4)), rms(heads(mha.w_k, 2)), heads(mha.w_v, 2)
  k, v = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)  # head n reads n // 2
  scores = np.einsum('bnth,bnsh->bnts', q, k) / np.sqrt(2)
  scores = np.where(np.tril(np.ones((5, 5), bool)), scores, -np.inf)
  sink = np.exp(param(mha.sink))[None, :, None, None]
  w = np.exp(scores) / (np.exp(scores).sum(-1, keepdims=True) + sink)
  ref = np.einsum('bnts,bnsh->bnth', w, v).transpose(0, 2, 1, 3).reshape(2, 5, 8)
  np.testing.assert_allclose(weights, w, atol=1e-5)
  np.testing.assert_allclose(out, ref @ param(mha.w_o.kernel) + param(mha.w_o.bias), atol=1e-5)
  assert mha.w_k.kernel.shape == (8, 4) and mha.init_cache(2, 9)['k'].shape == (2, 2, 9, 2)


# Every variant appears in at least one setting of every model that decodes.
LM_VARIANTS = [
  dict(num_kv_heads=2, window=3, sink_tokens=2, positions='alibi'),  # the prompt outgrows both
  dict(num_kv_heads=1, positions='t5', sink=True),
  dict(qk_norm=True, softcap=2.0, window=4),
  dict(attention='linear', num_kv_heads=2),
  dict(attention='linear', num_kv_heads=1, feature_map='hedgehog'),
  dict(attention='sigmoid', num_kv_heads=2, window=3, sink_tokens=1, positions='alibi'),
]
SEQ_VARIANTS = [
  dict(num_kv_heads=1, window=2, positions='t5', sink=True, softcap=3.0),
  dict(num_kv_heads=2, window=3, positions='alibi', qk_norm=True),
  dict(attention='linear', qk_norm=True, positions='rope'),
  dict(attention='sigmoid', positions='t5'),
]


def _decode_all(model, start, ids, first: int, full):
  """Logits of decode_step at positions first.. of `ids`, the cache, and `full(model)` (the
  teacher-forced logits), compiled as one program."""
  graphdef, state = nnx.split(model)

  @jax.jit
  def run(state, start, ids):
    model = nnx.merge(graphdef, state)
    cache = model.init_decode_cache(start, max_length=ids.shape[1])

    def step(cache, xs):
      logits, cache = model.decode_step(xs[0], xs[1], cache)
      return cache, logits

    steps = jnp.arange(ids.shape[1] - first, dtype=jnp.int32)
    cache, logits = jax.lax.scan(step, cache, (ids[:, first:].T, steps))
    return jnp.swapaxes(logits, 0, 1), cache, full(model)

  return run(state, start, ids)


@pytest.mark.parametrize('variant', LM_VARIANTS, ids=lambda v: '-'.join(map(str, v.values())))
def test_decoder_lm_cached_decoding_equals_the_full_pass(rng, variant):
  """A 5-token prompt prefilled in one pass, then 5 steps: the logits of the full pass; a
  windowed cache holds the window and no more, a linear one its fixed-size sums."""
  model = build_model(
    'decoder_lm',
    vocab_size=11,
    pad_id=0,
    num_layers=1,
    d_model=16,
    num_heads=4,
    d_ff=16,
    **{'positions': 'rope', **variant},
    rngs=nnx.Rngs(0),
  )
  ids = jnp.asarray(rng.integers(1, 11, (2, 10)))
  logits, cache, full = _decode_all(model, ids[:, :5], ids, 4, lambda m: m.token_logits(ids))
  np.testing.assert_allclose(logits, full[:, 4:], atol=2e-5)
  layer = cache['layers'][0]
  kv_heads = variant.get('num_kv_heads', 4)
  if variant.get('attention') == 'linear':
    features = 8 if variant.get('feature_map') == 'hedgehog' else 4  # [softmax(xW), softmax(-xW)]
    assert layer['s'].shape == (2, kv_heads, features, 4)
    assert layer['z'].shape == (2, kv_heads, features)
  else:
    slots = variant.get('window', 0) + variant.get('sink_tokens', 0) or 4 + 10  # or P-1+length
    assert layer['k'].shape == (2, kv_heads, slots, 4)


@pytest.mark.parametrize(
  'variant',
  SEQ_VARIANTS,
  ids=('mqa-window-t5-sink-softcap', 'gqa-window-alibi', 'linear-rope', 'sigmoid-t5'),
)
def test_transformer_and_captioner_cached_decoding_equals_teacher_forcing(rng, variant):
  transformer = build_model(
    'transformer',
    input_vocab_size=9,
    output_vocab_size=9,
    pad_id=0,
    num_layers=1,
    d_model=16,
    num_heads=4,
    d_ff=16,
    max_length=16,
    **variant,
    rngs=nnx.Rngs(0),
  )
  source, targets = jnp.asarray(rng.integers(1, 9, (2, 6))), jnp.asarray(rng.integers(1, 9, (2, 7)))
  logits, _, full = _decode_all(transformer, source, targets, 0, lambda m: m(source, targets))
  np.testing.assert_allclose(logits, full, atol=2e-5)
  captions = {key: value for key, value in variant.items() if key != 'positions'}
  captioner = build_model(
    'captioner',
    image_shape=(8, 8, 1),
    vocab_size=9,
    pad_id=0,
    decoder='transformer',
    encoder='vit',
    patch_size=4,
    d_model=16,
    num_heads=4,
    d_ff=16,
    **captions,
    rngs=nnx.Rngs(0),
  )
  images = jnp.asarray(rng.random((2, 8, 8, 1)), jnp.float32)
  logits, _, full = _decode_all(
    captioner, images, targets, 0, lambda m: m.caption_logits(images, targets)
  )
  np.testing.assert_allclose(logits, full, atol=2e-5)


def test_bfloat16_cache_halves_the_cache_and_stays_close(rng):
  model = build_model(
    'decoder_lm',
    vocab_size=11,
    pad_id=0,
    num_layers=1,
    d_model=16,
    num_heads=4,
    d_ff=16,
    cache_dtype='bfloat16',
    rngs=nnx.Rngs(0),
  )
  ids = jnp.asarray(rng.integers(1, 11, (2, 8)))
  logits, cache, full = _decode_all(model, ids[:, :1], ids, 0, lambda m: m.token_logits(ids))
  assert cache['layers'][0]['k'].dtype == jnp.bfloat16
  np.testing.assert_allclose(logits, full, atol=3e-2)


def test_a_checkpoint_saved_before_the_variants_loads_and_computes_the_same_logits():
  """A 1-layer GPT (rotary) trained 2 steps by the code before this seam existed: its
  parameters keep their names and shapes, and its logits on fixed ids are unchanged."""
  with open(os.path.join(FIXTURE, 'model.json')) as f:
    model_config = json.load(f)['model']
  arrays = Checkpointer(os.path.join(FIXTURE, 'checkpoints'), max_to_keep=1).read_arrays(2)
  vocab = arrays['params.embed.embed.embedding'].shape[0]
  model = models.build(model_config, vocab_size=vocab, pad_id=0, rngs=nnx.Rngs(1))
  graphdef, state = nnx.split(model)
  pure = nnx.to_pure_dict(state)
  paths, treedef = jax.tree_util.tree_flatten_with_path(pure)
  names = ['params.' + jax.tree_util.keystr(path, simple=True, separator='.') for path, _ in paths]
  saved = {name for name in arrays if name.startswith('params.')}
  assert set(names) == saved
  nnx.replace_by_pure_dict(state, jax.tree.unflatten(treedef, [arrays[n] for n in names]))
  ids = (np.arange(24).reshape(2, 12) * 5) % vocab
  logits = jax.jit(lambda state: nnx.merge(graphdef, state).token_logits(ids))(state)
  np.testing.assert_allclose(
    logits, np.load(os.path.join(FIXTURE, 'expected_logits.npy')), atol=1e-5
  )


def _sigmoid_reference(q, k, mask):
  """NumPy sigmoid attention weights: sigma(q k^T / sqrt(H) - log(visible keys)), 0 if masked."""
  scores = np.einsum('...th,...sh->...ts', q, k) / np.sqrt(q.shape[-1])
  count = np.maximum(mask.sum(-1, keepdims=True), 1)
  return np.where(mask, 1 / (1 + np.exp(-(scores - np.log(count)))), 0.0)


def test_sigmoid_attention_two_tokens_by_hand():
  """q = k = [[1, 0], [0, 2]], causal: query 0 sees one key (b = -log 1 = 0), query 1 two
  (b = -log 2); scores are q.k / sqrt(2)."""
  x = jnp.asarray([[1.0, 0.0], [0.0, 2.0]])
  sigma = lambda z: 1 / (1 + np.exp(-z))
  expected = [
    [sigma(1 / np.sqrt(2)), 0.0],
    [sigma(0.0 - np.log(2)), sigma(4 / np.sqrt(2) - np.log(2))],
  ]
  weights = attention.sigmoid_attention_weights(x, x, is_causal=True)
  np.testing.assert_allclose(weights, expected, rtol=1e-6)
  v = jnp.asarray([[1.0, 10.0], [100.0, 1000.0]])
  np.testing.assert_allclose(
    attention.sigmoid_attention(x, x, v, is_causal=True), np.asarray(expected) @ v, rtol=1e-6
  )


def test_sigmoid_attention_with_mask_window_and_bias_matches_numpy(rng):
  q, k = rng.standard_normal((2, 3, 6, 4)), rng.standard_normal((2, 3, 6, 4))
  v, bias = rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((3, 6, 6))
  keys = rng.random((2, 1, 1, 6)) > 0.3
  band = np.abs(np.arange(6)[:, None] - np.arange(6)[None, :]) < 2  # window=2, both sides
  visible = keys & band
  scores = np.einsum('...th,...sh->...ts', q, k) / 2.0 + bias
  count = np.maximum(visible.sum(-1, keepdims=True), 1)
  expected = np.where(visible, 1 / (1 + np.exp(-(scores - np.log(count)))), 0.0)
  options = dict(mask=jnp.asarray(keys), bias=jnp.asarray(bias, jnp.float32), window=2)
  f32 = lambda x: jnp.asarray(x, jnp.float32)
  weights = attention.sigmoid_attention_weights(f32(q), f32(k), **options)
  np.testing.assert_allclose(weights, expected, atol=1e-6)
  out = attention.sigmoid_attention(f32(q), f32(k), f32(v), **options)
  np.testing.assert_allclose(out, np.einsum('...ts,...sv->...tv', expected, v), atol=1e-5)


def test_a_new_variant_is_its_registry_entry_and_its_declared_options():
  """Every variant's functions take exactly the options it declares, and the configuration
  refuses what needs another, by the declaration alone (no variant named anywhere else)."""
  import inspect

  for name, variant in attention.VARIANTS.items():
    takes = set(inspect.signature(variant.weights).parameters) - {'q', 'k', 'mask', 'is_causal'}
    assert takes == set(variant.options) - set(attention.RUN_OPTIONS), name
    attend = inspect.signature(variant.attend).parameters
    assert set(variant.options) - set(attend) <= {'dropout_rate'}, name  # via **dropout
  sigmoid = attention.VARIANTS['sigmoid'].options
  assert 'bias' in sigmoid and 'alibi_slopes' not in sigmoid and 'softcap' not in sigmoid
  AttentionConfig(attention='sigmoid', positions='alibi', window=4, attention_dropout_rate=0.1)
  for refused in (dict(softcap=1.0), dict(sink=True), dict(score='dot'), dict(num_kv_heads=9)):
    with pytest.raises(ValueError):
      AttentionConfig(attention='sigmoid', **refused)


def test_sigmoid_layer_with_grouped_heads_and_alibi_matches_numpy(rng):
  """ALiBi reaches a variant without `alibi_slopes` as a bias array; GQA repeats key heads."""
  config = AttentionConfig(d_model=8, num_heads=4, num_kv_heads=2, attention='sigmoid')
  config_alibi = AttentionConfig(**{**config.__dict__, 'positions': 'alibi'})
  x = jnp.asarray(rng.standard_normal((2, 5, 8)), jnp.float32)
  for cfg in (config, config_alibi):
    mha = MultiHeadAttention(cfg, rngs=nnx.Rngs(0))
    out, captured = interventions.capture(mha, x, is_causal=True)
    q, k = (np.asarray(captured[name], np.float64) for name in ('queries', 'keys'))
    k = np.repeat(k, 2, axis=1)
    causal = np.tril(np.ones((5, 5), bool))
    expected = _sigmoid_reference(q, k, causal)
    if cfg.positions == 'alibi':
      slopes = np.asarray(attention.alibi_slopes(4))[:, None, None]
      distance = np.arange(5)[:, None] - np.arange(5)[None, :]
      scores = np.einsum('bnth,bnsh->bnts', q, k) / np.sqrt(2) - slopes * np.abs(distance)
      expected = np.where(
        causal, 1 / (1 + np.exp(-(scores - np.log(causal.sum(-1, keepdims=True))))), 0
      )
    np.testing.assert_allclose(captured['weights'], expected, atol=1e-5)
    np.testing.assert_allclose(out, mha(x, is_causal=True), atol=1e-6)
