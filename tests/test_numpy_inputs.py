"""Every attention kernel takes NumPy arrays for q, k, v, mask and bias as it takes JAX arrays."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention


def _numpy_attention(q, k, v, mask, bias):
  """float64 NumPy `softmax(q kᵀ / sqrt(D) + bias, masked) v` (no fully masked rows here)."""
  q, k, v, bias = (np.asarray(x, np.float64) for x in (q, k, v, bias))
  s = np.einsum('...td,...sd->...ts', q, k) / np.sqrt(q.shape[-1]) + bias
  s = np.where(mask, s, -np.inf)
  e = np.exp(s - s.max(-1, keepdims=True))
  return np.einsum('...ts,...sv->...tv', e / e.sum(-1, keepdims=True), v)


def _inputs(rng, t, s, dtype):
  """NumPy q, k, v `[B=2, N=2, ., 8]`, a per-example padding mask `[B, 1, 1, S]` and a per-head
  bias `[B, N, T, S]`: batch and head dims that 'chunked' must index with traced head numbers."""
  q, k, v = (rng.standard_normal((2, 2, n, 8)).astype(dtype) for n in (t, s, s))
  mask = np.arange(s) < np.array([s, s // 2])[:, None, None, None]  # [B, 1, 1, S]
  bias = rng.standard_normal((2, 2, t, s)).astype(dtype)
  return q, k, v, mask, bias


def _runnable(name):
  """The kernel's name, marked skip where this backend cannot run it."""
  on_gpu = jax.default_backend() == 'gpu'
  skips = {
    'cudnn': (not on_gpu, 'cuDNN needs an NVIDIA GPU'),
    # On a GPU tokamax's kernels take half precision only; tests/test_fused.py checks them there.
    'fused': (on_gpu, "on a GPU 'fused' takes float16 or bfloat16, and this test is float32"),
    # tests/test_pallas_flash.py checks it against the reference kernel, variant by variant.
    'pallas': (True, 'it takes no mask or bias arrays, which this test passes'),
  }
  skip, reason = skips.get(name, (False, ''))
  return pytest.param(name, marks=pytest.mark.skipif(skip, reason=reason))


@pytest.mark.parametrize('implementation', [_runnable(name) for name in attention.KERNELS])
def test_every_kernel_takes_numpy_inputs(rng, implementation):
  """NumPy q/k/v/mask/bias give the JAX-input result, which matches a NumPy reference."""
  # cuDNN runs only half-precision inputs, and masked attention only at even lengths (the
  # dispatcher refuses odd ones); the others are checked in float32 at an odd length.
  cudnn = implementation == 'cudnn'
  dtype, tol = (np.float16, 2e-2) if cudnn else (np.float32, 1e-5)
  q, k, v, mask, bias = _inputs(rng, 8 if cudnn else 7, 16, dtype)
  run = lambda *args: attention.scaled_dot_product_attention(
    *args[:3], mask=args[3], bias=args[4], implementation=implementation
  )
  from_numpy = run(q, k, v, mask, bias)
  from_jax = run(*map(jnp.asarray, (q, k, v, mask, bias)))
  np.testing.assert_array_equal(from_numpy, from_jax)
  np.testing.assert_allclose(
    np.asarray(from_numpy, np.float64), _numpy_attention(q, k, v, mask, bias), atol=tol, rtol=tol
  )


def test_default_picks_chunked_at_512_and_takes_numpy_inputs(rng):
  """At T = S = 512 the default kernel is 'chunked' on CPU (one 512 x 512 block per head); NumPy
  inputs match the reference."""
  if jax.default_backend() != 'cpu':
    pytest.skip('the default picks cuDNN on GPU')
  q, k, v, mask, bias = _inputs(rng, 512, 512, np.float32)
  assert attention.dispatch.chosen_implementation(q, k, v)[0] == 'chunked'
  out = attention.scaled_dot_product_attention(q, k, v, mask=mask, bias=bias)
  np.testing.assert_allclose(out, _numpy_attention(q, k, v, mask, bias), atol=1e-5, rtol=1e-5)


def test_chunked_gradients_and_direct_call_take_numpy_inputs(rng):
  """Under grad (custom_vjp) and called directly, 'chunked' takes a NumPy mask and bias."""
  q, k, v, mask, bias = _inputs(rng, 7, 16, np.float32)
  loss = lambda impl, m, b: (
    lambda q_: jnp.sum(
      attention.scaled_dot_product_attention(q_, k, v, mask=m, bias=b, implementation=impl) ** 2
    )
  )
  grad_numpy = jax.grad(loss('chunked', mask, bias))(jnp.asarray(q))
  grad_ref = jax.grad(loss('reference', jnp.asarray(mask), jnp.asarray(bias)))(jnp.asarray(q))
  np.testing.assert_allclose(grad_numpy, grad_ref, atol=1e-5, rtol=1e-5)
  direct = attention.chunked_attention(q, k, v, mask=mask, bias=bias, scale=8**-0.5)
  np.testing.assert_allclose(direct, _numpy_attention(q, k, v, mask, bias), atol=1e-5, rtol=1e-5)


def test_default_picks_chunked_from_128_for_masked_small_heads(rng):
  """A masked call with heads of at most 32 features takes 'chunked' from T = S = 128 on CPU; an
  unmasked one, a larger head, or a smaller length keeps 'reference' (attention/dispatch.py)."""
  if jax.default_backend() != 'cpu':
    pytest.skip('the default picks cuDNN on GPU')
  chosen = lambda t, head, **options: attention.dispatch.chosen_implementation(
    *(np.zeros((2, 2, t, head), np.float32) for _ in range(3)), **options
  )[0]
  mask = np.arange(128) < np.array([128, 64])[:, None, None, None]  # [B, 1, 1, S]
  assert chosen(128, 32, mask=mask) == chosen(128, 32, is_causal=True) == 'chunked'
  assert chosen(128, 16, mask=mask) == 'chunked'
  assert chosen(128, 32) == chosen(128, 64, mask=mask) == chosen(127, 32, is_causal=True)
  assert chosen(128, 32) == 'reference'
  q, k, v = (rng.standard_normal((2, 2, 128, 32)).astype(np.float32) for _ in range(3))
  bias = np.zeros((2, 2, 128, 128), np.float32)
  out = attention.scaled_dot_product_attention(q, k, v, mask=mask)
  np.testing.assert_allclose(out, _numpy_attention(q, k, v, mask, bias), atol=1e-5, rtol=1e-5)
