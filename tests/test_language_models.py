"""Rotary attention against a NumPy RoPE; DecoderLM causality and cached decoding; EncoderMLM."""

import math

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
from models.interfaces import Classifier, EncoderDecoder, LanguageModel
from models.language import DecoderLM, EncoderMLM
from models.stack_config import AttentionConfig

TOL = dict(atol=1e-5, rtol=1e-5)
V, PAD = 13, 0
SIZES = dict(
  vocab_size=V,
  pad_id=PAD,
  num_layers=2,
  d_model=8,
  num_heads=2,
  d_ff=16,
  dropout_rate=0.0,
  max_length=16,
)


def rngs(seed: int = 0) -> nnx.Rngs:
  """'rbg' keys: on CPU their random kernels compile far faster than threefry's."""
  return nnx.Rngs(params=jax.random.key(seed, impl='rbg'))


def _jit(method, **kwargs):
  """`method(ids, **kwargs)` under jit: one program per shape, not an eager kernel per op."""
  return jax.jit(lambda ids: method(ids, **kwargs))


def _ids(rng, shape) -> jnp.ndarray:
  return jnp.asarray(rng.integers(1, V, shape), jnp.int32)  # no padding


def _np_rope(x, positions, base=10000.0):
  """RoPE as complex multiplication: pair `(x[2i], x[2i+1])` is `x[2i] + i x[2i+1]`, times
  `exp(i p base^(-2i/H))`."""
  x = np.asarray(x, np.float64)
  h = x.shape[-1]
  angles = np.asarray(positions, np.float64)[:, None] * base ** (-np.arange(0, h, 2) / h)
  z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * angles)  # [..., T, H/2]
  out = np.empty_like(x)
  out[..., 0::2], out[..., 1::2] = z.real, z.imag
  return out


def _np_heads(mha, linear, x):
  """`x [B, T, D]` projected by `linear` and split: `[B, N, T, H]` in float64."""
  out = np.asarray(x, np.float64) @ np.asarray(linear.kernel[...]) + np.asarray(linear.bias[...])
  return out.reshape(*out.shape[:2], mha.num_heads, -1).transpose(0, 2, 1, 3)


def _np_rotary_self_attention(mha, x, positions):
  """Scaled dot-product self-attention with q and k (not v) rotated at `positions`, in NumPy."""
  q = _np_rope(_np_heads(mha, mha.w_q, x), positions)
  k = _np_rope(_np_heads(mha, mha.w_k, x), positions)
  v = _np_heads(mha, mha.w_v, x)
  scores = np.einsum('bnth,bnsh->bnts', q, k) / math.sqrt(q.shape[-1])
  w = np.exp(scores - scores.max(-1, keepdims=True))
  heads = np.einsum('bnts,bnsv->bntv', w / w.sum(-1, keepdims=True), v)
  merged = heads.transpose(0, 2, 1, 3).reshape(*x.shape[:2], -1)  # [B, T, N*Dv]
  return merged @ np.asarray(mha.w_o.kernel[...]) + np.asarray(mha.w_o.bias[...])


def _rotary_mha(**kwargs) -> MultiHeadAttention:
  """Rotary self-attention, D=8, N=2, d_k=4, d_v=3."""
  config = AttentionConfig(d_model=8, num_heads=2, d_k=4, d_v=3, positions='rope', **kwargs)
  return MultiHeadAttention(config, rngs=rngs())


@pytest.mark.parametrize('impl', ('reference', 'chunked'))
def test_rotary_attention_matches_numpy_and_sees_offsets_only(rng, impl):
  """Rotating q, k at p + c gives the output at p; other gaps between positions change it."""
  mha = _rotary_mha(attention_impl=impl)
  x = rng.standard_normal((2, 5, 8)).astype(np.float32)
  base = np.arange(5)
  attend_at = jax.jit(lambda positions: mha(jnp.asarray(x), positions=positions))
  out = mha(jnp.asarray(x))  # default positions 0..T-1
  np.testing.assert_allclose(out, _np_rotary_self_attention(mha, x, base), **TOL)
  shifted = attend_at(jnp.asarray(base + 7))
  np.testing.assert_allclose(shifted, out, **TOL)
  spread = attend_at(jnp.asarray(2 * base))
  np.testing.assert_allclose(spread, _np_rotary_self_attention(mha, x, 2 * base), **TOL)
  assert np.abs(np.asarray(spread) - np.asarray(out)).max() > 1e-3
  per_row = jax.jit(lambda p: mha(jnp.asarray(x), positions=p))(
    jnp.asarray([base, 2 * base])
  )  # positions [B, T]
  np.testing.assert_allclose(per_row, np.stack([out[0], spread[1]]), **TOL)


@pytest.mark.parametrize('kind', ('dot', 'general', 'additive', 'cosine'))
def test_rotary_rotates_queries_and_keys_for_every_score(rng, kind):
  """Each score kind sees NumPy-rotated queries and keys, and unrotated values."""
  mha = _rotary_mha(score=kind)
  x = rng.standard_normal((2, 5, 8)).astype(np.float32)
  positions = np.arange(5) + 3
  out = mha(jnp.asarray(x), positions=jnp.asarray(positions))
  as_f32 = lambda a: jnp.asarray(a, jnp.float32)
  q = as_f32(_np_rope(_np_heads(mha, mha.w_q, x), positions))
  k = as_f32(_np_rope(_np_heads(mha, mha.w_k, x), positions))
  heads = attention.attend(
    attention.masked_softmax(mha._scores(q, k), None), as_f32(_np_heads(mha, mha.w_v, x))
  )  # [B, N, T, Dv]
  np.testing.assert_allclose(out, mha.w_o(attention.merge_heads(heads)), **TOL)


def test_rotary_decode_step_with_prefill_equals_full_causal_pass(rng):
  """A 2-position prefill block then single steps reproduce causal self-attention."""
  mha = _rotary_mha()
  x = jnp.asarray(rng.standard_normal((2, 5, 8)), jnp.float32)
  full = jax.jit(lambda x: mha(x, is_causal=True))(x)
  decode_step = jax.jit(mha.decode_step)
  cache = mha.init_cache(2, 7)
  first, cache = decode_step(x[:, :2], cache, jnp.int32(0))
  steps = [first]
  for t in range(2, 5):
    out, cache = decode_step(x[:, t : t + 1], cache, jnp.int32(t))
    steps.append(out)
  np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, **TOL)
  # The cache holds keys rotated at their positions.
  k = _np_rope(_np_heads(mha, mha.w_k, np.asarray(x)), np.arange(5))
  np.testing.assert_allclose(cache['k'][:, :, :5], k, **TOL)


def _decoder(**kwargs) -> DecoderLM:
  return build_model('decoder_lm', **{**SIZES, **kwargs}, rngs=rngs())


@pytest.mark.parametrize(
  'positions, score',
  [
    ('rope', 'scaled_dot'),
    ('learned', 'scaled_dot'),
    ('sinusoidal', 'scaled_dot'),
    ('rope', 'additive'),
  ],
)
def test_decoder_lm_cannot_see_the_future(rng, positions, score):
  model = _decoder(positions=positions, score=score)
  ids = _ids(rng, (2, 6))
  capture = jax.jit(lambda ids: interventions.capture(model, ids, method='token_logits'))
  logits, captured = capture(ids)
  changed = _jit(model.token_logits)(ids.at[:, 4].set((ids[:, 4] + 1) % V))
  assert logits.shape == (2, 6, V) and logits.dtype == jnp.float32
  assert interventions.stack(captured, DecoderLM.attention_names['self']).shape == (2, 2, 2, 6, 6)
  np.testing.assert_allclose(changed[:, :4], logits[:, :4], atol=1e-6, rtol=0)
  assert np.abs(np.asarray(changed[:, 4:]) - np.asarray(logits[:, 4:])).max(-1).min() > 1e-4


@pytest.mark.parametrize('positions', ('rope', 'learned', 'sinusoidal'))
@pytest.mark.parametrize('prompt_length', (1, 3))
def test_decoder_lm_decode_steps_equal_the_full_pass(rng, positions, prompt_length):
  """Prefill P tokens, then feed the rest teacher-forced: logits match `token_logits`."""
  model = _decoder(positions=positions, tie_output=positions != 'learned')
  ids = _ids(rng, (2, 6))
  full = _jit(model.token_logits)(ids)
  steps = 6 - prompt_length + 1
  cache = jax.jit(model.init_decode_cache, static_argnums=1)(ids[:, :prompt_length], steps)
  np.testing.assert_array_equal(cache['offset'], [prompt_length - 1] * 2)
  assert all(leaf.shape[0] == 2 for leaf in jax.tree.leaves(cache))
  assert cache['layers'][0]['k'].shape == (2, 2, 6, 4)  # P - 1 + max_length slots
  step_fn = jax.jit(model.decode_step)
  out = []
  for t in range(steps):
    logits, cache = step_fn(ids[:, prompt_length - 1 + t], jnp.int32(t), cache)
    out.append(logits)
  np.testing.assert_allclose(jnp.stack(out, axis=1), full[:, prompt_length - 1 :], **TOL)


def test_decoder_lm_output_tying():
  tied, untied = _decoder(), _decoder(tie_output=False)
  assert tied.output_proj is None and untied.output_proj.kernel.shape == (8, V)
  assert DecoderLM.causal and not EncoderMLM.causal


def _mlm(**kwargs) -> EncoderMLM:
  return build_model('encoder_mlm', **{**SIZES, 'num_classes': 3, **kwargs}, rngs=rngs())


def test_encoder_mlm_is_bidirectional_and_padding_invariant(rng):
  model = _mlm()
  token_logits = _jit(model.token_logits)
  ids = _ids(rng, (2, 6))
  logits = token_logits(ids)
  changed = token_logits(ids.at[:, 4].set((ids[:, 4] + 1) % V))
  assert np.abs(np.asarray(changed[:, :4]) - np.asarray(logits[:, :4])).max(-1).min() > 1e-4
  padded = jnp.concatenate([ids, jnp.full((2, 3), PAD, jnp.int32)], axis=1)
  np.testing.assert_allclose(token_logits(padded)[:, :6], logits, **TOL)


def test_encoder_mlm_head_is_tied_to_the_embedding_with_a_bias(rng):
  model = _mlm()
  ids = _ids(rng, (2, 6))
  h = jax.jit(lambda ids: model.mlm_norm(jax.nn.gelu(model.mlm_dense(model.encode(ids)[0]))))(ids)
  table = np.asarray(model.embed.embed.embedding[...])  # [V, D]
  bias = rng.standard_normal(V).astype(np.float32)
  model.mlm_bias[...] = jnp.asarray(bias)
  np.testing.assert_allclose(_jit(model.token_logits)(ids), np.asarray(h) @ table.T + bias, **TOL)
  vocab_sized = [
    p for p, leaf in nnx.to_flat_state(nnx.state(model, nnx.Param)) if V in leaf[...].shape
  ]
  assert sorted(vocab_sized) == [('embed', 'embed', 'embedding'), ('mlm_bias',)]


def test_encoder_mlm_classify(rng):
  model = _mlm()
  ids = _ids(rng, (2, 6)).at[1, 4:].set(PAD)

  @jax.jit
  def classify(ids):
    """The logits and the roles the model lists, `'word'` in the shape of `ids`."""
    logits, captured = interventions.capture(model, ids, method='classify')
    weights = {r: interventions.stack(captured, p) for r, p in EncoderMLM.attention_names.items()}
    return logits, {**weights, 'word': weights['word'][:, 0]}

  logits, weights = classify(ids)
  assert logits.shape == (2, 3) and logits.dtype == jnp.float32
  assert set(EncoderMLM.attention_names) == {'self', 'word'} and weights['word'].shape == (2, 6)
  word = np.asarray(weights['word'])
  np.testing.assert_allclose(word.sum(-1), 1.0, **TOL)
  assert np.all(word[1, 4:] == 0.0)
  # Mean over heads and real queries of the last layer's weights, by hand for row 1.
  last = np.asarray(weights['self'])[1, -1].mean(axis=0)  # [T query, T key]
  np.testing.assert_allclose(word[1], last[:4].mean(axis=0), **TOL)
  np.testing.assert_allclose(_jit(model.classify)(ids), logits, **TOL)
  doc_logits, doc_weights = classify(ids.reshape(2, 2, 3))
  np.testing.assert_allclose(doc_logits, logits, **TOL)
  assert doc_weights['word'].shape == (2, 2, 3) and 'sentence' not in EncoderMLM.attention_names
  with pytest.raises(ValueError, match='without a classification head'):
    _mlm(num_classes=None).classify(ids)


def test_encoder_mlm_parameter_names_do_not_depend_on_the_head():
  flat = lambda m: {p: leaf[...].shape for p, leaf in nnx.to_flat_state(nnx.state(m, nnx.Param))}
  pretrain, finetune = flat(_mlm(num_classes=None)), flat(_mlm(num_classes=4))
  assert all(finetune[p] == shape for p, shape in pretrain.items())
  assert {p[0] for p in set(finetune) - set(pretrain)} == {'pooler', 'classifier'}


def test_protocols_and_build_with_num_classes_from_the_data():
  assert models.fitting(LanguageModel) == ['decoder_lm', 'encoder_mlm']
  assert issubclass(EncoderMLM, Classifier) and not issubclass(DecoderLM, Classifier)
  assert not issubclass(DecoderLM, EncoderDecoder)
  tiny = dict(num_layers=1, d_model=8, num_heads=2, d_ff=16, max_length=16)
  config = models.default_config('encoder_mlm', **tiny)
  assert config.num_classes is None
  model = models.build(config, vocab_size=V, pad_id=PAD, num_classes=3, rngs=rngs())
  assert model.classifier.kernel.shape == (8, 3)
  assert models.build(config, vocab_size=V, pad_id=PAD, rngs=rngs()).classifier is None
  config.num_classes = 4
  with pytest.raises(ValueError, match='num_classes is set from the data'):
    models.build(config, vocab_size=V, pad_id=PAD, num_classes=3, rngs=rngs())
  lm = models.build(
    models.default_config('decoder_lm', **tiny), vocab_size=V, pad_id=PAD, rngs=rngs()
  )
  assert isinstance(lm, DecoderLM) and lm.positions is None


def test_bad_settings_are_clear_errors(rng):
  with pytest.raises(ValueError, match='d_k .* must be even for rotary'):
    AttentionConfig(d_model=8, num_heads=2, d_k=3, positions='rope')
  with pytest.raises(ValueError, match='d_k .* must be even for rotary'):
    _decoder(d_model=6)  # d_k = 3
  _decoder(d_model=6, positions='learned')  # odd d_k is fine without rope
  with pytest.raises(ValueError, match='positions must be one of'):
    _mlm(positions='rotary')
  with pytest.raises(ValueError, match='positions must be one of'):
    build_model(
      'transformer',
      input_vocab_size=V,
      output_vocab_size=V,
      pad_id=PAD,
      positions='rotary',
      rngs=rngs(),
    )
  # The Transformer now takes RoPE too, in the self-attentions of both stacks.
  rotary = nnx.eval_shape(
    lambda: build_model(
      'transformer',
      input_vocab_size=V,
      output_vocab_size=V,
      pad_id=PAD,
      positions='rope',
      rngs=rngs(),
    )
  )
  assert rotary.positions is None and rotary.encoder_layers[0].self_attn.config.positions == 'rope'
  assert rotary.decoder_layers[0].self_attn.config.positions == 'rope'
  assert rotary.decoder_layers[0].cross_attn.config.positions == 'none'
  with pytest.raises(ValueError, match='num_classes must be None or an integer >= 2'):
    _mlm(num_classes=1)
  short = _decoder(positions='learned', max_length=8)
  with pytest.raises(ValueError, match='need 9 positions > max_length=8'):
    short.token_logits(_ids(rng, (1, 9)))
  with pytest.raises(ValueError, match='need 9 positions > max_length=8'):
    short.init_decode_cache(_ids(rng, (1, 4)), 6)  # 4 - 1 + 6
  with pytest.raises(ValueError, match='need 9 positions > max_length=8'):
    _mlm(max_length=8).classify(_ids(rng, (1, 3, 3)))
  with pytest.raises(ValueError, match=r'inputs must be integer ids \[B, T\]'):
    short.token_logits(jnp.zeros((2, 3), jnp.float32))
