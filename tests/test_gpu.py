"""GPU-only kernel checks (skipped elsewhere): cuDNN and chunked against the reference kernel.

The suite runs these whenever JAX sees a GPU; see the README's GPU section for the command.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention import padding_mask, scaled_dot_product_attention

pytestmark = pytest.mark.skipif(jax.default_backend() != 'gpu', reason='needs a GPU')

CASES = {
  'plain': dict(t=64, s=96),
  'causal': dict(t=128, s=128, is_causal=True),
  'padding': dict(t=64, s=80, lengths=(80, 17)),
  'bias': dict(t=48, s=64, bias=True),
}


def _relative_error(x, ref):
  x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
  return np.linalg.norm(x - ref) / np.linalg.norm(ref)


def _values_and_grads(implementation, case, dtype, rng):
  """Output and d/dq, d/dk, d/dv of sum(out * cotangent), from float32 draws cast to `dtype`."""
  c = CASES[case]
  draw = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
  q, k, v = draw(2, 4, c['t'], 64), draw(2, 4, c['s'], 64), draw(2, 4, c['s'], 64)
  cotangent = draw(2, 4, c['t'], 64)
  mask = padding_mask(jnp.array(c['lengths']), c['s'])[:, None] if 'lengths' in c else None
  bias = draw(1, 4, c['t'], c['s']).astype(dtype) if c.get('bias') else None

  def loss(q, k, v):
    out = scaled_dot_product_attention(
      q,
      k,
      v,
      mask=mask,
      bias=bias,
      is_causal=c.get('is_causal', False),
      implementation=implementation,
    )
    return jnp.sum(out.astype(jnp.float32) * cotangent), out

  (_, out), grads = jax.jit(jax.value_and_grad(loss, (0, 1, 2), has_aux=True))(
    *(x.astype(dtype) for x in (q, k, v))
  )
  return out, grads


@pytest.mark.parametrize('case', list(CASES))
@pytest.mark.parametrize(
  'implementation,dtype,tolerance',
  [('cudnn', jnp.bfloat16, 1e-2), ('chunked', jnp.bfloat16, 1e-2), ('chunked', jnp.float32, 1e-5)],
)
def test_kernel_matches_reference_on_gpu(case, implementation, dtype, tolerance):
  """Same inputs, same dtype: output and gradients within the dtype's rounding of 'reference'."""
  ref_out, ref_grads = _values_and_grads('reference', case, dtype, np.random.default_rng(0))
  out, grads = _values_and_grads(implementation, case, dtype, np.random.default_rng(0))
  assert out.dtype == dtype
  assert _relative_error(out, ref_out) < tolerance
  for name, g, g_ref in zip('qkv', grads, ref_grads):
    assert np.all(np.isfinite(np.asarray(g, np.float32))), name
    assert _relative_error(g, g_ref) < tolerance, f'gradient wrt {name}'


def test_default_picks_cudnn_for_bfloat16():
  """On a GPU the default kernel for bfloat16 is cuDNN's (its output equals an explicit 'cudnn')."""
  rng = np.random.default_rng(1)
  q, k, v = (jnp.asarray(rng.standard_normal((2, 4, 256, 64)), jnp.bfloat16) for _ in range(3))
  default = scaled_dot_product_attention(q, k, v, is_causal=True)
  cudnn = scaled_dot_product_attention(q, k, v, is_causal=True, implementation='cudnn')
  np.testing.assert_array_equal(np.asarray(default, np.float32), np.asarray(cudnn, np.float32))


@pytest.mark.parametrize('is_causal', [False, True])
def test_default_trains_with_masks_at_odd_lengths(is_causal):
  """cuDNN's backward refuses masks (padding or causal) at odd lengths; the default then picks
  another kernel, so a bfloat16 train step never fails (it did at T = S = 7 and 9 before)."""
  rng = np.random.default_rng(2)
  q, k, v = (jnp.asarray(rng.standard_normal((2, 4, 7, 64)), jnp.bfloat16) for _ in range(3))
  mask = padding_mask(jnp.array([7, 3]), 7)[:, None]  # [B, 1, 1, S]
  loss = lambda impl: (
    lambda q, k, v: jnp.sum(
      scaled_dot_product_attention(
        q, k, v, mask=mask, is_causal=is_causal, implementation=impl
      ).astype(jnp.float32)
    )
  )
  grads = jax.jit(jax.grad(loss(None), (0, 1, 2)))(q, k, v)
  ref_grads = jax.grad(loss('reference'), (0, 1, 2))(q, k, v)
  for g, g_ref in zip(grads, ref_grads):
    assert _relative_error(g, g_ref) < 1e-2
