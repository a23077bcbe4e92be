"""Kept first tokens (StreamingLLM's attention sinks) with rotary positions: the scores against a
NumPy rotation, the attention layer's full pass against NumPy, and its cached decoding against
its full pass."""

from flax import nnx
import jax.numpy as jnp
import numpy as np
import pytest

import attention
import models
from models import interventions
from models.attention_layer import MultiHeadAttention
from models.stack_config import AttentionConfig


def _rotate(x: np.ndarray, positions: np.ndarray, base: float, layout: str) -> np.ndarray:
  """NumPy RoPE in float64 as complex numbers: pair (x[2i], x[2i+1]) ('pairs') or
  (x[i], x[i + H/2]) ('halves') times exp(1j p base^(-2i/H)); `x [..., T, H]`, `positions [T]`."""
  h = x.shape[-1]
  theta = base ** (-np.arange(0, h, 2) / h)  # [H/2]
  turn = np.exp(1j * positions[:, None] * theta)  # [T, H/2]
  if layout == 'pairs':
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * turn
    return np.stack([z.real, z.imag], axis=-1).reshape(x.shape)
  z = (x[..., : h // 2] + 1j * x[..., h // 2 :]) * turn
  return np.concatenate([z.real, z.imag], axis=-1)


def _reference_scores(q, k, window, sink_tokens, base, layout, scale):
  """Scores `[..., T, T]` of raw q, k at positions 0 .. T-1, key j < sink_tokens seen from query
  position min(i, window + sink_tokens - 1), every other key from i."""
  t = q.shape[-2]
  positions = np.arange(t)
  kept_from = np.minimum(positions, window + sink_tokens - 1)
  keys = _rotate(k, positions, base, layout)
  true = _rotate(q, positions, base, layout) @ np.swapaxes(keys, -1, -2)
  moved = _rotate(q, kept_from, base, layout) @ np.swapaxes(keys, -1, -2)
  return scale * np.where(positions[None, :] < sink_tokens, moved, true)


@pytest.mark.parametrize('layout', ['pairs', 'halves'])
def test_kept_keys_are_scored_at_the_offset_the_cache_gives_them(rng, layout):
  """Window 3, 2 kept tokens: P = 4. Every query from position 4 on has the same (raw) vector,
  so its kept columns are equal: the kept tokens sit 4 - j back however far the stream goes."""
  t, h, base = 12, 8, 100.0
  q = np.repeat(rng.standard_normal((1, h)), t, axis=0)
  q[:3] = rng.standard_normal((3, h))
  k = rng.standard_normal((t, h))
  positions = jnp.arange(t)
  rotate = lambda x: attention.rotary_embedding(
    jnp.asarray(x, jnp.float32), positions, base, layout
  )
  scores = attention.kept_rotary_scores(
    attention.scaled_dot_scores, positions, positions, 3, 2, base=base, layout=layout
  )(rotate(q), rotate(k))
  expected = _reference_scores(q, k, 3, 2, base, layout, h**-0.5)
  np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(scores[4:, :2], np.broadcast_to(scores[4, :2], (t - 4, 2)), atol=1e-5)
  # The other keys keep their true offsets: query 9 reads key 8 as the plain rotary score.
  plain = attention.scaled_dot_scores(rotate(q), rotate(k))
  np.testing.assert_allclose(scores[:, 2:], plain[:, 2:], atol=1e-6)
  assert np.abs(scores[8:, :2] - plain[8:, :2]).max() > 1e-3


def _layer(window: int, sink_tokens: int, **overrides) -> MultiHeadAttention:
  config = AttentionConfig(
    d_model=16,
    num_heads=4,
    num_kv_heads=2,
    positions='rope',
    rope_base=50.0,
    rope_layout='halves',
    window=window,
    sink_tokens=sink_tokens,
    **overrides,
  )
  return MultiHeadAttention(config, rngs=nnx.Rngs(0))


def test_the_layer_with_kept_tokens_and_rope_equals_numpy(rng):
  """Grouped heads (4 query, 2 key/value), Gemma's query scale, window 4 and 2 kept tokens over
  11 positions: the output and the captured weights."""
  mha, (b, t, d) = _layer(4, 2, query_scale=0.3), (2, 11, 16)
  x = rng.standard_normal((b, t, d)).astype(np.float32)
  out = mha(jnp.asarray(x), is_causal=True)
  weights = interventions.capture(mha, jnp.asarray(x), is_causal=True)[1]['weights']
  param = lambda p: np.asarray(p[...], np.float64)
  heads = lambda linear, n: (
    (x @ param(linear.kernel) + param(linear.bias)).reshape(b, t, n, 4).transpose(0, 2, 1, 3)
  )  # [B, n, T, 4]
  q = heads(mha.w_q, 4)
  k, v = np.repeat(heads(mha.w_k, 2), 2, axis=1), np.repeat(heads(mha.w_v, 2), 2, axis=1)
  scores = _reference_scores(q, k, 4, 2, 50.0, 'halves', 0.3)
  i, j = np.arange(t)[:, None], np.arange(t)[None, :]
  visible = (j <= i) & ((i - j < 4) | (j < 2))
  w = np.where(visible, np.exp(scores - scores.max(-1, keepdims=True)), 0.0)
  w /= w.sum(-1, keepdims=True)
  ref = np.einsum('bnts,bnsh->bnth', w, v).transpose(0, 2, 1, 3).reshape(b, t, d)
  np.testing.assert_allclose(weights, w, atol=1e-5)
  np.testing.assert_allclose(out, ref @ param(mha.w_o.kernel) + param(mha.w_o.bias), atol=1e-5)


@pytest.mark.parametrize('prefill', [1, 9])
def test_cached_decoding_with_kept_tokens_and_rope_equals_the_full_pass(rng, prefill):
  """A cache of 2 kept + 3 window slots over 12 positions, filled token by token or first by a
  block longer than the window."""
  mha, t = _layer(3, 2), 12
  x = jnp.asarray(rng.standard_normal((2, t, 16)), jnp.float32)
  full = mha(x, is_causal=True)
  out, cache = mha.decode_step(x[:, :prefill], mha.init_cache(2, t), 0)
  outs = [out]
  for step in range(prefill, t):
    out, cache = mha.decode_step(x[:, step : step + 1], cache, step)
    outs.append(out)
  np.testing.assert_allclose(jnp.concatenate(outs, axis=1), full, atol=2e-5)
  assert cache['k'].shape == (2, 2, 5, 4)


def test_kept_tokens_with_rope_need_a_variant_with_scores():
  build = lambda **kw: models.build(
    models.default_config('decoder_lm', num_layers=1, d_model=8, num_heads=2, d_ff=8, **kw),
    vocab_size=5,
    pad_id=0,
    rngs=nnx.Rngs(0),
  )
  build(positions='rope', window=4, sink_tokens=1)
  with pytest.raises(ValueError, match="sink_tokens=1, which needs the variant option 'scores'"):
    build(positions='rope', window=4, sink_tokens=1, attention='sigmoid')
