"""scaled_dot_product_attention: NumPy reference, chunked == reference, dropout, bad input."""

import re

import jax
import jax.numpy as jnp
from jax.test_util import check_grads
import numpy as np
import pytest

from attention import (
  attention_weights,
  causal_mask,
  chunked_attention,
  padding_mask,
  scaled_dot_product_attention,
)
from attention import chunked as attention_chunked


def numpy_sdpa(q, k, v, mask=None, bias=None, scale=None):
  """Plain NumPy attention with the library's semantics (fully masked rows -> zeros)."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  scale = q.shape[-1] ** -0.5 if scale is None else scale
  s = np.einsum('...td,...sd->...ts', q, k) * scale
  if bias is not None:
    s = s + np.asarray(bias, np.float64)
  mask = np.ones(s.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask), s.shape)
  s = np.where(mask, s, -np.inf)
  row_max = np.max(s, axis=-1, keepdims=True)
  e = np.where(mask, np.exp(s - np.where(np.isfinite(row_max), row_max, 0.0)), 0.0)
  total = e.sum(-1, keepdims=True)
  w = e / np.where(total > 0, total, 1.0)
  return np.einsum('...ts,...sv->...tv', w, v), w


def qkv(rng, lead=(2, 3), t=13, s=21, d=8, dv=5):
  return (
    jnp.asarray(rng.standard_normal((*lead, t, d)), jnp.float32),
    jnp.asarray(rng.standard_normal((*lead, s, d)), jnp.float32),
    jnp.asarray(rng.standard_normal((*lead, s, dv)), jnp.float32),
  )


def out_and_weights(q, k, v, **kwargs):
  """`scaled_dot_product_attention` of the arguments, and the `attention_weights` it uses."""
  scoring = {key: value for key, value in kwargs.items() if key != 'implementation'}
  return scaled_dot_product_attention(q, k, v, **kwargs), attention_weights(q, k, **scoring)


@pytest.mark.portable
def test_reference_matches_numpy_with_mask_and_bias(rng):
  """The reference path equals a float64 NumPy computation, with padding mask and bias."""
  q, k, v = qkv(rng)
  mask = padding_mask(jnp.array([21, 4]), 21)[:, None]  # [B, 1, 1, S]
  bias = jnp.asarray(rng.standard_normal((3, 13, 21)), jnp.float32)  # [N, T, S]
  out, w = out_and_weights(q, k, v, mask=mask, bias=bias, implementation='reference')
  ref_out, ref_w = numpy_sdpa(q, k, v, mask, bias)
  np.testing.assert_allclose(out, ref_out, atol=1e-5)
  np.testing.assert_allclose(w, ref_w, atol=1e-6)
  np.testing.assert_allclose(np.asarray(w).sum(-1), 1.0, atol=1e-5)


@pytest.mark.portable
def test_float64_inputs_are_computed_in_float64(rng):
  """The reference kernel computes its scores in float32 *or wider*: float64 inputs (the
  pretrained models' comparisons with transformers run there) stay float64, equal to NumPy's to
  float64 rounding, far below float32's 1e-7."""
  with jax.enable_x64(True):
    q, k, v = (jnp.asarray(x, jnp.float64) for x in qkv(rng))
    mask = causal_mask(13, 21)
    out, w = out_and_weights(q, k, v, mask=mask, implementation='reference')
    assert out.dtype == w.dtype == jnp.float64
    ref_out, ref_w = numpy_sdpa(q, k, v, mask)
    np.testing.assert_allclose(out, ref_out, atol=1e-13, rtol=0)
    np.testing.assert_allclose(w, ref_w, atol=1e-13, rtol=0)


@pytest.mark.portable
def test_hand_computed_two_keys():
  """One query, two keys: weights are softmax([0, 2/sqrt(2)])."""
  q = jnp.array([[1.0, 1.0]])
  k = jnp.array([[0.0, 0.0], [1.0, 1.0]])
  v = jnp.array([[10.0], [20.0]])
  out, w = out_and_weights(q, k, v)
  w1 = 1.0 / (1.0 + np.exp(-np.sqrt(2.0)))  # sigmoid(2/sqrt(2))
  np.testing.assert_allclose(w, [[1.0 - w1, w1]], atol=1e-6)
  np.testing.assert_allclose(out, [[10.0 * (1.0 - w1) + 20.0 * w1]], atol=1e-5)


def test_causal_flag_equals_explicit_mask(rng):
  """is_causal=True is the lower-triangular mask, also for T != S."""
  q, k, v = qkv(rng, t=6, s=9)
  out = scaled_dot_product_attention(q, k, v, is_causal=True, implementation='reference')
  ref, _ = numpy_sdpa(q, k, v, mask=np.tril(np.ones((6, 9), bool)))
  np.testing.assert_allclose(out, ref, atol=1e-5)


CASES = {
  'plain': dict(t=13, s=21),
  't_eq_s_causal': dict(t=20, s=20, is_causal=True),
  't_ne_s_causal': dict(t=11, s=29, is_causal=True),
  'padding': dict(t=13, s=21, lengths=(21, 5)),
  'padding_causal_bias': dict(t=17, s=17, lengths=(9, 17), is_causal=True, bias=True),
  'full_bias': dict(t=10, s=23, bias=True, full_bias=True),
  'key_bias_row': dict(t=10, s=23, bias=True, key_bias=True),
  'low_rank_bias': dict(t=9, s=12, bias=True, low_rank_bias=True),
  'explicit_scale': dict(t=7, s=7, scale=0.3),
}


@pytest.mark.parametrize('blocks', [(4, 8), (5, 3), (64, 64)])
@pytest.mark.parametrize('case', list(CASES))
def test_chunked_equals_reference_values_and_gradients(rng, case, blocks):
  """'chunked' == 'reference' in output and d/dq, d/dk, d/dv, d/dbias; blocks need not divide
  T, S."""
  c = CASES[case]
  q, k, v = qkv(rng, t=c['t'], s=c['s'])
  mask = padding_mask(jnp.array(c['lengths']), c['s'])[:, None] if 'lengths' in c else None
  bias = None
  if c.get('bias'):
    shape = (
      (2, 3, c['t'], c['s'])
      if c.get('full_bias')
      else (2, 1, 1, c['s'])
      if c.get('key_bias')
      else (c['t'], c['s'])
      if c.get('low_rank_bias')
      else (1, 3, c['t'], c['s'])
    )
    bias = jnp.asarray(rng.standard_normal(shape), jnp.float32)
  kwargs = dict(mask=mask, is_causal=c.get('is_causal', False), scale=c.get('scale'))
  cotangent = jnp.asarray(rng.standard_normal((2, 3, c['t'], 5)), jnp.float32)

  def loss_ref(q, k, v, bias):
    out = scaled_dot_product_attention(q, k, v, bias=bias, implementation='reference', **kwargs)
    return jnp.sum(out * cotangent)

  def loss_chunked(q, k, v, bias):
    out = chunked_attention(
      q,
      k,
      v,
      bias=bias,
      q_block=blocks[0],
      kv_block=blocks[1],
      mask=mask,
      is_causal=kwargs['is_causal'],
      scale=kwargs['scale'] or q.shape[-1] ** -0.5,
    )
    return jnp.sum(out * cotangent)

  argnums = (0, 1, 2, 3) if bias is not None else (0, 1, 2)
  ref_val, ref_grads = jax.value_and_grad(loss_ref, argnums)(q, k, v, bias)
  val, grads = jax.jit(jax.value_and_grad(loss_chunked, argnums))(q, k, v, bias)
  np.testing.assert_allclose(val, ref_val, rtol=1e-5, atol=1e-5)
  for name, g, g_ref in zip('qkvb', grads, ref_grads):
    np.testing.assert_allclose(g, g_ref, atol=2e-5, err_msg=f'gradient wrt {name}')


@pytest.mark.parametrize('implementation', ['reference', 'chunked'])
def test_fully_masked_rows_give_zeros_and_finite_gradients(rng, implementation):
  """A query that may attend nowhere outputs zeros, and no gradient becomes NaN."""
  q, k, v = qkv(rng, t=4, s=6)
  mask = jnp.ones((4, 6), bool).at[1].set(False)  # query 1 sees nothing
  f = lambda q, k, v: jnp.sum(
    scaled_dot_product_attention(q, k, v, mask=mask, implementation=implementation) ** 2
  )
  out = scaled_dot_product_attention(q, k, v, mask=mask, implementation=implementation)
  np.testing.assert_array_equal(out[:, :, 1], 0.0)
  assert np.all(np.isfinite(out))
  for g in jax.grad(f, (0, 1, 2))(q, k, v):
    assert np.all(np.isfinite(g))
  ref, _ = numpy_sdpa(q, k, v, mask)
  np.testing.assert_allclose(out, ref, atol=1e-5)


def test_chunked_handles_incremental_decoding_shape(rng):
  """T=1 against a long cache with a causal offset mask, as in KV-cache decoding."""
  q, k, v = qkv(rng, t=1, s=40)
  mask = causal_mask(1, 40, offset=17)
  out = chunked_attention(q, k, v, mask=mask, scale=0.5, kv_block=16)
  ref, _ = numpy_sdpa(q, k, v, mask, scale=0.5)
  np.testing.assert_allclose(out, ref, atol=1e-5)


def test_broadcast_leading_dims_multi_query(rng):
  """Keys/values shared across heads ([B, 1, S, D]) broadcast against queries [B, N, T, D]."""
  q, _, _ = qkv(rng, t=9, s=9)
  _, k, v = qkv(rng, lead=(2, 1), t=9, s=9)
  ref, _ = numpy_sdpa(q, np.broadcast_to(k, (2, 3, 9, 8)), np.broadcast_to(v, (2, 3, 9, 5)))
  for impl in ('reference', 'chunked'):
    np.testing.assert_allclose(
      scaled_dot_product_attention(q, k, v, implementation=impl), ref, atol=1e-5
    )


@pytest.mark.parametrize('implementation', ['reference', 'chunked'])
def test_dropout_is_unbiased_and_differentiable(rng, implementation):
  """Dropout keeps E[output] (inverted scaling), changes with the key, and has correct gradients."""
  q, k, v = qkv(rng, lead=(2,), t=5, s=7)
  base = scaled_dot_product_attention(q, k, v, implementation=implementation)
  run = lambda key: scaled_dot_product_attention(
    q, k, v, dropout_rate=0.3, dropout_rng=key, implementation=implementation
  )
  outs = jax.vmap(run)(jax.random.split(jax.random.PRNGKey(1), 400))
  assert not np.allclose(outs[0], outs[1])
  np.testing.assert_allclose(outs.mean(0), base, atol=0.15)
  key = jax.random.PRNGKey(7)
  f = jax.jit(
    lambda q, k, v: scaled_dot_product_attention(
      q, k, v, dropout_rate=0.3, dropout_rng=key, implementation=implementation
    )
  )
  check_grads(f, (q, k, v), order=1, modes=['rev'], atol=1e-2, rtol=1e-2)


def test_jit_vmap_grad_compose(rng):
  """The default path works under jit, vmap over an extra axis, and grad."""
  q, k, v = qkv(rng, t=6, s=6)
  f = lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True)
  batched = jax.vmap(f)(q, k, v)
  np.testing.assert_allclose(jax.jit(f)(q, k, v), batched, atol=1e-6)
  ref, _ = numpy_sdpa(q, k, v, np.tril(np.ones((6, 6), bool)))
  np.testing.assert_allclose(batched, ref, atol=1e-5)
  assert np.all(np.isfinite(jax.grad(lambda q: jnp.sum(f(q, k, v)))(q)))


def test_chunked_under_vmap_and_jit(rng):
  """vmap of the chunked kernel (custom_vjp, loops) equals the unbatched call, also for
  gradients."""
  q, k, v = qkv(rng, t=10, s=10)
  f = lambda q, k, v: chunked_attention(q, k, v, is_causal=True, scale=0.3, q_block=4, kv_block=4)
  np.testing.assert_allclose(jax.jit(jax.vmap(f))(q, k, v), f(q, k, v), atol=1e-6)
  loss = lambda q: jnp.sum(jax.vmap(f)(q, k, v) ** 2)
  ref_loss = lambda q: jnp.sum(
    numpy_sdpa_jax(q, k, v, jnp.tril(jnp.ones((10, 10), bool)), 0.3) ** 2
  )
  np.testing.assert_allclose(jax.grad(loss)(q), jax.grad(ref_loss)(q), atol=2e-5)


def numpy_sdpa_jax(q, k, v, mask, scale):
  """The textbook formula in jnp, differentiable, for gradient references."""
  s = jnp.where(mask, jnp.einsum('...td,...sd->...ts', q, k) * scale, -jnp.inf)
  return jnp.einsum('...ts,...sv->...tv', jax.nn.softmax(s, axis=-1), v)


def test_chunked_bfloat16_close_to_float32(rng):
  """bfloat16 inputs accumulate in float32: within bfloat16 rounding of the float32 result."""
  q, k, v = qkv(rng, t=32, s=48)
  ref = scaled_dot_product_attention(q, k, v, implementation='reference')
  out = chunked_attention(
    *(x.astype(jnp.bfloat16) for x in (q, k, v)), scale=8**-0.5, q_block=16, kv_block=16
  )
  assert out.dtype == jnp.bfloat16
  np.testing.assert_allclose(out.astype(jnp.float32), ref, atol=3e-2)


BAD_INPUTS = {
  'feature_mismatch': (dict(k=(2, 5, 7)), 'query features D=8 differ from key features D=7'),
  'length_mismatch': (dict(v=(2, 6, 8)), 'keys have S=5 but values have S=6'),
  'lead_mismatch': (dict(k=(3, 5, 8), v=(3, 5, 8)), 'do not broadcast'),
  'mask_shape': (dict(mask=(4, 5)), 'mask of shape (4, 5) does not broadcast'),
  'bias_shape': (dict(bias=(2, 3, 4)), 'does not broadcast'),
  'unknown_impl': (
    dict(implementation='flash'),
    'valid implementations: reference, chunked, cudnn',
  ),
  'cudnn_on_cpu': (dict(implementation='cudnn'), 'needs an NVIDIA GPU'),
  'dropout_without_rng': (dict(dropout_rate=0.1), 'needs a dropout_rng'),
  'dropout_rate_range': (dict(dropout_rate=1.0), 'dropout_rate must be in [0, 1)'),
}


@pytest.mark.parametrize('case', list(BAD_INPUTS))
def test_bad_input_raises_clear_value_error(case):
  """Each bad input is a ValueError naming the shapes or names involved."""
  if case == 'cudnn_on_cpu' and jax.default_backend() == 'gpu':
    pytest.skip('cuDNN is available on a GPU')
  changes, message = dict(BAD_INPUTS[case][0]), BAD_INPUTS[case][1]
  shapes = dict(q=(2, 3, 8), k=(2, 5, 8), v=(2, 5, 8))
  arrays = {name: jnp.zeros(changes.pop(name, shape)) for name, shape in shapes.items()}
  for name in ('mask', 'bias'):
    if name in changes:
      changes[name] = jnp.zeros(changes[name], bool if name == 'mask' else jnp.float32)
  with pytest.raises(ValueError, match=re.escape(message)):
    scaled_dot_product_attention(arrays['q'], arrays['k'], arrays['v'], **changes)


@pytest.mark.parametrize('head_block', [2, 6])
def test_chunked_head_blocks_equal_reference(rng, head_block):
  """Several (batch, head) slices per step (2 of 6: a loop of vmaps) and all at once (6, the
  accelerator path) give the reference output and gradients, with a per-head bias and padding."""
  q, k, v = qkv(rng, t=9, s=11)
  mask = padding_mask(jnp.array([11, 4]), 11)[:, None]
  bias = jnp.asarray(rng.standard_normal((1, 3, 9, 11)), jnp.float32)
  cotangent = jnp.asarray(rng.standard_normal((2, 3, 9, 5)), jnp.float32)
  ref = lambda q, k, v, b: jnp.sum(
    cotangent * scaled_dot_product_attention(q, k, v, mask=mask, bias=b, implementation='reference')
  )
  out = lambda q, k, v, b: jnp.sum(
    cotangent
    * chunked_attention(
      q, k, v, mask=mask, bias=b, scale=8**-0.5, q_block=4, kv_block=4, head_block=head_block
    )
  )
  ref_val, ref_grads = jax.value_and_grad(ref, (0, 1, 2, 3))(q, k, v, bias)
  val, grads = jax.jit(jax.value_and_grad(out, (0, 1, 2, 3)))(q, k, v, bias)
  np.testing.assert_allclose(val, ref_val, rtol=1e-5, atol=1e-5)
  for name, g, g_ref in zip('qkvb', grads, ref_grads):
    np.testing.assert_allclose(g, g_ref, atol=2e-5, err_msg=f'gradient wrt {name}')


def test_default_blocks_keep_about_256_by_2048_scores():
  """Without q_block, short keys get more query rows per block; sizes are clipped to T and S."""
  blocks = attention_chunked._block_sizes
  assert blocks(512, 512, None, 2048) == (512, 512)  # one block per head at S=512
  assert blocks(4096, 1024, None, 2048) == (512, 1024)
  assert blocks(8192, 8192, None, 2048) == (256, 2048)
  assert blocks(100, 8192, None, 2048) == (100, 2048)
  assert blocks(13, 21, 4, 8) == (4, 8)  # explicit sizes are kept
  assert blocks(3, 5, 4, 8) == (3, 5)


def test_chunked_default_blocks_equal_reference(rng):
  """With the default blocks (256 rows x 2048 keys, T not a multiple of 256) values match NumPy
  and gradients match the reference."""
  q, k, v = qkv(rng, lead=(1, 2), t=300, s=2048)
  cotangent = jnp.asarray(rng.standard_normal((1, 2, 300, 5)), jnp.float32)
  out = chunked_attention(q, k, v, scale=8**-0.5)
  np.testing.assert_allclose(out, numpy_sdpa(q, k, v)[0], atol=1e-5)
  loss = lambda impl: (
    lambda q, k, v: jnp.sum(cotangent * scaled_dot_product_attention(q, k, v, implementation=impl))
  )
  grads = jax.jit(jax.grad(loss('chunked'), (0, 1, 2)))(q, k, v)
  ref_grads = jax.grad(loss('reference'), (0, 1, 2))(q, k, v)
  for name, g, g_ref in zip('qkv', grads, ref_grads):
    np.testing.assert_allclose(g, g_ref, atol=2e-5, err_msg=f'gradient wrt {name}')
