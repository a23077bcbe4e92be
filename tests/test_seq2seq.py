"""RNN attention layers against NumPy, and Seq2Seq: shapes, padding, causality, cached decoding,
generate(), dropout, errors, and a reverse task it must learn."""

import functools
import itertools

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import attention
from models import generation, interventions
from models.generation import generate
from models.rnn_attention import make_attention
from models.seq2seq import Seq2Seq

TOL = dict(atol=1e-5, rtol=1e-5)
# One set of sizes everywhere: parameter initialisers (the GRUs' orthogonal QR) compile per shape.
SIZES = dict(input_vocab_size=12, output_vocab_size=12, pad_id=0, embed_dim=16, hidden_dim=16)
IDS = dict(bos_id=1, eos_id=2, pad_id=0)  # the tokenizers' special ids
SCORE_KINDS = sorted(attention.SCORES)
# Bahdanau with its additive score; Luong with dot, which must project the 2H bidirectional states.
DECODERS = [('bahdanau', 'additive'), ('luong', 'dot')]
SRC = np.array([[3, 4, 5, 6, 7, 8], [9, 10, 11, 0, 0, 0], [4, 0, 0, 0, 0, 0]], np.int32)
DEC = np.array([[1, 5, 6, 7, 3], [1, 11, 10, 9, 2], [1, 4, 2, 0, 0]], np.int32)


def _np_attention(score, layer, q, k, mask):
  """NumPy reference of `layer(q, layer.prepare(k), k, mask)`: scores, masked softmax, context."""
  p = lambda var: np.asarray(var[...], np.float64)
  if score == 'additive':
    hidden = np.tanh((q @ p(layer.w_q))[:, :, None, :] + (k @ p(layer.w_k))[:, None, :, :])
    scores = hidden @ p(layer.v)  # [B, T, S]
  elif score == 'general':
    scores = q @ p(layer.w) @ np.swapaxes(k, 1, 2)
  else:
    kp = k @ p(layer.key_proj.kernel)  # [B, S, Dq]
    scores = q @ np.swapaxes(kp, 1, 2)
    if score == 'scaled_dot':
      scores = scores / np.sqrt(q.shape[-1])
    if score == 'cosine':
      norms = np.linalg.norm(q, axis=-1)[:, :, None] * np.linalg.norm(kp, axis=-1)[:, None, :]
      scores = p(layer.scale) * scores / norms
  e = np.where(mask, np.exp(scores - scores.max(-1, keepdims=True)), 0.0)
  weights = e / e.sum(-1, keepdims=True)
  return weights @ k, weights


@pytest.mark.parametrize('score', SCORE_KINDS)
def test_attention_layer_matches_numpy(score, rng):
  """Each layer equals its formula in NumPy, Dq=16 != Dk=32, with a padded second example."""
  layer = make_attention(score, query_dim=16, key_dim=32, rngs=nnx.Rngs(0))
  q = rng.standard_normal((2, 3, 16)).astype(np.float32)
  k = rng.standard_normal((2, 5, 32)).astype(np.float32)
  mask = np.array([[True] * 5, [True, True, True, False, False]])[:, None, :]  # [B, 1, S]
  context, weights = layer(
    jnp.asarray(q), layer.prepare(jnp.asarray(k)), jnp.asarray(k), jnp.asarray(mask)
  )
  want_context, want_weights = _np_attention(
    score, layer, q.astype(np.float64), k.astype(np.float64), mask
  )
  assert context.shape == (2, 3, 32) and weights.shape == (2, 3, 5)
  np.testing.assert_allclose(weights, want_weights, **TOL)
  np.testing.assert_allclose(context, want_context, **TOL)
  assert np.all(np.asarray(weights)[1, :, 3:] == 0.0)


def test_additive_prepare_is_the_key_projection(rng):
  """Bahdanau's prepare() is W_k h_s, computed once; dot layers only project when sizes differ."""
  layer = make_attention('additive', query_dim=16, key_dim=32, rngs=nnx.Rngs(0))
  k = rng.standard_normal((2, 5, 32)).astype(np.float32)
  np.testing.assert_allclose(layer.prepare(k), k @ np.asarray(layer.w_k[...]), **TOL)
  same = make_attention('dot', query_dim=16, key_dim=16, rngs=nnx.Rngs(0))
  assert same.key_proj is None
  np.testing.assert_array_equal(same.prepare(k[..., :16]), k[..., :16])


def test_registry_matches_kernels_and_rejects_unknown():
  """Every kernel score kind builds a layer running that kernel; an unknown kind names every valid
  one."""
  for name, score in attention.SCORES.items():
    layer = nnx.eval_shape(lambda: make_attention(name, query_dim=4, key_dim=6, rngs=nnx.Rngs(0)))
    assert layer.score_name == name and layer.registered_score is score
  with pytest.raises(
    ValueError,
    match="score must be one of 'additive', 'cosine', 'dot', 'general', 'scaled_dot'; got 'bogus'",
  ):
    make_attention('bogus', query_dim=4, key_dim=4, rngs=nnx.Rngs(0))


@pytest.mark.parametrize(
  'kind, score, bidirectional, num_layers',
  list(itertools.product(['bahdanau', 'luong'], SCORE_KINDS, [True, False], [1, 2])),
)
def test_shapes(kind, score, bidirectional, num_layers):
  """Logits [B, T, V], cross weights [B, 1, T, 1, S], a cache led by B and step logits [B, V]
  for every decoder, score kind and encoder shape (traced abstractly, nothing compiled)."""
  model = nnx.eval_shape(
    lambda: Seq2Seq(
      **SIZES,
      num_layers=num_layers,
      attention=kind,
      bidirectional=bidirectional,
      score=score,
      rngs=nnx.Rngs(0),
    )
  )
  graphdef, state = nnx.split(model)

  def run(state, x, y):
    m = nnx.merge(graphdef, state)
    logits, captured = interventions.capture(m, x, y)
    attn = interventions.stack(captured, m.attention_names['cross'])
    cache = m.init_decode_cache(x, y.shape[1])
    step_logits, new_cache = m.decode_step(y[:, 0], jnp.int32(0), cache)
    return logits, attn, cache, step_logits, new_cache

  logits, attn, cache, step_logits, new_cache = jax.eval_shape(run, state, SRC, DEC)
  assert logits.shape == (3, 5, 12) and logits.dtype == jnp.float32
  assert attn.shape == (3, 1, 5, 1, 6)  # [B, L, T, one query a step, S]
  assert step_logits.shape == (3, 12) and step_logits.dtype == jnp.float32
  assert all(leaf.shape[0] == 3 for leaf in jax.tree.leaves(cache))
  assert jax.tree.map(lambda a: a.shape, cache) == jax.tree.map(lambda a: a.shape, new_cache)
  assert cache['state'].shape == (3, num_layers, 16)
  assert cache['values'].shape == (3, 6, 32 if bidirectional else 16)


@functools.lru_cache(maxsize=None)
def _compiled(kind, score):
  """A bidirectional 2-layer model and its jitted forward `(state, x, y) -> (logits, weights)`."""
  model = Seq2Seq(**SIZES, num_layers=2, attention=kind, score=score, rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(model)

  @jax.jit
  def forward(state, x, y):
    logits, captured = interventions.capture(nnx.merge(graphdef, state), x, y)
    weights = interventions.stack(captured, model.attention_names['cross'])  # [B, 1, T, 1, S]
    return logits, weights[:, 0, :, 0]  # [B, T, S]

  return model, state, forward


@pytest.mark.parametrize('kind, score', DECODERS)
def test_padding_gets_no_weight_and_changes_nothing(kind, score):
  """Weights sum to 1, are exactly 0 on padding and positive elsewhere; a different PAD embedding
  changes no logit."""
  model, state, forward = _compiled(kind, score)
  logits, weights = forward(state, SRC, DEC)
  np.testing.assert_allclose(np.sum(weights, -1), 1.0, **TOL)
  assert np.all(np.asarray(weights)[SRC[:, None, :].repeat(5, 1) == 0] == 0.0)
  assert np.all(np.asarray(weights)[SRC[:, None, :].repeat(5, 1) != 0] > 0.0)
  other = nnx.merge(*nnx.split(model))
  other.src_embed.embedding[...] = other.src_embed.embedding[...].at[0].set(3.0)
  np.testing.assert_array_equal(forward(nnx.state(other), SRC, DEC)[0], logits)


@pytest.mark.parametrize('kind, score', DECODERS)
def test_cached_decoding_equals_teacher_forcing(kind, score):
  """init_decode_cache + decode_step fed the teacher-forced tokens reproduce every logit."""
  model, state, forward = _compiled(kind, score)
  logits, _ = forward(state, SRC, DEC)
  step_fn = jax.jit(model.decode_step)
  cache = jax.jit(model.init_decode_cache, static_argnums=1)(SRC, DEC.shape[1])
  for t in range(DEC.shape[1]):
    step_logits, cache = step_fn(jnp.asarray(DEC[:, t]), jnp.int32(t), cache)
    np.testing.assert_allclose(step_logits, logits[:, t], **TOL)


@pytest.mark.parametrize('kind, score', DECODERS)
def test_causality(kind, score):
  """Changing decoder input 3 leaves logits 0..2 bit-identical and changes logit 3."""
  _, state, forward = _compiled(kind, score)
  logits, _ = forward(state, SRC, DEC)
  changed = DEC.copy()
  changed[:, 3] = [8, 8, 8]
  new_logits, _ = forward(state, SRC, changed)
  np.testing.assert_array_equal(new_logits[:, :3], logits[:, :3])
  assert np.all(np.abs(np.asarray(new_logits[:, 3] - logits[:, 3])).max(-1) > 1e-4)


def test_dropout_needs_rngs_and_is_seeded():
  """With dropout on, logits repeat for one seed and differ across seeds; no rngs is an error."""
  model = Seq2Seq(**SIZES, num_layers=2, dropout_rate=0.3, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match='rngs'):
    model(SRC, DEC, deterministic=False)
  graphdef, state = nnx.split(model)
  run = jax.jit(
    lambda state, key: nnx.merge(graphdef, state)(
      SRC, DEC, deterministic=False, rngs=nnx.Rngs(dropout=key)
    )
  )
  # RBG keys: threefry's bit generator takes seconds to compile on CPU, RBG's a fraction of that.
  key = functools.partial(jax.random.key, impl='rbg')
  noisy = run(state, key(0))
  np.testing.assert_array_equal(run(state, key(0)), noisy)
  assert np.abs(np.asarray(run(state, key(1)) - noisy)).max() > 1e-3


def test_generate_greedy_and_beam():
  """Under jit, greedy generate() picks the argmax of the teacher-forced logits of its own output;
  greedy and beam stop at a forced EOS with zeros after it, without retracing for new weights."""
  model, state, forward = _compiled('bahdanau', 'additive')
  model = nnx.merge(*nnx.split(model))  # a copy: the forced-EOS edit below must not leak
  ids = np.asarray(generate(model, SRC, max_length=5, **IDS))
  assert ids.shape == (3, 5) and ids.dtype == np.int32
  logits, _ = forward(state, SRC, np.concatenate([DEC[:, :1], ids[:, :-1]], axis=1))
  ended = np.cumsum(ids == 2, axis=1) - (ids == 2) > 0  # strictly after the first EOS
  np.testing.assert_array_equal(np.where(ended, 0, np.argmax(logits, -1)), ids)
  beams = generate(model, SRC, max_length=5, beam_size=3, **IDS)
  assert beams.shape == (3, 5) and beams.dtype == jnp.int32
  compiled = generation._generate._cache_size()
  model.output.bias[...] = model.output.bias[...].at[2].set(50.0)  # EOS always wins
  for beam_size in (1, 3):
    np.testing.assert_array_equal(
      generate(model, SRC, max_length=5, beam_size=beam_size, **IDS), [[2, 0, 0, 0, 0]] * 3
    )
  assert generation._generate._cache_size() == compiled


@pytest.mark.parametrize(
  'kwargs, field',
  [
    (dict(attention='transformer'), 'attention'),
    (dict(score='mlp'), 'score'),
    (dict(hidden_dim=0), 'hidden_dim'),
    (dict(num_layers=0), 'num_layers'),
    (dict(embed_dim=2.5), 'embed_dim'),
    (dict(input_vocab_size=-1), 'input_vocab_size'),
    (dict(dropout_rate=1.0), 'dropout_rate'),
  ],
)
def test_bad_config_raises(kwargs, field):
  """Each bad constructor argument raises one ValueError naming the field."""
  with pytest.raises(ValueError, match=field):
    Seq2Seq(**(SIZES | kwargs), rngs=nnx.Rngs(0))


def test_without_attention_the_decoder_sees_one_fixed_vector():
  """attention='none': no attention to read, no score to choose; cached decoding reproduces the
  teacher-forced logits, later inputs do not change earlier logits, padding changes nothing."""
  model = Seq2Seq(**SIZES, num_layers=2, attention='none', rngs=nnx.Rngs(0))
  assert model.attention_names == {} and model.attn is None
  forward = jax.jit(lambda state, x, y: nnx.merge(nnx.graphdef(model), state)(x, y))
  state = nnx.state(model)
  logits = forward(state, SRC, DEC)
  cache = model.init_decode_cache(jnp.asarray(SRC), DEC.shape[1])
  for t in range(DEC.shape[1]):
    step_logits, cache = model.decode_step(jnp.asarray(DEC[:, t]), jnp.int32(t), cache)
    np.testing.assert_allclose(step_logits, logits[:, t], **TOL)
  changed = DEC.copy()
  changed[:, 3] = 8
  np.testing.assert_array_equal(forward(state, SRC, changed)[:, :3], logits[:, :3])
  other = nnx.merge(*nnx.split(model))
  other.src_embed.embedding[...] = other.src_embed.embedding[...].at[0].set(3.0)
  np.testing.assert_array_equal(forward(nnx.state(other), SRC, DEC), logits)
  with pytest.raises(ValueError, match="score='dot' does nothing with attention='none'"):
    Seq2Seq(**SIZES, attention='none', score='dot', rngs=nnx.Rngs(0))


def test_default_scores_follow_the_papers():
  """score=None means additive for Bahdanau and general for Luong."""
  make = lambda kind: nnx.eval_shape(lambda: Seq2Seq(**SIZES, attention=kind, rngs=nnx.Rngs(0)))
  assert make('bahdanau').attn.registered_score is attention.SCORES['additive']
  assert make('luong').attn.registered_score is attention.SCORES['general']


def _reverse_batch(rng, batch=32, max_len=6):
  """Random sequences of ids 3..11 with lengths 2..max_len; target = reversed source + EOS."""
  lengths = rng.integers(2, max_len + 1, batch)
  src = np.zeros((batch, max_len), np.int32)
  tgt = np.zeros((batch, max_len + 1), np.int32)
  for i, n in enumerate(lengths):
    src[i, :n] = rng.integers(3, 12, n)
    tgt[i, : n + 1] = np.append(src[i, :n][::-1], 2)
  dec = np.concatenate([np.ones((batch, 1), np.int32), tgt[:, :-1]], axis=1)
  return src, np.where(tgt == 0, 0, dec), tgt


def test_bahdanau_learns_to_reverse(rng):
  """A tiny Bahdanau model reaches a masked cross-entropy below 0.05 on reversal in 300 steps."""
  model = Seq2Seq(**SIZES, rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(model)
  opt = optax.adam(1e-2)

  @jax.jit
  def train_step(params, opt_state, src, dec, tgt):
    def loss_fn(params):
      logits = nnx.merge(graphdef, params)(src, dec)
      ce = optax.softmax_cross_entropy_with_integer_labels(logits, tgt)
      return jnp.sum(ce * (tgt != 0)) / jnp.sum(tgt != 0)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  opt_state = opt.init(params)
  losses = []
  for _ in range(300):
    params, opt_state, loss = train_step(params, opt_state, *_reverse_batch(rng))
    losses.append(float(loss))
  assert losses[0] > 1.5, losses[0]
  assert np.mean(losses[-10:]) < 0.05, losses[-10:]
