"""The Pallas flash kernel (`attention/pallas_flash.py`) in interpret mode on the CPU.

Each variant and several combinations are compared with the reference kernel in output and in
gradients (q, k, v and the sink logits), at odd lengths with 16-row blocks so padding, block
skipping and windows spanning blocks are all exercised. A hand-computed case pins the sink's
meaning. On a GPU the same code runs as Triton kernels; these tests check the mathematics only.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from attention.pallas_flash import flash_attention, pallas_unsupported

B, N, H = 2, 4, 16
BLOCK = 16
SLOPES = jnp.array([0.5, 0.25, 0.125, 0.0625])
SINK = jnp.array([0.5, -1.0, 2.0, 0.0])

# name: (T, S, K key/value heads, options). T = S = 37 with 16-row blocks leaves a partial block.
CASES = {
  'plain': (37, 37, 4, {}),
  'causal': (37, 37, 4, dict(is_causal=True)),
  'causal_gqa': (37, 37, 2, dict(is_causal=True)),
  'multi_query': (37, 37, 1, {}),
  'window_bidirectional': (37, 37, 2, dict(window=7)),
  'causal_window_sink_tokens': (37, 37, 2, dict(is_causal=True, window=6, sink_tokens=3)),
  # Without causal masking the first keys are seen from both sides of the window too.
  'window_sink_tokens_bidirectional': (37, 37, 2, dict(window=6, sink_tokens=3)),
  'causal_window_t_lt_s': (29, 45, 2, dict(is_causal=True, window=9)),
  'alibi_causal': (37, 37, 2, dict(is_causal=True, alibi_slopes=SLOPES)),
  'alibi_bidirectional': (37, 37, 2, dict(alibi_slopes=SLOPES)),
  'sink': (37, 37, 2, dict(sink=SINK)),
  'sink_window_causal': (37, 37, 2, dict(sink=SINK, window=5, is_causal=True)),
  'softcap': (37, 37, 2, dict(softcap=1.5)),
  'softcap_alibi': (37, 37, 2, dict(softcap=1.5, alibi_slopes=SLOPES, is_causal=True)),
  # T > S with a causal window: rows 25.. see no key at all.
  'fully_masked_rows': (45, 20, 2, dict(is_causal=True, window=6)),
  'fully_masked_rows_sink': (45, 20, 2, dict(is_causal=True, window=6, sink=SINK)),
}


def inputs(t, s, kv_heads, h=H, dv=H, seed=0):
  keys = jax.random.split(jax.random.PRNGKey(seed), 4)
  q = jax.random.normal(keys[0], (B, N, t, h))
  k = jax.random.normal(keys[1], (B, kv_heads, s, h))
  v = jax.random.normal(keys[2], (B, kv_heads, s, dv))
  cotangent = jax.random.normal(keys[3], (B, N, t, dv))
  return q, k, v, cotangent


def reference(q, k, v, *, sink_tokens=0, window=0, is_causal=False, **options):
  """The reference kernel with the same meaning; `sink_tokens` as `attention.window_mask`, or
  without causal masking as a band `|i - j| < window` widened by the first `sink_tokens` keys."""
  mask = None
  if sink_tokens:
    i, j = jnp.arange(q.shape[-2]), jnp.arange(k.shape[-2])
    if is_causal:
      mask = attention.window_mask(i, j, window, sink_tokens)
    else:
      mask = (jnp.abs(i[:, None] - j[None, :]) < window) | (j[None, :] < sink_tokens)
    window = 0  # the mask holds the window (and the causal part) now
  return attention.scaled_dot_product_attention(
    q, k, v, implementation='reference', mask=mask, window=window, is_causal=is_causal, **options
  )


def outputs_and_grads(fn, q, k, v, cotangent, options):
  """fn's output and the gradients of `sum(out * cotangent)` w.r.t. q, k, v (and the sink)."""
  options = dict(options)
  sink = options.pop('sink', None)

  def loss(q, k, v, sink):
    out = fn(q, k, v, sink=sink, **options)
    return jnp.sum(out * cotangent), out

  argnums = (0, 1, 2) if sink is None else (0, 1, 2, 3)
  grads, out = jax.jit(jax.grad(loss, argnums, has_aux=True))(q, k, v, sink)
  return out, grads


def relative_error(x, y):
  return float(jnp.linalg.norm(x - y) / jnp.maximum(jnp.linalg.norm(y), 1e-30))


@pytest.mark.parametrize('name', list(CASES))
def test_matches_reference(name):
  t, s, kv_heads, options = CASES[name]
  q, k, v, cotangent = inputs(t, s, kv_heads)
  flash = lambda *a, **o: flash_attention(*a, block_q=BLOCK, block_k=BLOCK, **o)
  out, grads = outputs_and_grads(flash, q, k, v, cotangent, options)
  want_out, want_grads = outputs_and_grads(reference, q, k, v, cotangent, options)
  assert relative_error(out, want_out) < 1e-5
  for arg, got, want in zip(('q', 'k', 'v', 'sink'), grads, want_grads):
    assert got.shape == want.shape, arg
    assert relative_error(got, want) < 1e-5, arg
  if name.startswith('fully_masked'):
    empty = slice(s + options['window'] - 1, None)  # the rows whose window lies past the keys
    np.testing.assert_array_equal(out[:, :, empty], 0.0)
    np.testing.assert_array_equal(grads[0][:, :, empty], 0.0)


def test_unequal_head_sizes_and_bfloat16():
  """Head sizes that are not powers of two (padded inside) and Dv != H; bfloat16 inputs."""
  q, k, v, _ = inputs(21, 21, 2, h=12, dv=8)
  options = dict(is_causal=True, sink=SINK, softcap=2.0)
  out = flash_attention(q, k, v, block_q=BLOCK, block_k=BLOCK, **options)
  want = reference(q, k, v, **options)
  assert out.shape == (B, N, 21, 8)
  assert relative_error(out, want) < 1e-5
  low = [x.astype(jnp.bfloat16) for x in (q, k, v)]
  out = flash_attention(*low, block_q=BLOCK, block_k=BLOCK, **options)
  assert out.dtype == jnp.bfloat16
  assert relative_error(out.astype(jnp.float32), want) < 2e-2


def test_sink_by_hand():
  """T = S = 2, H = 1, causal, q = 0 so every logit is 0, sink logit 0, v = [3, 6].

  Row 0 weighs {sink, key 0} equally: out = 3/2. Row 1 weighs {sink, key 0, key 1} equally:
  out = (3 + 6)/3 = 3. For L = out_0 + out_1: out_0 = 3/(e^sink + 1) has d/dsink = -3/4 and
  out_1 = 9/(e^sink + 2) has -9/9 = -1, so dL/dsink = -1.75 (= -Σ p0_i D_i = -(1/2·3/2 + 1/3·3)).
  dL/dv = [1/2 + 1/3, 1/3].
  """
  q = jnp.zeros((1, 1, 2, 1))
  k = jnp.array([[[[1.0], [-2.0]]]])
  v = jnp.array([[[[3.0], [6.0]]]])

  def loss(v, sink):
    out = flash_attention(q, k, v, scale=1.0, is_causal=True, sink=sink)
    return jnp.sum(out), out

  (d_v, d_sink), out = jax.grad(loss, (0, 1), has_aux=True)(v, jnp.zeros(1))
  np.testing.assert_allclose(out[0, 0, :, 0], [1.5, 3.0], rtol=1e-6)
  np.testing.assert_allclose(d_sink, [-1.75], rtol=1e-6)
  np.testing.assert_allclose(d_v[0, 0, :, 0], [5 / 6, 1 / 3], rtol=1e-6)


def test_unsupported_and_bad_arguments():
  q, k, v, _ = inputs(8, 8, 2)
  assert 'dropout' in pallas_unsupported(q, k, v, dropout_rate=0.1)
  assert 'mask' in pallas_unsupported(q, k, v, mask=jnp.ones((8, 8), bool))
  assert 'head sizes' in pallas_unsupported(q, k, jnp.zeros((B, 2, 8, 512)))
  assert 'per query head' in pallas_unsupported(q, k, v, sink=jnp.zeros((B, N)))
  if jax.default_backend() != 'gpu':
    assert 'GPU' in pallas_unsupported(q, k, v, is_causal=True, window=4)
  with pytest.raises(ValueError, match='powers of two'):
    flash_attention(q, k, v, block_q=24)
  with pytest.raises(ValueError, match='K dividing N'):
    flash_attention(q, k[:, :1].repeat(3, axis=1), v[:, :1].repeat(3, axis=1))


def test_lowers_to_triton_for_a_gpu():
  """Without a GPU, lower forward and backward for CUDA: the Pallas Triton lowering runs here and
  rejects what Triton cannot take (loads of non-power-of-two shapes, unsupported primitives). It
  does not compile the Triton IR or run it: that needs a GPU."""
  shape = lambda *s: jax.ShapeDtypeStruct(s, jnp.bfloat16)
  options = dict(is_causal=True, window=32, sink_tokens=4, alibi_slopes=SLOPES, softcap=30.0)

  def loss(q, k, v, sink):
    out = flash_attention(q, k, v, sink=sink, interpret=False, **options)
    return jnp.sum(out.astype(jnp.float32))

  # Head sizes 80 and 48 are padded to 128 and 64; lengths 100 and 90 to whole blocks.
  args = shape(B, N, 100, 80), shape(B, 2, 90, 80), shape(B, 2, 90, 48), SINK
  traced = jax.jit(jax.grad(loss, (0, 1, 2, 3))).trace(*args)
  text = traced.lower(lowering_platforms=('cuda',)).as_text()
  for kernel in ('attend_flash_forward', 'attend_flash_dkdv', 'attend_flash_dq'):
    assert kernel in text


def test_scaled_dot_product_attention_runs_it_by_name():
  """`implementation='pallas'` reaches the kernel (interpret mode here) with the call's options,
  and a mask, which it takes none of, is refused with the reason."""
  rng = np.random.default_rng(3)
  q, k, v = (jnp.asarray(rng.standard_normal((1, 2, 19, 16)), jnp.float32) for _ in range(3))
  options = dict(is_causal=True, window=5, sink=jnp.array([0.5, -1.0]), softcap=3.0)
  out = attention.scaled_dot_product_attention(q, k, v, implementation='pallas', **options)
  ref = attention.scaled_dot_product_attention(q, k, v, implementation='reference', **options)
  np.testing.assert_allclose(out, ref, atol=1e-5, rtol=1e-5)
  with pytest.raises(ValueError, match="implementation='pallas' unavailable: it takes no mask"):
    attention.scaled_dot_product_attention(
      q, k, v, mask=jnp.ones((19, 19), bool), implementation='pallas'
    )
