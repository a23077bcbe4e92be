"""NTM addressing against hand-computed values and NumPy, and the NTM and its LSTM baseline:
shapes, weightings, jit, a few training steps on a copy batch, errors."""

import functools

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from attention import addressing
from models import interventions
from models.ntm import NTM, LSTMBaseline, lstm_parameter_count

TOL = dict(atol=1e-5, rtol=1e-5)
# One small machine everywhere: its programs compile once per shape.
SMALL = dict(
  input_size=5,
  output_size=4,
  memory_slots=8,
  memory_width=6,
  controller_size=16,
  read_heads=2,
  write_heads=2,
)


def _softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _count(module):
  return sum(x.size for x in jax.tree.leaves(nnx.state(module, nnx.Param)))


@functools.partial(jax.jit, static_argnums=0)
def _grads(fn, *args):
  """Gradients of the scalar `fn(*args)` in every argument, compiled as one program (eagerly,
  each small op would compile on its own)."""
  return jax.grad(fn, argnums=tuple(range(len(args))))(*args)


@functools.partial(jax.jit, static_argnums=0)
def _run(graphdef, state, x):
  """`(logits, {role: weightings [B, T, heads, N]})` of the model split into `(graphdef,
  state)`, the weightings read by capture (inside the jit) under its `attention_names`."""
  model = nnx.merge(graphdef, state)
  logits, captured = interventions.capture(model, x, method='sequence_logits')
  weights = {
    role: interventions.stack(captured, pattern)  # [B, 1, T, heads, N]: one name per role
    for role, pattern in model.attention_names.items()
  }
  assert all(w.shape[1] == 1 for w in weights.values())
  return logits, {role: w[:, 0] for role, w in weights.items()}


def test_content_weights_hand_computed():
  """Rows [1,0], [0,1], [1,1] against key [2,0] (β = 2) have cosines 1, 0, 1/√2."""
  memory = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], np.float32)
  out = addressing.content_weights(memory, np.array([2.0, 0.0], np.float32), 2.0)
  np.testing.assert_allclose(out, _softmax(2.0 * np.array([1.0, 0.0, 2**-0.5])), **TOL)


def test_content_weights_uniform_at_zero_beta_and_finite_at_zero_key():
  """β = 0 ignores the memory; an all-zero key or row gives cosine 0, finite gradients included."""
  memory = np.array([[1.0, 2.0], [0.0, 0.0], [-3.0, 1.0], [0.5, 0.5]], np.float32)
  np.testing.assert_allclose(
    addressing.content_weights(memory, np.ones(2), 0.0), np.full(4, 0.25), **TOL
  )
  out = addressing.content_weights(memory, np.zeros(2, np.float32), 5.0)
  np.testing.assert_allclose(out, np.full(4, 0.25), **TOL)
  grads = _grads(lambda m, k, b: addressing.content_weights(m, k, b)[0], memory, np.zeros(2), 0.0)
  assert all(np.isfinite(g).all() for g in grads)


def test_interpolate_hand_computed():
  """g = 0.25: 0.25·[1,0,0] + 0.75·[0,0.5,0.5]; per-row gates broadcast over [B, N]."""
  out = addressing.interpolate(np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.5, 0.5]), 0.25)
  np.testing.assert_allclose(out, [0.25, 0.375, 0.375], **TOL)
  out = addressing.interpolate(np.eye(2), np.eye(2)[::-1], np.array([1.0, 0.0]))
  np.testing.assert_allclose(out, [[1.0, 0.0], [1.0, 0.0]], **TOL)


def test_circular_shift_moves_and_wraps():
  """s = (0, 0, 1) over offsets (-1, 0, +1) moves the mass one row on, the last row to the first."""
  right = np.array([0.0, 0.0, 1.0])
  np.testing.assert_allclose(
    addressing.circular_shift(np.array([0.0, 1.0, 0.0, 0.0]), right), [0.0, 0.0, 1.0, 0.0], **TOL
  )
  np.testing.assert_allclose(
    addressing.circular_shift(np.array([0.1, 0.0, 0.2, 0.7]), right), [0.7, 0.1, 0.0, 0.2], **TOL
  )
  left = np.array([1.0, 0.0, 0.0])
  np.testing.assert_allclose(
    addressing.circular_shift(np.array([1.0, 0.0, 0.0, 0.0]), left), [0.0, 0.0, 0.0, 1.0], **TOL
  )


def test_circular_shift_is_the_circular_convolution(rng):
  """A blurred shift (r = 2) on [2, 7] rows equals Σ_j w_j s_{(i-j) mod N} written with loops."""
  w = _softmax(rng.standard_normal((2, 7)))
  s = _softmax(rng.standard_normal((2, 5)))
  expected = np.zeros((2, 7))
  for b in range(2):
    for i in range(7):
      for k, offset in enumerate(range(-2, 3)):
        expected[b, i] += w[b, (i - offset) % 7] * s[b, k]
  np.testing.assert_allclose(addressing.circular_shift(w, s), expected, **TOL)


def test_sharpen_hand_computed_and_safe():
  """[0.5, 0.25, 0.25]² / 0.375; zeros stay zero; γ = 60 is finite, gradients included."""
  out = addressing.sharpen(np.array([0.5, 0.25, 0.25]), 2.0)
  np.testing.assert_allclose(out, np.array([0.25, 0.0625, 0.0625]) / 0.375, **TOL)
  w = jnp.array([0.0, 0.3, 0.3 + 1e-3, 0.399])
  out = addressing.sharpen(w, 60.0)
  assert out[0] == 0.0 and np.isfinite(out).all()
  np.testing.assert_allclose(out.sum(), 1.0, **TOL)
  np.testing.assert_allclose(
    out[3], 1.0 / (1.0 + (0.3 / 0.399) ** 60 + (0.301 / 0.399) ** 60), rtol=1e-4
  )
  grads = _grads(lambda w, g: addressing.sharpen(w, g) @ jnp.arange(4.0), w, 60.0)
  assert all(np.isfinite(g).all() for g in grads)


def test_address_composes_the_steps_and_is_finite_in_gradient(rng):
  """`address` on [3, N=5] equals the four steps written in NumPy; gradients are finite."""
  memory = rng.standard_normal((3, 5, 4)).astype(np.float32)
  memory[:, 1] = 0.0  # an empty row
  key = rng.standard_normal((3, 4)).astype(np.float32)
  beta, gate, gamma = np.array([0.0, 1.5, 20.0]), np.array([0.2, 0.9, 1.0]), np.array([1, 3, 60.0])
  shift = _softmax(rng.standard_normal((3, 3)))
  previous = _softmax(rng.standard_normal((3, 5)))
  unit = lambda x: x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
  content = _softmax(beta[:, None] * np.einsum('bnm,bm->bn', unit(memory), unit(key)))
  gated = gate[:, None] * content + (1 - gate[:, None]) * previous
  shifted = sum(
    np.roll(gated, offset, axis=-1) * shift[:, k : k + 1] for k, offset in enumerate((-1, 0, 1))
  )
  expected = shifted ** gamma[:, None] / (shifted ** gamma[:, None]).sum(-1, keepdims=True)
  args = (memory, key, beta, gate, shift, gamma, previous)
  np.testing.assert_allclose(addressing.address(*args), expected, atol=1e-4, rtol=1e-4)
  grads = _grads(lambda *a: jnp.sum(addressing.address(*a)[:, 0]), *args)
  assert all(np.isfinite(g).all() for g in grads)


def test_read_and_write_hand_computed():
  """Read is the weighted row sum; write erases, then adds, on the weighted rows only."""
  memory = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
  np.testing.assert_allclose(addressing.read(memory, np.array([0.25, 0.75])), [2.5, 3.5], **TOL)
  out = addressing.write(
    np.ones((2, 2)), np.array([1.0, 0.0]), np.array([1.0, 0.0]), np.array([0.5, 0.5])
  )
  np.testing.assert_allclose(out, [[0.5, 1.5], [1.0, 1.0]], **TOL)
  out = addressing.write(np.ones((2, 2)), np.array([0.5, 0.5]), np.array([1.0, 1.0]), np.zeros(2))
  np.testing.assert_allclose(out, np.full((2, 2), 0.5), **TOL)


def test_write_heads_erases_all_before_adding():
  """Two heads on row 0: (1 - 1)(1 - 0.5)·1 + 0.2 + 0.3, whichever order the heads come in."""
  weights = np.array([[1.0, 0.0], [1.0, 0.0]])
  erase = np.array([[1.0, 1.0], [0.5, 0.5]])
  add = np.array([[0.2, 0.2], [0.3, 0.3]])
  out = addressing.write_heads(np.ones((2, 2)), weights, erase, add)
  np.testing.assert_allclose(out, [[0.5, 0.5], [1.0, 1.0]], **TOL)
  np.testing.assert_allclose(
    addressing.write_heads(np.ones((2, 2)), weights, erase[::-1], add[::-1]), out, **TOL
  )
  one = addressing.write_heads(np.ones((2, 2)), weights[:1], erase[:1], add[:1])
  np.testing.assert_allclose(
    one, addressing.write(np.ones((2, 2)), weights[0], erase[0], add[0]), **TOL
  )


def test_circular_shift_rejects_an_even_shift_size():
  with pytest.raises(ValueError, match='odd size'):
    addressing.circular_shift(np.ones(4) / 4, np.ones(2) / 2)


@pytest.mark.parametrize('controller', ['lstm', 'feedforward'])
def test_ntm_shapes_and_weightings(rng, controller):
  """Logits [B, T, O] float32, under jit; every head's weighting sums to 1 at every step."""
  model = NTM(**SMALL, controller=controller, rngs=nnx.Rngs(0))
  x = rng.random((3, 7, 5)).astype(np.float32)
  logits, weights = _run(*nnx.split(model), x)
  assert logits.shape == (3, 7, 4) and logits.dtype == jnp.float32
  assert set(weights) == {'read', 'write'}
  assert weights['read'].shape == (3, 7, 2, 8) and weights['write'].shape == (3, 7, 2, 8)
  for w in weights.values():
    assert (np.asarray(w) >= 0).all()
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)


def test_ntm_step_depends_only_on_the_past(rng):
  """Changing the last input step leaves the earlier steps' logits unchanged."""
  model = nnx.split(NTM(**SMALL, controller='feedforward', rngs=nnx.Rngs(0)))
  x = rng.random((3, 7, 5)).astype(np.float32)
  y = x.copy()
  y[:, -1] += 1.0
  (a, _), (b, _) = _run(*model, x), _run(*model, y)
  np.testing.assert_allclose(a[:, :-1], b[:, :-1], **TOL)
  assert not np.allclose(a[:, -1], b[:, -1])


def _copy_batch(rng, batch=8, length=3, bits=4):
  """Copy task: `bits` random bits for `length` steps, a delimiter, then `length` blank steps.

  Returns:
    `(inputs [B, 2L+1, bits+1], targets [B, 2L+1, bits], loss mask [B, 2L+1])`.
  """
  seq = rng.integers(0, 2, (batch, length, bits)).astype(np.float32)
  steps = 2 * length + 1
  inputs = np.zeros((batch, steps, bits + 1), np.float32)
  inputs[:, :length, :bits] = seq
  inputs[:, length, bits] = 1.0
  targets = np.zeros((batch, steps, bits), np.float32)
  targets[:, length + 1 :] = seq
  mask = np.zeros((batch, steps), np.float32)
  mask[:, length + 1 :] = 1.0
  return inputs, targets, mask


@pytest.mark.parametrize('model_class', [NTM, LSTMBaseline])
def test_training_steps_reduce_the_copy_loss(rng, model_class):
  """Twenty Adam steps of masked sigmoid cross-entropy on one copy batch lower it, finitely."""
  sizes = SMALL if model_class is NTM else dict(input_size=5, output_size=4, hidden_size=16)
  model = model_class(**sizes, rngs=nnx.Rngs(0))
  inputs, targets, mask = _copy_batch(rng)
  graphdef, params = nnx.split(model, nnx.Param)
  optimizer = optax.adam(1e-2)

  def loss_fn(params):
    logits = nnx.merge(graphdef, params).sequence_logits(inputs)
    bce = optax.sigmoid_binary_cross_entropy(logits, targets).mean(-1)  # [B, T]
    return jnp.sum(bce * mask) / jnp.sum(mask)

  @jax.jit
  def step(params, opt_state):
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, loss, grads

  opt_state = optimizer.init(params)
  losses = []
  for _ in range(20):
    params, opt_state, loss, grads = step(params, opt_state)
    losses.append(float(loss))
    assert all(np.isfinite(g).all() for g in jax.tree.leaves(grads))
  assert np.isfinite(losses).all() and losses[-1] < 0.9 * losses[0]


def test_lstm_baseline_shapes_and_parameter_count(rng):
  """Logits [B, T, O]; no attention to read (no roles, no taps); the count formula is exact."""
  model = LSTMBaseline(input_size=5, output_size=4, hidden_size=16, num_layers=2, rngs=nnx.Rngs(0))
  x = rng.random((3, 7, 5)).astype(np.float32)
  logits = model.sequence_logits(x)
  assert logits.shape == (3, 7, 4) and logits.dtype == jnp.float32
  assert LSTMBaseline.attention_names == {}
  with pytest.raises(ValueError, match='recorded nothing'):
    interventions.capture(model, x, method='sequence_logits')
  assert _count(model) == lstm_parameter_count(16, input_size=5, output_size=4, num_layers=2)


def test_ntm_parameter_count_by_hand():
  """LSTM on [x; 2 reads] + 2 read heads + 2 write heads + output + initial reads."""
  c, m, s = 16, 6, 3
  expected = (
    4 * ((5 + 2 * m) * c + c * c + c)
    + (c + 1) * 2 * (m + 3 + s)
    + (c + 1) * 2 * (3 * m + 3 + s)
    + (c + 2 * m + 1) * 4
    + 2 * m
  )
  assert _count(NTM(**SMALL, rngs=nnx.Rngs(0))) == expected


@pytest.mark.parametrize(
  'args, match',
  [
    (dict(memory_slots=0), 'memory_slots'),
    (dict(read_heads=0), 'read_heads'),
    (dict(memory_width=2.5), 'memory_width'),
    (dict(controller='gru'), 'controller'),
    (dict(shift_range=-1), 'shift_range'),
    (dict(shift_range=8), 'shift_range'),
  ],
)
def test_ntm_rejects_bad_arguments(args, match):
  with pytest.raises(ValueError, match=match):
    NTM(**{**SMALL, **args}, rngs=nnx.Rngs(0))


def test_models_reject_bad_arguments_and_inputs():
  with pytest.raises(ValueError, match='hidden_size'):
    LSTMBaseline(input_size=5, output_size=4, hidden_size=0, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match='num_layers'):
    LSTMBaseline(input_size=5, output_size=4, num_layers=0, rngs=nnx.Rngs(0))
  model = NTM(**SMALL, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match='input_size=5'):
    model.sequence_logits(np.zeros((2, 3, 4), np.float32))
  with pytest.raises(ValueError, match=r'\[B, T, input_size'):
    model.sequence_logits(np.zeros((3, 5), np.float32))
