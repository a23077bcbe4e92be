"""Multi-head latent attention (attention/latent.py, models/latent_attention.py) and DeepSeek
Sparse Attention's selection (attention/sparse.py) against NumPy references written here: the
absorbed kernel and the plain path equal expanded softmax attention, the cache holds (r + Dr)
numbers per token, cached decoding equals the whole sequence, and bad settings are refused in
one sentence before anything is compiled.

Tolerances: float32 on both sides of a kernel comparison, sums of at most a few dozen terms of
magnitude about 1, so 1e-5 absolute allows about a hundred units in the last place; the layer's
cached decoding against its whole-sequence pass sums the same terms in two orders (absorbed and
plain), same bound.
"""

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from models import compression, interventions
from models.attention_layer import MultiHeadAttention
from models.language import DecoderLM
from models.latent_attention import LatentAttention
from models.stack_config import AttentionConfig, StackConfig

ATOL = 1e-5


def _softmax_rows(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
  """Masked softmax of one row `[S]`; a row with no visible key is all zeros."""
  if not mask.any():
    return np.zeros_like(scores)
  e = np.where(mask, np.exp(scores - scores[mask].max()), 0.0)
  return e / e.sum()


def _reference(q_nope, q_rope, latent, rope_key, w_uk, w_uv, mask, scale):
  """Latent attention the plain way, in loops: each head's keys `[c W_UK, k_rope]` and values
  `c W_UV` expanded, then a masked softmax over the keys. `[B, N, T, Dv]`."""
  b, n, t, _ = q_nope.shape
  out = np.zeros((b, n, t, w_uv.shape[-1]))
  for i in range(b):
    for h in range(n):
      keys = np.concatenate([latent[i] @ w_uk[:, h], rope_key[i]], axis=-1)  # [S, Dn + Dr]
      values = latent[i] @ w_uv[:, h]  # [S, Dv]
      for j in range(t):
        query = np.concatenate([q_nope[i, h, j], q_rope[i, h, j]])
        weights = _softmax_rows(scale * keys @ query, mask[i, j])
        out[i, h, j] = weights @ values
  return out


def test_absorbed_kernel_and_plain_path_equal_expanded_softmax_attention():
  rng = np.random.default_rng(0)
  b, n, t, s, r, dn, dr, dv = 2, 3, 4, 6, 5, 4, 2, 3
  arrays = [
    rng.normal(size=shape).astype(np.float32)
    for shape in ((b, n, t, dn), (b, n, t, dr), (b, s, r), (b, s, dr), (r, n, dn), (r, n, dv))
  ]
  mask = rng.random((b, t, s)) < 0.7
  mask[0, 1] = False  # a query that sees nothing gets zeros, not NaN
  scale = (dn + dr) ** -0.5
  expected = _reference(*arrays, mask, scale)
  absorbed = attention.latent_attention(*arrays, mask=mask[:, None])
  np.testing.assert_allclose(absorbed, expected, atol=ATOL)
  keys, values = attention.expand_latent(*arrays[2:])  # [B, N, S, Dn + Dr], [B, N, S, Dv]
  q = jnp.concatenate(arrays[:2], axis=-1)
  plain = attention.VARIANTS['softmax'].attend(q, keys, values, mask=mask[:, None], scale=scale)
  np.testing.assert_allclose(plain, expected, atol=ATOL)
  assert np.all(np.asarray(absorbed)[0, :, 1] == 0)


def _index_reference(q, k, w, scale):
  b, t, h, _ = q.shape
  out = np.zeros((b, t, k.shape[1]))
  for i in range(b):
    for j in range(t):
      for s in range(k.shape[1]):
        out[i, j, s] = sum(w[i, j, g] * max(0.0, scale * q[i, j, g] @ k[i, s]) for g in range(h))
  return out


def test_lightning_index_scores_and_top_k_against_numpy():
  rng = np.random.default_rng(1)
  q, k = rng.normal(size=(2, 5, 3, 4)), rng.normal(size=(2, 5, 4))
  w = rng.normal(size=(2, 5, 3))
  expected = _index_reference(q, k, w, 0.5)
  scores = np.asarray(attention.index_scores(q, k, w, scale=0.5))
  np.testing.assert_allclose(scores, expected, atol=ATOL)
  causal = np.tril(np.ones((5, 5), bool))
  chosen = np.asarray(attention.top_k_mask(scores, 2, causal))
  for i in range(2):
    for j in range(5):
      visible = np.flatnonzero(causal[j])
      best = visible[np.argsort(-scores[i, j, visible], kind='stable')[:2]]
      assert set(np.flatnonzero(chosen[i, j])) == set(best), (i, j)
  # Ties go to the lower key index (jax.lax.top_k's order), and invisible keys are never chosen.
  tied = np.asarray(attention.top_k_mask(jnp.array([[1.0, 2.0, 2.0, 2.0, 9.0]]), 2, causal[3]))
  np.testing.assert_array_equal(tied, [[False, True, True, False, False]])
  with pytest.raises(ValueError, match='k must be a positive integer'):
    attention.top_k_mask(scores, 0)


def test_the_latent_cache_holds_the_latent_and_rotary_key_only():
  """Per token and layer: (r + Dr) x 4 bytes = 320 B at kv_lora_rank 64, rope_head_dim 16, d_model
  256 with 8 heads; a multi-head cache of that width holds 2 x 8 heads x 32 x 4 = 2,048 B, so the
  latent's is 15.6%, under a quarter. (Against 2 key/value heads, 512 B, it would be 62.5%.)"""
  latent = dict(kv_lora_rank=64, rope_head_dim=16, positions='rope', qkv_bias=False)
  config = AttentionConfig(d_model=256, num_heads=8, **latent)
  layer = nnx.eval_shape(lambda: LatentAttention(config, rngs=nnx.Rngs(0)))
  cache = layer.init_cache(2, 10)
  assert {name: leaf.shape for name, leaf in cache.items()} == {
    'latent': (2, 10, 64),
    'rope_key': (2, 10, 16),
  }
  per_token = sum(leaf.nbytes for leaf in cache.values()) / (2 * 10)
  assert per_token == (64 + 16) * 4
  mha = MultiHeadAttention(
    AttentionConfig(d_model=256, num_heads=8, num_kv_heads=8), rngs=nnx.Rngs(0)
  )
  full = sum(leaf.nbytes for leaf in jax.tree.leaves(mha.init_cache(2, 10))) / (2 * 10)
  assert full == 2048 and per_token <= full / 4


LAYERS = {
  'mla': dict(q_lora_rank=12),
  'mla, no query latent, halves': dict(rope_layout='halves'),
  'dsa': dict(q_lora_rank=12, index_topk=3, index_heads=4, index_head_dim=6),
  'dsa from x': dict(index_topk=2, index_heads=2, index_head_dim=4),
}


@pytest.mark.parametrize('name', sorted(LAYERS))
def test_cached_absorbed_decoding_equals_the_plain_whole_sequence(name):
  config = StackConfig(
    d_model=16,
    num_heads=2,
    d_k=4,
    d_v=6,
    kv_lora_rank=8,
    rope_head_dim=4,
    positions='rope',
    max_length=12,
    **LAYERS[name],
  )
  layer = LatentAttention(config, rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(1), (2, 9, 16))

  def whole(x):
    with interventions.editing(layer) as run:
      return layer(x, is_causal=True), run.captured

  full, captured = jax.jit(whole)(x)  # one program each: eager, every small op compiles apart
  weights = captured['weights']  # [B, N, T, S]
  np.testing.assert_allclose(weights.sum(-1), 1.0, atol=ATOL)
  assert np.all(np.triu(np.asarray(weights)[0, 0], 1) == 0)
  step = jax.jit(layer.decode_step)
  prefilled, cache = step(x[:, :5], layer.init_cache(2, 12), jnp.int32(0))  # a block, then steps
  steps = [prefilled]
  for t in range(5, 9):
    out, cache = step(x[:, t : t + 1], cache, jnp.int32(t))
    steps.append(out)
  np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, atol=ATOL)
  if config.index_topk:  # selection really happens: later queries read index_topk keys only
    selected = np.asarray(captured['selected'])
    assert np.all(selected.sum(-1) == np.minimum(np.arange(1, 10), config.index_topk))
    assert np.all(np.asarray(weights)[~np.broadcast_to(selected[:, None], weights.shape)] == 0)
    assert set(cache) == {'latent', 'rope_key', 'index_key'}


def test_rope_interleave_equals_pairs_on_the_raw_features():
  """DeepSeek's interleaved rotary: pairs (2i, 2i+1) rotated and written out in halves, queries
  and keys alike; their dot product is rotary_embedding's 'pairs' one on the raw features."""
  rng = np.random.default_rng(2)
  q, k = rng.normal(size=(8,)), rng.normal(size=(8,))
  inv_freq = 10000.0 ** (-np.arange(0, 8, 2) / 8)

  def interleaved(x, p):
    cos, sin = np.cos(p * inv_freq), np.sin(p * inv_freq)
    even, odd = x[0::2], x[1::2]
    return np.concatenate([even * cos - odd * sin, odd * cos + even * sin])

  ours = attention.rotary_embedding(jnp.stack([q, k])[:, None], jnp.array([[5], [2]]))
  np.testing.assert_allclose(
    interleaved(q, 5) @ interleaved(k, 2), np.asarray(ours[0, 0] @ ours[1, 0]), atol=ATOL
  )


def test_bad_settings_are_one_sentence_before_any_compilation():
  latent = dict(positions='rope', rope_head_dim=4)
  with pytest.raises(ValueError, match='kv_lora_rank=64 must be smaller than the width'):
    StackConfig(d_model=32, num_heads=2, kv_lora_rank=64, **latent)
  with pytest.raises(ValueError, match='index_topk=20 must be at most the context, 16'):
    StackConfig(d_model=32, num_heads=2, kv_lora_rank=8, index_topk=20, max_length=16, **latent)
  with pytest.raises(ValueError, match='window=4 is not available with kv_lora_rank'):
    StackConfig(d_model=32, num_heads=2, kv_lora_rank=8, window=4, **latent)
  with pytest.raises(ValueError, match='index_head_dim=2 must be at least rope_head_dim=4'):
    StackConfig(d_model=32, num_heads=2, kv_lora_rank=8, index_topk=2, index_head_dim=2, **latent)
  stack = StackConfig(d_model=16, num_heads=2, kv_lora_rank=8, max_length=16, **latent)
  model = DecoderLM(vocab_size=11, pad_id=0, stack=stack, rngs=nnx.Rngs(0))
  assert isinstance(model.layers[0].self_attn, LatentAttention)
  with pytest.raises(ValueError, match='press: layers/0/self_attn is a LatentAttention'):
    compression.check_press(model, attention.get_press('knorm'), 8)
