"""HAN, the Transformer classifier and scored attention pooling against NumPy references."""

import functools

from conftest import build_model
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import attention
import models
from models import interventions
from models.classifiers import HAN, TransformerClassifier
from models.interfaces import Classifier, EncoderDecoder
from models.layers import AttentionPooling

TOL = dict(atol=1e-5, rtol=1e-5)
PAD = 0
# Two documents of S=3 sentences of W=4 words: the first has a padding sentence and padding words,
# the second is all padding.
DOCS = np.array(
  [[[5, 3, 7, 0], [2, 9, 0, 0], [0, 0, 0, 0]], [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]], np.int32
)
SENTENCES = np.array([[4, 8, 1, 0, 0], [6, 2, 2, 9, 3]], np.int32)
TINY_HAN = dict(vocab_size=11, num_classes=3, pad_id=PAD, embed_dim=6, hidden_dim=4)
TINY_TC = dict(
  vocab_size=11, num_classes=3, pad_id=PAD, num_layers=2, d_model=8, num_heads=2, d_ff=16
)


def rngs(seed: int = 0, **streams: int) -> nnx.Rngs:
  """An `nnx.Rngs` over 'rbg' keys (fast to compile on CPU), `params` plus any named streams."""
  keys = {name: jax.random.key(s, impl='rbg') for name, s in dict(params=seed, **streams).items()}
  return nnx.Rngs(**keys)


def _build(cls: type, **change) -> nnx.Module:
  """A tiny `cls` with `change`d settings (flat, as `config.model` holds them)."""
  if cls is HAN:
    return HAN(**{**TINY_HAN, **change}, rngs=rngs(0))
  return build_model('transformer_classifier', **{**TINY_TC, **change}, rngs=rngs(0))


@functools.cache
def _model(cls: type, **change) -> nnx.Module:
  """A tiny model, built once per setting; the tests only read it."""
  return _build(cls, **change)


@nnx.jit
def _classify(model: nnx.Module, inputs: jax.Array):
  """`model(inputs)` compiled once per architecture and input shape, not op by op."""
  return model(inputs)


@nnx.jit
def _read(model: nnx.Module, inputs: jax.Array):
  """`(model(inputs), weights)`, captured inside the compiled call: each role of the model's
  `attention_names` that the call recorded (mean pooling records no word weights), `'self'`
  `[B, L, N, T, T]`, `'word'` in the shape of `inputs` and `'sentence'` `[B, S]`."""
  logits, captured = interventions.capture(model, inputs)
  weights = {}
  for role, pattern in model.attention_names.items():
    try:
      weights[role] = interventions.stack(captured, pattern)  # [B, L, ...]
    except KeyError:
      continue
  # HAN pools words sentence by sentence, [B*S, 1, W]; a Transformer's word weights are
  # [B, 1, T] or [B, 1, S, W]; the sentence weights [B, 1, S].
  shapes = {'word': inputs.shape, 'sentence': (inputs.shape[0], -1)}
  return logits, {role: w.reshape(shapes.get(role, w.shape)) for role, w in weights.items()}


def _np(param) -> np.ndarray:
  return np.asarray(param[...], np.float64)


def _softmax(scores, mask):
  """Masked softmax over the last axis in float64; a fully masked row gives zeros."""
  scores = np.where(mask, scores, -np.inf)
  top = np.max(np.where(mask, scores, 0.0), -1, keepdims=True)
  e = np.where(mask, np.exp(scores - top), 0.0)
  return e / np.maximum(e.sum(-1, keepdims=True), 1e-300)


def _np_pool(pool: AttentionPooling, h, mask, score: str = 'dot'):
  """HAN pooling in NumPy: u = tanh(h W + b), score(u_w, u), masked softmax, weighted sum."""
  h = np.asarray(h, np.float64)
  u = np.tanh(h @ _np(pool.proj.kernel) + _np(pool.proj.bias))  # [..., T, A]
  c = _np(pool.context)  # [A]
  if score == 'dot':
    s = u @ c
  elif score == 'scaled_dot':
    s = u @ c / np.sqrt(c.size)
  elif score == 'general':
    s = u @ (c @ _np(pool.score_w))
  elif score == 'additive':
    s = np.tanh(c @ _np(pool.score_wq) + u @ _np(pool.score_wk)) @ _np(pool.score_v)
  else:
    cos = (u @ c) / np.sqrt(((u * u).sum(-1) + 1e-6) * ((c * c).sum() + 1e-6))
    s = _np(pool.score_scale) * cos
  w = _softmax(s, np.asarray(mask))
  return np.einsum('...t,...td->...d', w, h), w


def _finite_gradients(model: nnx.Module, inputs: np.ndarray) -> bool:
  """Whether every parameter gradient of a sum of squared logits is finite (jitted: one compile)."""
  graphdef, params, other = nnx.split(model, nnx.Param, ...)
  loss = lambda p: jnp.sum(nnx.merge(graphdef, p, other)(jnp.asarray(inputs)) ** 2)
  return all(bool(np.all(np.isfinite(g))) for g in jax.tree.leaves(jax.jit(jax.grad(loss))(params)))


@pytest.mark.parametrize('score', ['dot', 'scaled_dot', 'general', 'additive', 'cosine'])
def test_attention_pooling_scores_match_numpy(score, rng):
  pool = AttentionPooling(8, 6, score=score, rngs=rngs(0))
  h = rng.standard_normal((3, 5, 8))
  mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], bool)
  pooled, weights = pool(jnp.asarray(h, jnp.float32), jnp.asarray(mask))
  ref_pooled, ref_w = _np_pool(pool, h, mask, score)
  np.testing.assert_allclose(weights, ref_w, **TOL)
  np.testing.assert_allclose(pooled, ref_pooled, **TOL)
  assert np.all(np.asarray(weights)[~mask] == 0.0)  # exactly zero, not tiny
  np.testing.assert_allclose(np.asarray(weights)[:2].sum(-1), 1.0, **TOL)
  assert np.all(np.asarray(pooled)[2] == 0.0)  # fully masked row: zeros, not NaN
  grads = jax.grad(lambda x: jnp.sum(pool(x, jnp.asarray(mask))[0]))(jnp.asarray(h, jnp.float32))
  assert np.all(np.isfinite(grads))


def test_dot_pooling_is_unchanged():
  """'dot' (the default) adds no parameters and runs exactly the attention_pooling kernel."""
  pool = AttentionPooling(8, 6, rngs=rngs(0))
  assert pool.score == 'dot' and set(nnx.to_pure_dict(nnx.state(pool, nnx.Param))) == {
    'proj',
    'context',
  }
  h = jnp.asarray(np.random.default_rng(1).standard_normal((2, 4, 8)), jnp.float32)
  mask = jnp.array([[True, True, False, False], [True] * 4])
  keys = jnp.tanh(h @ pool.proj.kernel[...] + pool.proj.bias[...])  # [B, T, A]
  expected = attention.attention_pooling(h, pool.context[...], mask, keys=keys)
  for got, want in zip(pool(h, mask), expected):
    np.testing.assert_array_equal(got, want)
  with pytest.raises(ValueError, match="score must be one of 'additive', 'cosine', 'dot'"):
    AttentionPooling(8, score='bilinear', rngs=rngs(0))


def test_han_matches_numpy_pooling_at_both_levels():
  """Word pooling of the word GRU's states, sentence pooling of the sentence GRU's states."""
  model = _model(HAN)
  logits, weights = _read(model, jnp.asarray(DOCS))
  b, s, w = DOCS.shape
  word_mask = DOCS != PAD
  words = model.embed.embedding[...][DOCS.reshape(b * s, w)]  # [B*S, W, E]
  encode = nnx.jit(lambda gru, x, mask: gru(x, mask, deterministic=True, rngs=None))
  h = encode(model.word_encoder, words, jnp.asarray(word_mask.reshape(b * s, w)))
  sentences, word_w = _np_pool(model.word_pool, h, word_mask.reshape(b * s, w))
  sentence_mask = word_mask.any(-1)
  h = encode(
    model.sentence_encoder,
    jnp.asarray(sentences.reshape(b, s, -1), jnp.float32),
    jnp.asarray(sentence_mask),
  )
  doc, sentence_w = _np_pool(model.sentence_pool, h, sentence_mask)
  np.testing.assert_allclose(weights['word'], word_w.reshape(b, s, w), **TOL)
  np.testing.assert_allclose(weights['sentence'], sentence_w, **TOL)
  np.testing.assert_allclose(logits, doc @ _np(model.output.kernel) + _np(model.output.bias), **TOL)
  assert logits.dtype == jnp.float32 and logits.shape == (2, 3)


def test_han_weights_zero_on_padding_sum_to_one_and_padding_cannot_change_logits():
  model = _model(HAN)
  logits, weights = _read(model, jnp.asarray(DOCS))
  word, sentence = np.asarray(weights['word']), np.asarray(weights['sentence'])
  assert word.shape == DOCS.shape and sentence.shape == DOCS.shape[:2]
  assert np.all(word[DOCS == PAD] == 0.0) and np.all(sentence[~(DOCS != PAD).any(-1)] == 0.0)
  np.testing.assert_allclose(word[0, :2].sum(-1), 1.0, **TOL)
  np.testing.assert_allclose(sentence[0].sum(), 1.0, **TOL)
  assert np.all(np.isfinite(logits)) and np.all(sentence[1] == 0.0)  # the all-padding document
  # More padding words and sentences change nothing.
  padded = np.pad(DOCS, ((0, 0), (0, 2), (0, 3)), constant_values=PAD)
  np.testing.assert_allclose(_classify(model, jnp.asarray(padded)), logits, **TOL)


def test_han_sentences_are_one_sentence_documents():
  model = _model(HAN)
  logits, weights = _read(model, jnp.asarray(SENTENCES))
  assert set(weights) == {'word', 'sentence'} and weights['word'].shape == SENTENCES.shape
  np.testing.assert_array_equal(weights['sentence'], 1.0)  # one sentence: all the weight
  np.testing.assert_allclose(logits, _classify(model, jnp.asarray(SENTENCES[:, None])), **TOL)
  np.testing.assert_allclose(np.asarray(weights['word']).sum(-1), 1.0, **TOL)
  assert np.all(np.asarray(weights['word'])[0, 3:] == 0.0)


def test_han_with_another_score_builds_and_runs():
  model = _model(HAN, score='additive', attention_dim=5)
  assert model.word_pool.score_wk.shape == (5, 5)
  _, weights = _read(model, jnp.asarray(DOCS))
  np.testing.assert_allclose(np.asarray(weights['sentence'])[0].sum(), 1.0, **TOL)
  np.testing.assert_allclose(np.asarray(weights['word'])[0, :2].sum(-1), 1.0, **TOL)


@pytest.mark.parametrize('pooling', ['cls', 'mean', 'attention'])
@pytest.mark.parametrize('inputs', [SENTENCES, DOCS], ids=['sentences', 'documents'])
def test_transformer_classifier_poolings_run_with_finite_gradients(pooling, inputs):
  model = _model(TransformerClassifier, pooling=pooling)
  logits, weights = _read(model, jnp.asarray(inputs))
  b, t = inputs.shape[0], inputs[0].size + (pooling == 'cls')
  assert logits.shape == (b, 3) and logits.dtype == jnp.float32 and np.all(np.isfinite(logits))
  assert weights['self'].shape == (b, 2, 2, t, t)
  expected = {'self'} | ({'word'} if pooling != 'mean' else set())
  expected |= {'sentence'} if inputs.ndim == 3 and pooling != 'mean' else set()
  assert set(weights) == expected
  if pooling != 'mean':
    word = np.asarray(weights['word'])
    assert word.shape == inputs.shape and np.all(word[inputs == PAD] == 0.0)
    if pooling == 'cls':  # the last layer's [CLS] row over the tokens, averaged over heads
      cls_row = np.asarray(weights['self'])[:, -1, :, 0, 1:].mean(1)
      np.testing.assert_allclose(word.reshape(b, -1), cls_row, **TOL)
    if inputs.ndim == 3:
      np.testing.assert_allclose(weights['sentence'], word.sum(-1), **TOL)
  if inputs.ndim == 3:  # with an all-padding document
    assert _finite_gradients(model, inputs)


def test_transformer_classifier_poolings_match_numpy_on_its_own_encoder_states():
  ids = jnp.asarray(DOCS.reshape(2, -1))
  mask = DOCS.reshape(2, -1) != PAD
  for pooling in ('mean', 'attention', 'cls'):
    model = _model(TransformerClassifier, pooling=pooling)
    states, _ = nnx.jit(lambda model, ids: model.encode(ids))(model, ids)
    states = np.asarray(states, np.float64)
    if pooling == 'mean':
      pooled = (states * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1)
    elif pooling == 'attention':
      pooled, ref_w = _np_pool(model.pool, states, mask)
      np.testing.assert_allclose(
        _read(model, jnp.asarray(DOCS))[1]['word'], ref_w.reshape(DOCS.shape), **TOL
      )
    else:
      assert states.shape[1] == ids.shape[1] + 1
      pooled = states[:, 0]
    expected = pooled @ _np(model.output.kernel) + _np(model.output.bias)
    np.testing.assert_allclose(_classify(model, jnp.asarray(DOCS)), expected, **TOL)
  assert np.all(expected[1] != 0.0)  # [CLS] is real even in an all-padding document


def test_transformer_classifier_reads_documents_as_one_flat_sequence():
  model = _model(TransformerClassifier, positions='learned', max_length=12)
  np.testing.assert_allclose(
    _classify(model, jnp.asarray(DOCS)), _classify(model, jnp.asarray(DOCS.reshape(2, 12))), **TOL
  )
  _, weights = _read(model, jnp.asarray(DOCS))
  np.testing.assert_allclose(np.asarray(weights['word'])[0].sum(), 1.0, **TOL)
  with pytest.raises(
    ValueError,
    match=r'inputs have 16 tokens \(S\*W for documents\) > '
    'max_length=12',
  ):
    model(jnp.zeros((1, 4, 4), jnp.int32))


@pytest.mark.parametrize(
  'cls, change, field',
  [
    (HAN, dict(num_classes=1), 'num_classes'),
    (HAN, dict(hidden_dim=0), 'hidden_dim'),
    (HAN, dict(attention_dim=-2), 'attention_dim'),
    (HAN, dict(score='bilinear'), 'score'),
    (HAN, dict(dropout_rate=1.0), 'dropout_rate'),
    (HAN, dict(pad_id=11), 'pad_id'),
    (TransformerClassifier, dict(num_classes=1), 'num_classes'),
    (TransformerClassifier, dict(pooling='max'), 'pooling'),
    (TransformerClassifier, dict(pooling_score='bilinear'), 'pooling_score'),
    (TransformerClassifier, dict(num_heads=3), 'd_model'),
    (TransformerClassifier, dict(norm='sandwich'), 'norm'),
    (TransformerClassifier, dict(positions='rotary'), 'positions'),
    (TransformerClassifier, dict(num_layers=0), 'num_layers'),
    (TransformerClassifier, dict(attention_impl='flash'), 'attention_impl'),
  ],
)
def test_bad_settings_name_the_field(cls, change, field):
  with pytest.raises(ValueError, match=f'^{field}'):
    _build(cls, **change)


@pytest.mark.parametrize('cls', [HAN, TransformerClassifier])
def test_bad_inputs_and_dropout_without_rngs_are_clear_errors(cls):
  model = _model(cls)
  for bad in (
    jnp.zeros((2,), jnp.int32),
    jnp.zeros((1, 2, 3, 4), jnp.int32),
    jnp.zeros((2, 3), jnp.float32),
  ):
    with pytest.raises(ValueError, match=r'inputs must be integer ids \[B, T\] or \[B, S, W\]'):
      model(bad)
  with pytest.raises(ValueError, match='deterministic=False needs rngs'):
    model(jnp.asarray(SENTENCES), deterministic=False)


def test_registry_and_protocols():
  assert models.fitting(Classifier) == ['encoder_mlm', 'han', 'transformer_classifier']
  assert models.fitting(EncoderDecoder) == ['seq2seq', 'transformer']
  assert not issubclass(HAN, EncoderDecoder) and not issubclass(models.Transformer, Classifier)
  assert HAN.__call__ is HAN.classify
  assert TransformerClassifier.__call__ is TransformerClassifier.classify
  config = models.default_config('han')
  assert config.score == 'dot' and config.attention_dim is None and 'vocab_size' not in config
  model = models.build(config, rngs=rngs(0), vocab_size=50, num_classes=4, pad_id=0)
  assert isinstance(model, HAN) and _classify(model, jnp.asarray(SENTENCES)).shape == (2, 4)
  assert models.default_config('transformer_classifier').pooling_score == 'dot'


@pytest.mark.parametrize(
  'cls, change',
  [(HAN, dict(score='additive')), (TransformerClassifier, dict(pooling_score='cosine'))],
)
def test_jitted_train_step_updates_parameters(cls, change):
  """A step as training/ runs one: jit over split parameters, dropout on, AdamW update."""
  model = _model(cls, dropout_rate=0.5, **change)
  graphdef, params, other = nnx.split(model, nnx.Param, ...)
  tx = optax.adamw(1e-2)

  @jax.jit
  def step(params, opt_state, inputs, labels, key):
    def loss_of(params):
      logits = nnx.merge(graphdef, params, other)(
        inputs, deterministic=False, rngs=nnx.Rngs(dropout=key)
      )
      return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    loss, grads = jax.value_and_grad(loss_of)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), loss, grads

  new_params, loss, grads = step(
    params, tx.init(params), jnp.asarray(DOCS), jnp.array([2, 0]), jax.random.key(0)
  )
  assert np.isfinite(float(loss))
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
  assert any(
    not np.allclose(a, b) for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(new_params))
  )
