"""Differential attention (Ye et al. 2025), gated attention's output gate (Qiu et al. 2025) and
partial rotary positions, each against a NumPy reference written here; cached decoding of a
DecoderLM with each equals its full pass; refusals name the field.

The kernel comparisons run in float64 (`jax.enable_x64`): both sides then round at about 1e-16
relative, and 1e-10 separates them from any real difference (a wrong head pairing, a missing
norm) by orders of magnitude. The layer comparisons run in float32 with full-precision matmuls
(conftest): 1e-5 allows a hundred float32 roundings of values of size about 1.
"""

from conftest import build_model
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from models import interventions
from models.attention_layer import MultiHeadAttention
from models.stack_config import AttentionConfig

F64 = dict(atol=1e-10, rtol=0)
TOL = dict(atol=1e-5, rtol=1e-5)
V = 13
SIZES = dict(vocab_size=V, pad_id=0, num_layers=1, d_model=16, num_heads=4, d_ff=16)
SIZES.update(dropout_rate=0.0, max_length=12, norm='pre', positions='rope')


def _rngs(seed: int = 0) -> nnx.Rngs:
  return nnx.Rngs(params=jax.random.key(seed, impl='rbg'))


def _softmax(s):
  e = np.exp(s - s.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _np_differential(q, k, v, lam, init, eps, causal=True):
  """Pairs `[B, N/2, T, 2 Dv]` and maps `[B, N/2, T, S]` by loops over heads, as DiffLlama pairs
  them: query heads n and n + N/2, values of key/value heads j and j + K/2 side by side."""
  b, n, t, h = q.shape
  kv, s = k.shape[1], k.shape[2]
  g = n // kv
  visible = np.tril(np.ones((t, s), bool), s - t) if causal else np.ones((t, s), bool)
  out = np.zeros((b, n // 2, t, 2 * v.shape[-1]))
  maps = np.zeros((b, n // 2, t, s))
  for i in range(b):
    for pair in range(n // 2):
      weights = []
      for head in (pair, pair + n // 2):
        scores = q[i, head] @ k[i, head // g].T / np.sqrt(h)
        weights.append(_softmax(np.where(visible, scores, -np.inf)))
      maps[i, pair] = weights[0] - lam * weights[1]
      j = pair // g
      values = np.concatenate([v[i, j], v[i, j + kv // 2]], axis=-1)  # [S, 2 Dv]
      o = maps[i, pair] @ values
      out[i, pair] = o / np.sqrt(np.mean(o**2, -1, keepdims=True) + eps) * (1 - init)
  return out, maps


def test_differential_kernel_matches_numpy():
  rng = np.random.default_rng(0)
  q, k = rng.standard_normal((2, 4, 5, 6)), rng.standard_normal((2, 2, 5, 6))
  v = rng.standard_normal((2, 2, 5, 3))
  lam, init, eps = 0.37, attention.lambda_init(2), 1e-5
  out, maps = _np_differential(q, k, v, lam, init, eps)
  with jax.enable_x64(True):
    option = attention.Differential(jnp.float64(lam), init, eps)
    run = dict(differential=option, is_causal=True)
    ours = attention.differential_attention(q, k, v, **run, implementation='reference')
    ours_maps = attention.differential_weights(q, k, **run)
    again = attention.differential_from_weights(ours_maps, v, option)
    assert ours.dtype == jnp.float64 and ours.shape == (2, 2, 5, 6)
    np.testing.assert_allclose(ours, out, **F64)
    np.testing.assert_allclose(ours_maps, maps, **F64)
    np.testing.assert_allclose(again, out, **F64)
  # DiffLlama's depth convention, 0-based: 0.2 at the first layer.
  assert attention.lambda_init(0) == pytest.approx(0.2)
  assert attention.lambda_init(2) == pytest.approx(0.8 - 0.6 * np.exp(-0.6))


def _np_linear(x, linear):
  out = np.asarray(x, np.float64) @ np.asarray(linear.kernel[...], np.float64)
  return out if linear.bias is None else out + np.asarray(linear.bias[...])


def _np_split(x, heads):
  return x.reshape(*x.shape[:2], heads, -1).transpose(0, 2, 1, 3)  # [B, N, T, H]


def _np_merge(x):
  return x.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], -1)  # [B, T, N*H]


def test_differential_layer_matches_numpy_and_its_capture():
  """The layer's λ from its four vectors at depth 3, its projections around the kernel; the
  captured weights are the pairs' maps, and a capture's output is the plain one."""
  config = AttentionConfig(
    d_model=16, num_heads=4, num_kv_heads=2, attention='differential', layer_index=3
  )
  mha = MultiHeadAttention(config, rngs=_rngs())
  x = np.random.default_rng(1).standard_normal((2, 5, 16)).astype(np.float32)
  p = {name: np.asarray(getattr(mha, name)[...], np.float64) for name in ('lambda_q1', 'lambda_k1')}
  p.update({n: np.asarray(getattr(mha, n)[...], np.float64) for n in ('lambda_q2', 'lambda_k2')})
  init = 0.8 - 0.6 * np.exp(-0.9)
  lam = np.exp(p['lambda_q1'] @ p['lambda_k1']) - np.exp(p['lambda_q2'] @ p['lambda_k2']) + init
  q, k, v = (_np_split(_np_linear(x, w), n) for w, n in ((mha.w_q, 4), (mha.w_k, 2), (mha.w_v, 2)))
  heads, maps = _np_differential(q, k, v, lam, init, 1e-5)
  expected = _np_linear(_np_merge(heads), mha.w_o)
  out, captured = jax.jit(lambda x: interventions.capture(mha, x, is_causal=True))(x)
  np.testing.assert_allclose(out, expected, **TOL)
  np.testing.assert_allclose(jax.jit(lambda x: mha(x, is_causal=True))(x), expected, **TOL)
  np.testing.assert_allclose(captured['weights'], maps, **TOL)
  assert captured['heads'].shape == (2, 2, 5, 2 * config.value_size)


def test_output_gate_matches_numpy_and_its_tap_drives_the_output():
  config = AttentionConfig(d_model=8, num_heads=2, d_k=4, d_v=3, output_gate=True, qkv_bias=True)
  mha = MultiHeadAttention(config, rngs=_rngs())
  assert mha.w_gate.kernel.shape == (8, 6) and mha.w_gate.bias.shape == (6,)
  x = np.random.default_rng(2).standard_normal((2, 5, 8)).astype(np.float32)
  q, k, v = (_np_split(_np_linear(x, w), 2) for w in (mha.w_q, mha.w_k, mha.w_v))
  heads = _softmax(np.einsum('bnth,bnsh->bnts', q, k) / 2.0) @ v  # [B, N, T, d_v]
  gate = 1 / (1 + np.exp(-_np_split(_np_linear(x, mha.w_gate), 2)))  # [B, N, T, d_v]
  expected = _np_linear(_np_merge(heads * gate), mha.w_o)
  np.testing.assert_allclose(jax.jit(mha)(x), expected, **TOL)
  out, captured = jax.jit(lambda x: interventions.capture(mha, x))(x)
  np.testing.assert_allclose(out, expected, **TOL)
  np.testing.assert_allclose(captured['gate'], gate, **TOL)
  # A closed gate leaves W_O's bias: the edited gate value drives the output.
  closed = jax.jit(lambda x: interventions.capture(mha, x, edits={'gate': jnp.zeros_like})[0])
  np.testing.assert_allclose(closed(x), np.broadcast_to(mha.w_o.bias[...], (2, 5, 8)), **TOL)


def _np_partial_rope(x, positions, dims, base, layout):
  """The first `dims` features rotated (pairs `(2i, 2i+1)` or halves `(i, i + dims/2)`) by
  `p base^(-2i/dims)`; the others as they are."""
  x = np.array(x, np.float64)
  angles = np.asarray(positions, np.float64)[:, None] * base ** (-np.arange(0, dims, 2) / dims)
  if layout == 'pairs':
    first, second = slice(0, dims, 2), slice(1, dims, 2)
  else:
    first, second = slice(0, dims // 2), slice(dims // 2, dims)
  a, b = x[..., first].copy(), x[..., second].copy()
  x[..., first] = a * np.cos(angles) - b * np.sin(angles)
  x[..., second] = a * np.sin(angles) + b * np.cos(angles)
  return x


@pytest.mark.parametrize('layout', ('pairs', 'halves'))
def test_rope_dims_rotates_the_first_features_only(layout):
  config = AttentionConfig(
    d_model=16, num_heads=2, positions='rope', rope_dims=4, rope_layout=layout, rope_base=100.0
  )
  mha = MultiHeadAttention(config, rngs=_rngs())
  x = np.random.default_rng(3).standard_normal((2, 5, 16)).astype(np.float32)
  positions = np.arange(5) + 3
  q = _np_split(_np_linear(x, mha.w_q), 2)  # [B, N, T, 8]
  ours = jax.jit(mha._query)(x, jnp.asarray(positions))
  np.testing.assert_allclose(ours, _np_partial_rope(q, positions, 4, 100.0, layout), **TOL)
  # The rest pass through untouched: exactly what they are at position 0 (no rotation).
  unrotated = jax.jit(mha._query)(x, jnp.zeros(5, jnp.int32))
  np.testing.assert_array_equal(np.asarray(ours)[..., 4:], np.asarray(unrotated)[..., 4:])


def _decoder(**kwargs):
  return build_model('decoder_lm', **{**SIZES, **kwargs}, rngs=_rngs())


@pytest.mark.parametrize(
  'options',
  [
    dict(attention='differential', num_kv_heads=2),
    dict(output_gate=True, rope_dims=2, rope_layout='halves'),
  ],
  ids=('differential', 'gated_partial_rope'),
)
def test_decoder_cached_decoding_equals_the_full_pass_and_gradients_are_finite(options):
  model = _decoder(**options)
  ids = jnp.asarray(np.random.default_rng(4).integers(1, V, (2, 7)), jnp.int32)
  full = jax.jit(model.token_logits)(ids)
  cache = jax.jit(model.init_decode_cache, static_argnums=1)(ids[:, :3], 5)
  step = jax.jit(model.decode_step)
  out = []
  for t in range(5):
    logits, cache = step(ids[:, 2 + t], jnp.int32(t), cache)
    out.append(logits)
  np.testing.assert_allclose(jnp.stack(out, axis=1), full[:, 2:], **TOL)
  graphdef, state = nnx.split(model)
  loss = lambda state: jnp.mean(nnx.merge(graphdef, state).token_logits(ids) ** 2)
  grads = jax.jit(jax.grad(loss))(state)
  leaves = jax.tree.leaves(grads)
  assert all(bool(jnp.all(jnp.isfinite(g))) for g in leaves)
  # The mechanism's own parameters learn.
  added = grads['layers'][0]['self_attn']['lambda_q1' if options.get('attention') else 'w_gate']
  assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(added)) > 0


@pytest.mark.parametrize(
  'fields, named',
  [
    (dict(attention='differential', num_heads=3, d_model=12), 'num_heads'),
    (dict(attention='differential', num_heads=4, num_kv_heads=1), 'num_kv_heads'),
    (dict(attention='differential', output_gate=True), 'output_gate'),
    (dict(rope_dims=4, positions='rope', window=4, sink_tokens=1), 'sink_tokens'),
    (dict(rope_dims=4, positions='learned'), 'rope_dims'),
  ],
)
def test_refusals_name_the_field(fields, named):
  with pytest.raises(ValueError, match=named):
    AttentionConfig(**{'d_model': 16, 'num_heads': 2, **fields})
