"""The Transformer stack's fields Gemma 3 needs, each off by default: `norm_plus_one` (RMSNorms
scaling by 1 + w), `query_scale`, `sandwich_norm`, and the per-layer `global_every` and
`rope_base_global`, against NumPy and by hand; cached decoding with mixed windows equals the
full pass; bad values are one sentence naming the field."""

from conftest import build_model
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from models import interventions
from models.attention_layer import MultiHeadAttention
from models.blocks import EncoderLayer
from models.layers import RMSNorm
from models.stack_config import AttentionConfig, StackConfig


def _rms(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
  return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)


def test_plus_one_rmsnorm_matches_numpy_and_starts_as_the_identity_scale(rng):
  norm = RMSNorm(6, epsilon=1e-5, plus_one=True)
  x = rng.standard_normal((2, 3, 6)).astype(np.float32)
  np.testing.assert_allclose(norm(jnp.asarray(x)), _rms(x, 1e-5), rtol=1e-6)  # w = 0: scale 1
  w = rng.standard_normal(6).astype(np.float32)
  norm.scale[...] = jnp.asarray(w)
  np.testing.assert_allclose(norm(jnp.asarray(x)), _rms(x, 1e-5) * (1 + w), rtol=1e-5)
  # bfloat16 in, bfloat16 out, multiplied by (1 + w) in float32 before the one rounding.
  half = jnp.asarray(x, jnp.bfloat16)
  expected = _rms(np.asarray(half, np.float32), 1e-5) * (1 + w)
  out = norm(half)
  assert out.dtype == jnp.bfloat16
  np.testing.assert_array_equal(out, jnp.asarray(expected, jnp.float32).astype(jnp.bfloat16))


@pytest.mark.parametrize('impl', (None, 'reference', 'chunked'))
def test_query_scale_and_plus_one_qk_norm_match_numpy(rng, impl):
  """Scores `(1 + w_q) rms(q) · (1 + w_k) rms(k) * 0.3` (not d_k^-1/2), causal, one key/value
  head for two query heads, d_k = 6 other than D/N = 4."""
  config = AttentionConfig(
    d_model=8,
    num_heads=2,
    num_kv_heads=1,
    d_k=6,
    d_v=6,
    qkv_bias=False,
    out_bias=False,
    qk_norm=True,
    norm_plus_one=True,
    query_scale=0.3,
    attention_impl=impl,
  )
  mha = MultiHeadAttention(config, rngs=nnx.Rngs(0))
  assert np.all(np.asarray(mha.q_norm[...]) == 0)  # 1 + 0: the identity scale
  wq, wk = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
  mha.q_norm[...], mha.k_norm[...] = jnp.asarray(wq), jnp.asarray(wk)
  x = rng.standard_normal((2, 5, 8)).astype(np.float32)
  out, captured = interventions.capture(mha, jnp.asarray(x), is_causal=True)
  param = lambda p: np.asarray(p[...], np.float64)
  heads = lambda linear, n: (x @ param(linear.kernel)).reshape(2, 5, n, 6).transpose(0, 2, 1, 3)
  q, k, v = (
    _rms(heads(mha.w_q, 2)) * (1 + wq),
    _rms(heads(mha.w_k, 1)) * (1 + wk),
    heads(mha.w_v, 1),
  )
  scores = np.einsum('bnth,bksh->bnts', q, k) * 0.3
  scores = np.where(np.tril(np.ones((5, 5), bool)), scores, -np.inf)
  w = np.exp(scores - scores.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  ref = np.einsum('bnts,bksh->bnth', w, v).transpose(0, 2, 1, 3).reshape(2, 5, 12)
  np.testing.assert_allclose(captured['weights'], w, atol=1e-5)
  np.testing.assert_allclose(out, ref @ param(mha.w_o.kernel), atol=1e-5)
  np.testing.assert_allclose(mha(jnp.asarray(x), is_causal=True), out, atol=1e-5)  # uncaptured


def test_sandwich_norm_normalises_each_sublayers_output_before_the_residual_sum(rng):
  """`x + post(attn(pre(x)))`, then `h + post(ffn(pre(h)))`, with (1 + w) RMSNorms; the
  sublayers are the layer's own, the wiring and the norms NumPy's."""
  stack = StackConfig(
    d_model=8,
    num_heads=2,
    d_ff=16,
    num_layers=1,
    dropout_rate=0.0,
    norm='pre',
    norm_type='rmsnorm',
    norm_plus_one=True,
    sandwich_norm=True,
    positions='none',
  )
  layer = EncoderLayer(stack, rngs=nnx.Rngs(0))
  scales = rng.standard_normal((4, 8)).astype(np.float32)
  norms = [*layer.norms, *layer.post_norms]
  for norm, scale in zip(norms, scales):
    norm.scale[...] = jnp.asarray(scale)
  x = rng.standard_normal((2, 5, 8)).astype(np.float32)
  np_norm = lambda y, i: _rms(np.asarray(y, np.float64)) * (1 + scales[i])
  f32 = lambda y: jnp.asarray(y, jnp.float32)
  h = x + np_norm(layer.self_attn(f32(np_norm(x, 0)), is_causal=True), 2)
  expected = h + np_norm(layer.ffn(f32(np_norm(h, 1))), 3)
  np.testing.assert_allclose(layer(jnp.asarray(x), None, is_causal=True), expected, atol=1e-5)


def test_every_kth_layer_is_global_with_its_own_rope_base_and_decodes_from_its_caches(rng):
  """4 layers, window 2, global_every 2: layers 1 and 3 see every key (rope base 500) and keep a
  full K/V buffer; layers 0 and 2 see two keys (base 10,000) and keep a ring of 2 slots; cached
  decoding past the window gives the full pass's logits."""
  model = build_model(
    'decoder_lm',
    vocab_size=11,
    pad_id=0,
    num_layers=4,
    d_model=16,
    num_heads=2,
    d_ff=16,
    positions='rope',
    window=2,
    global_every=2,
    rope_base_global=500.0,
    rngs=nnx.Rngs(0),
  )
  configs = [layer.self_attn.config for layer in model.layers]
  assert [(c.window, c.rope_base) for c in configs] == [(2, 1e4), (0, 500.0)] * 2
  ids = jnp.asarray(rng.integers(1, 11, (2, 9)))
  full, captured = interventions.capture(model, ids, method='token_logits')
  weights = np.asarray(interventions.stack(captured, model.attention_names['self']))
  far = np.tril(np.ones((9, 9), bool), k=-2)  # keys 2 or more positions back
  assert np.all(weights[:, 0::2][..., far] == 0) and np.all(weights[:, 1::2][..., far] > 0)
  cache = model.init_decode_cache(ids[:, :3], max_length=6)
  assert [layer['k'].shape[2] for layer in cache['layers']] == [2, 2 + 6, 2, 2 + 6]
  graphdef, state = nnx.split(model)
  decode = jax.jit(lambda state, *args: nnx.merge(graphdef, state).decode_step(*args))
  for step in range(6):
    logits, cache = decode(state, ids[:, 2 + step], jnp.int32(step), cache)
    np.testing.assert_allclose(logits, full[:, 2 + step], atol=2e-5)


def test_the_translation_transformer_takes_the_layer_pattern_in_both_stacks():
  model = build_model(
    'transformer',
    input_vocab_size=7,
    output_vocab_size=7,
    pad_id=0,
    num_encoder_layers=3,
    num_decoder_layers=2,
    d_model=8,
    num_heads=2,
    d_ff=8,
    window=2,
    global_every=3,
    rngs=nnx.Rngs(0),
  )
  assert [layer.self_attn.config.window for layer in model.encoder_layers] == [2, 2, 0]
  assert [layer.self_attn.config.window for layer in model.decoder_layers] == [2, 2]


def test_the_fields_are_off_by_default_and_add_no_parameters():
  config = models.default_config('decoder_lm')
  assert (config.query_scale, config.norm_plus_one, config.sandwich_norm) == (None, False, False)
  assert (config.global_every, config.rope_base_global) == (0, None)
  model = build_model('decoder_lm', vocab_size=5, pad_id=0, num_layers=1, rngs=nnx.Rngs(0))
  assert model.layers[0].post_norms is None and model.layers[0].self_attn.q_norm is None


@pytest.mark.parametrize(
  'overrides, match',
  [
    (dict(query_scale=0.0), 'query_scale must be None or a number > 0'),
    (dict(query_scale=0.5, score='dot'), "query_scale .* needs score='scaled_dot'"),
    (dict(query_scale=0.5, attention='sigmoid'), 'cannot take query_scale=0.5'),
    (dict(norm_plus_one='yes'), 'norm_plus_one must be one of False, True'),
    (dict(norm_plus_one=True), "norm_plus_one .* needs norm_type='rmsnorm'"),
    (dict(sandwich_norm='yes'), 'sandwich_norm must be one of False, True'),
    (dict(sandwich_norm=True, norm='post'), "sandwich_norm .* needs norm='pre'"),
    (dict(global_every=-1), 'global_every must be a non-negative integer'),
    (dict(global_every=2), 'global_every=2 makes layers global .* set window > 0'),
    (dict(rope_base_global=1.0), 'rope_base_global must be None or a number > 1'),
    (dict(rope_base_global=1e6, window=2), 'rope_base_global=1000000.0 .* needs global_every'),
    (
      dict(rope_base_global=1e6, window=2, global_every=2, positions='alibi'),
      "needs global_every > 0 and positions='rope'",
    ),
  ],
)
def test_bad_values_are_one_sentence_naming_the_field(overrides, match):
  with pytest.raises(ValueError, match=match):
    StackConfig(**overrides)
  if all(type(value) is not str for value in overrides.values()):  # config.model's types
    config = models.default_config(
      'decoder_lm', num_layers=1, d_model=8, num_heads=2, d_ff=8, **overrides
    )
    with pytest.raises(ValueError, match=match):
      models.build(config, vocab_size=5, pad_id=0, rngs=nnx.Rngs(0))
