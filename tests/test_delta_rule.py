"""The (gated) delta rule (attention/delta_rule.py) against a NumPy recurrence written here, its
three forms against each other, its variants' contract, and the DeltaNet layer's decoding.

Kernel comparisons run in float64 (`jax.enable_x64`): the forms sum the same terms in other
orders, so they agree to float64 rounding (measured: below 1e-14 on values of order 1); 1e-10
separates them from any real difference (a decay applied after the write, a wrong chunk
boundary) by many orders of magnitude.
"""

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from models import interventions
from models.delta_net import DeltaNet
from models.stack_config import AttentionConfig

ATOL = 1e-10
B, HK, H, T, DK, DV = 2, 2, 4, 11, 5, 3  # T a multiple of no chunk size tested but 1


def reference(q, k, v, beta, g, state, *, l2_norm=True):
  """The delta rule token by token in NumPy: decay the state, write beta times the error of its
  reading of k_t, read with the scaled query. Value head h reads key head h // (H / Hk)."""
  repeats = v.shape[1] // k.shape[1]
  q, k = np.repeat(q, repeats, axis=1), np.repeat(k, repeats, axis=1)
  if l2_norm:
    q, k = (x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6) for x in (q, k))
  q = q / np.sqrt(q.shape[-1])
  state, out = state.copy(), np.zeros(v.shape)
  for t in range(v.shape[2]):
    state = state * np.exp(g[:, :, t])[..., None, None]
    error = v[:, :, t] - np.einsum('bhkv,bhk->bhv', state, k[:, :, t])
    state = state + np.einsum('bhk,bhv->bhkv', k[:, :, t], beta[:, :, t, None] * error)
    out[:, :, t] = np.einsum('bhkv,bhk->bhv', state, q[:, :, t])
  return out, state


@pytest.fixture(scope='module')
def inputs():
  rng = np.random.default_rng(0)
  return dict(
    q=rng.standard_normal((B, HK, T, DK)),
    k=rng.standard_normal((B, HK, T, DK)),
    v=rng.standard_normal((B, H, T, DV)),
    beta=1 / (1 + np.exp(-rng.standard_normal((B, H, T)))),
    g=-0.5 * np.abs(rng.standard_normal((B, H, T))),
    state=rng.standard_normal((B, H, DK, DV)),
  )


def test_recurrent_chunked_and_stepwise_forms_equal_the_numpy_recurrence(inputs):
  q, k, v, beta, g, s0 = (inputs[name] for name in ('q', 'k', 'v', 'beta', 'g', 'state'))
  out, state = reference(q, k, v, beta, g, s0)

  def forms(q, k, v, beta, g, s0):  # one program: one compilation
    common = dict(initial_state=s0, l2_norm=True)
    steps, s = [], s0
    for t, end in ((0, 1), (1, 7), (7, 8), (8, T)):  # tokens and blocks, as decoding feeds them
      at = lambda x: jax.lax.slice_in_dim(x, t, end, axis=2)
      o, s = attention.delta_rule_step(s, at(q), at(k), at(v), at(beta), at(g), l2_norm=True)
      steps.append(o)
    return {
      'recurrent': attention.delta_rule_recurrent(q, k, v, beta, g, **common),
      'chunked by 4': attention.delta_rule_chunked(q, k, v, beta, g, chunk_size=4, **common),
      'chunked by 64': attention.delta_rule_chunked(q, k, v, beta, g, **common),
      'stepwise': (jnp.concatenate(steps, axis=2), s),
    }

  with jax.enable_x64(True):
    computed = jax.jit(forms)(q, k, v, beta, g, s0)
  for name, (ours, our_state) in computed.items():
    assert ours.dtype == np.float64, name
    np.testing.assert_allclose(ours, out, atol=ATOL, err_msg=name)
    np.testing.assert_allclose(our_state, state, atol=ATOL, err_msg=name)
  assert np.abs(out).max() > 0.1  # a real signal, not zeros on both sides


def test_plain_deltanet_and_the_attention_form(inputs):
  """g None decays nothing; without l2_norm the keys are used as given; the weights `[B, H, T, T]`
  are lower triangular and times the values give the output from a zero state."""
  q, k, v, beta = (inputs[name] for name in ('q', 'k', 'v', 'beta'))
  k_unit = k / np.linalg.norm(k, axis=-1, keepdims=True)  # the plain rule is stable for |k| <= 1
  zero = np.zeros((B, H, DK, DV))
  out, _ = reference(q, k_unit, v, beta, np.zeros((B, H, T)), zero, l2_norm=False)
  gated_out, _ = reference(q, k, v, beta, inputs['g'], zero)

  def forms(q, k_unit, k, v, beta, g):
    return (
      attention.delta_rule_chunked(q, k_unit, v, beta, chunk_size=3)[0],
      attention.VARIANTS['deltanet'].attend(q, k_unit, v, is_causal=True, beta=beta),
      attention.delta_rule_weights(q, k, beta, g, l2_norm=True),
    )

  with jax.enable_x64(True):
    ours, plain, weights = jax.jit(forms)(q, k_unit, k, v, beta, inputs['g'])
  np.testing.assert_allclose(ours, out, atol=ATOL)
  np.testing.assert_allclose(plain, out, atol=ATOL)
  assert weights.shape == (B, H, T, T) and np.all(np.triu(np.asarray(weights), 1) == 0)
  np.testing.assert_allclose(np.asarray(weights) @ v, gated_out, atol=ATOL)


def test_gradients_are_finite_and_equal_between_the_chunked_and_recurrent_forms(inputs):
  args = [inputs[name] for name in ('q', 'k', 'v', 'beta', 'g')]
  weight = np.random.default_rng(1).standard_normal((B, H, T, DV))

  def loss(form, *args):
    out, state = form(*args, initial_state=inputs['state'], l2_norm=True)
    return jnp.sum(out * weight) + jnp.sum(state**2)

  with jax.enable_x64(True):
    chunked = lambda *a, **kw: attention.delta_rule_chunked(*a, chunk_size=4, **kw)
    grads = jax.jit(
      lambda *a: [
        jax.grad(lambda *a, form=form: loss(form, *a), argnums=range(5))(*a)
        for form in (chunked, attention.delta_rule_recurrent)
      ]
    )(*args)
  for ours, theirs in zip(*grads):
    assert np.all(np.isfinite(ours)) and np.abs(theirs).max() > 1e-3
    np.testing.assert_allclose(ours, theirs, atol=1e-9)


def test_float32_long_sequence_stays_close_to_the_recurrence():
  """The chunked form's float32 error over 200 tokens with strong decays (the cumulative
  log-decay about -64 across a chunk: exp(c) ~ 1e-28): within 1e-4 of the float32 recurrence, on
  outputs of order 1."""
  rng = np.random.default_rng(2)
  q, k = (jnp.asarray(rng.standard_normal((1, 1, 200, 8)), jnp.float32) for _ in range(2))
  v = jnp.asarray(rng.standard_normal((1, 2, 200, 8)), jnp.float32)
  beta = jnp.full((1, 2, 200), 0.9, jnp.float32)
  g = jnp.asarray(-2.0 * rng.random((1, 2, 200)), jnp.float32)
  both = lambda *args: [
    form(*args, l2_norm=True)
    for form in (attention.delta_rule_chunked, attention.delta_rule_recurrent)
  ]
  (ours, s), (theirs, s_ref) = jax.jit(both)(q, k, v, beta, g)
  assert ours.dtype == jnp.float32
  np.testing.assert_allclose(ours, theirs, atol=1e-4)
  np.testing.assert_allclose(s, s_ref, atol=1e-4)


def _layer(attention_name: str) -> DeltaNet:
  config = AttentionConfig(
    d_model=16,
    num_heads=2,
    attention=attention_name,
    delta_heads=4,
    delta_key_heads=2,
    delta_key_dim=6,
    delta_value_dim=5,
    conv_size=3,
  )
  return DeltaNet(config, rngs=nnx.Rngs(0))


@pytest.mark.parametrize('name', ['gated_deltanet', 'deltanet'])
def test_the_layers_cached_decoding_and_capture_equal_its_full_pass(name):
  """Prefilling 5 positions (one chunked block, longer than the convolution), then one token at a
  time, gives the full pass's outputs; so does a capture, which computes weights @ values.
  float32: the same terms summed in other orders, 1e-5 on outputs of order 0.1-1."""
  layer = _layer(name)
  x = jnp.asarray(np.random.default_rng(3).standard_normal((2, 9, 16)), jnp.float32)
  cache = layer.init_cache(2, 9)
  assert cache['conv'].shape == (2, 2, 2 * 2 * 6 + 4 * 5) and cache['state'].shape == (2, 4, 6, 5)

  @nnx.jit
  def run(layer, x, cache):  # one program: one compilation
    out, cache = layer.decode_step(x[:, :5], cache, jnp.int32(0))
    outs = [out]
    for t in range(5, 9):
      out, cache = layer.decode_step(x[:, t : t + 1], cache, jnp.int32(t))
      outs.append(out)
    decoded = jnp.concatenate(outs, axis=1)
    return layer(x, is_causal=True), decoded, interventions.capture(layer, x, is_causal=True)

  full, decoded, (captured_out, captured) = run(layer, x, cache)
  np.testing.assert_allclose(decoded, full, atol=1e-5)
  np.testing.assert_allclose(captured_out, full, atol=1e-5)
  assert captured['weights'].shape == (2, 4, 9, 9) and captured['heads'].shape == (2, 4, 9, 5)
  assert captured['queries'].shape == (2, 2, 9, 6) and captured['values'].shape == (2, 4, 9, 5)
  assert (layer.a_log is None) == (name == 'deltanet')


def test_refusals_are_one_sentence_naming_what_is_wrong():
  layer = _layer('gated_deltanet')
  x = jnp.zeros((1, 3, 16))
  with pytest.raises(ValueError, match='causal recurrence: it runs with is_causal=True'):
    layer(x)  # as an encoder would call it
  q = k = jnp.zeros((1, 2, 3, 4))
  with pytest.raises(ValueError, match='The delta rule is causal and reads no mask'):
    attention.VARIANTS['gated_deltanet'].attend(q, k, q, beta=jnp.zeros((1, 2, 3)))
  with pytest.raises(ValueError, match='needs the option beta'):
    attention.VARIANTS['deltanet'].attend(q, k, q, is_causal=True)
  with pytest.raises(ValueError, match='Hk dividing the value heads'):
    attention.delta_rule_recurrent(q, k, jnp.zeros((1, 3, 3, 4)), jnp.zeros((1, 3, 3)))
  with pytest.raises(ValueError, match='delta_key_heads=3 must divide'):
    AttentionConfig(d_model=16, num_heads=2, attention='deltanet', delta_heads=4, delta_key_heads=3)
  with pytest.raises(ValueError, match="attention='deltanet' cannot take window=4"):
    AttentionConfig(d_model=16, num_heads=2, attention='deltanet', window=4)
