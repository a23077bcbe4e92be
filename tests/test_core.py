"""Masked softmax, attend, attention, pooling, head splitting and the entropy of weights against
NumPy or hand-computed references."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention.core import (
  attend,
  attention,
  attention_pooling,
  masked_softmax,
  merge_heads,
  split_heads,
)
from attention.penalties import attention_entropy
from attention.scores import general_scores, scaled_dot_scores

TOL = dict(atol=1e-5, rtol=1e-5)
T, F = True, False


def _softmax_ref(scores, mask=None):
  """NumPy masked softmax over the last axis, in float64; fully masked rows are all zero."""
  scores = np.asarray(scores, np.float64)
  mask = np.ones(scores.shape, bool) if mask is None else np.broadcast_to(mask, scores.shape)
  out = np.zeros_like(scores)
  for idx in np.ndindex(*scores.shape[:-1]):
    row, keep = scores[idx], mask[idx]
    if keep.any():
      e = np.where(keep, np.exp(row - row[keep].max()), 0.0)
      out[idx] = e / e.sum()
  return out


def _scores_and_mask(rng):
  """Random scores [2, 4, 6] and a random mask with two fully masked rows."""
  scores = (3.0 * rng.standard_normal((2, 4, 6))).astype(np.float32)
  mask = rng.random((2, 4, 6)) < 0.6
  mask[0, 1] = False
  mask[1, 3] = False
  mask[1, 0] = True  # one fully visible row
  return scores, mask


def test_masked_softmax_matches_numpy(rng):
  """masked_softmax equals the NumPy reference; masked entries and fully masked rows are 0."""
  scores, mask = _scores_and_mask(rng)
  out = np.asarray(masked_softmax(jnp.asarray(scores), jnp.asarray(mask)))
  assert out.dtype == np.float32 and not np.isnan(out).any()
  np.testing.assert_allclose(out, _softmax_ref(scores, mask), **TOL)
  assert np.all(out[~mask] == 0.0)
  assert np.all(out[0, 1] == 0.0) and np.all(out[1, 3] == 0.0)
  live = mask.any(-1)
  np.testing.assert_allclose(out.sum(-1)[live], 1.0, **TOL)


def test_masked_softmax_without_mask_and_broadcast_mask(rng):
  """No mask gives the plain softmax; a [T, S] mask broadcasts over the leading dim."""
  scores = rng.standard_normal((2, 3, 4)).astype(np.float32)
  np.testing.assert_allclose(masked_softmax(scores), _softmax_ref(scores), **TOL)
  causal = np.tril(np.ones((3, 4), bool))
  np.testing.assert_allclose(masked_softmax(scores, causal), _softmax_ref(scores, causal), **TOL)


def test_masked_softmax_grad_finite_and_correct(rng):
  """Grad of sum(c * softmax) is p (c - p.c) on live rows and 0 on masked entries, never NaN;
  so is the JVP along c (the Jacobian is symmetric)."""
  scores, mask = _scores_and_mask(rng)
  c = rng.standard_normal(scores.shape).astype(np.float32)
  grad = np.asarray(jax.grad(lambda s: jnp.sum(c * masked_softmax(s, mask)))(scores))
  assert np.all(np.isfinite(grad))
  assert np.all(grad[~mask] == 0.0)
  p = _softmax_ref(scores, mask)
  expected = p * (c - np.sum(p * c, axis=-1, keepdims=True))
  np.testing.assert_allclose(grad, expected, **TOL)
  # Forward mode too (the derivative is a custom JVP from the weights): the same product.
  _, tangent = jax.jvp(lambda s: masked_softmax(s, mask), (scores,), (c,))
  np.testing.assert_allclose(tangent, expected, **TOL)


def test_masked_softmax_bfloat16(rng):
  """bfloat16 scores give bfloat16 weights whose rows sum to ~1."""
  scores = jnp.asarray(rng.standard_normal((3, 5, 7)), jnp.bfloat16)
  mask = jnp.asarray(np.tril(np.ones((5, 7), bool)))
  out = masked_softmax(scores, mask)
  assert out.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(out, np.float32).sum(-1), 1.0, atol=2e-2)
  np.testing.assert_allclose(
    np.asarray(out, np.float32), _softmax_ref(np.asarray(scores, np.float32), mask), atol=1e-2
  )


def test_masked_softmax_bad_mask_raises():
  """Masks that do not broadcast to the scores, or would enlarge them, raise ValueError."""
  scores = jnp.zeros((2, 4, 6))
  with pytest.raises(ValueError, match=r'\(5,\)'):
    masked_softmax(scores, jnp.ones((5,), bool))
  with pytest.raises(ValueError, match='broadcast'):
    masked_softmax(scores, jnp.ones((3, 2, 4, 6), bool))


def test_attend_matches_einsum_and_checks_lengths(rng):
  """attend is sum_s w_ts v_sv; mismatched key counts raise ValueError."""
  w = rng.random((2, 3, 4, 5)).astype(np.float32)
  v = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
  np.testing.assert_allclose(attend(w, v), np.einsum('bnts,bnsv->bntv', w, v), **TOL)
  with pytest.raises(ValueError, match='S=5.*S=6'):
    attend(jnp.asarray(w), jnp.zeros((2, 3, 6, 7)))


def _qkv(rng, t=4, s=5, d=8, dv=3):
  """Random float32 q [2, T, D], k [2, S, D], v [2, S, Dv]."""
  return (
    rng.standard_normal((2, t, d)).astype(np.float32),
    rng.standard_normal((2, s, d)).astype(np.float32),
    rng.standard_normal((2, s, dv)).astype(np.float32),
  )


def test_attention_scaled_dot_with_mask(rng):
  """attention with scaled_dot scores and a causal mask equals the NumPy pipeline."""
  q, k, v = _qkv(rng)
  mask = np.tril(np.ones((4, 5), bool), k=1)
  out, weights = attention(q, k, v, score_fn=scaled_dot_scores, mask=jnp.asarray(mask))
  ref_w = _softmax_ref(np.einsum('btd,bsd->bts', q, k) / np.sqrt(8.0), mask)
  np.testing.assert_allclose(weights, ref_w, **TOL)
  np.testing.assert_allclose(out, np.einsum('bts,bsv->btv', ref_w, v), **TOL)


def test_attention_general_scores_partial(rng):
  """attention with partial(general_scores, w=w) and a padding mask equals the NumPy pipeline."""
  q, k, v = _qkv(rng)
  w = rng.standard_normal((8, 8)).astype(np.float32) * 0.3
  mask = np.array([[[T, T, T, F, F]], [[T, T, T, T, T]]])
  out, weights = attention(
    q, k, v, score_fn=functools.partial(general_scores, w=jnp.asarray(w)), mask=jnp.asarray(mask)
  )
  ref_w = _softmax_ref(np.einsum('btd,de,bse->bts', q, w, k), mask)
  np.testing.assert_allclose(weights, ref_w, **TOL)
  np.testing.assert_allclose(out, np.einsum('bts,bsv->btv', ref_w, v), **TOL)


def test_attention_rejects_kv_length_mismatch(rng):
  """Keys and values with different S raise ValueError."""
  q, k, _ = _qkv(rng)
  with pytest.raises(ValueError, match='values'):
    attention(q, k, jnp.zeros((2, 6, 3)))


def test_self_attention_is_permutation_equivariant(rng):
  """Permuting the inputs of self-attention permutes the output rows and both weight axes."""
  x = rng.standard_normal((6, 8)).astype(np.float32)
  perm = rng.permutation(6)
  assert not np.array_equal(perm, np.arange(6))
  out, weights = attention(x, x, x)
  out_p, weights_p = attention(x[perm], x[perm], x[perm])
  np.testing.assert_allclose(out_p, np.asarray(out)[perm], **TOL)
  np.testing.assert_allclose(weights_p, np.asarray(weights)[perm][:, perm], **TOL)


def test_attention_pooling_matches_numpy(rng):
  """Pooling weights are softmax(h . u) and the output is sum_t alpha_t h_t."""
  h = rng.standard_normal((2, 5, 4)).astype(np.float32)
  u = rng.standard_normal((4,)).astype(np.float32)
  pooled, weights = attention_pooling(jnp.asarray(h), jnp.asarray(u))
  assert pooled.shape == (2, 4) and weights.shape == (2, 5)
  ref_w = _softmax_ref(np.einsum('btd,d->bt', h, u))
  np.testing.assert_allclose(weights, ref_w, **TOL)
  np.testing.assert_allclose(pooled, np.einsum('bt,btd->bd', ref_w, h), **TOL)


def test_attention_pooling_with_keys_and_mask(rng):
  """With keys=, weights come from keys . query but the output sums h; masked steps get 0."""
  h = rng.standard_normal((2, 5, 4)).astype(np.float32)
  keys = np.tanh(rng.standard_normal((2, 5, 6))).astype(np.float32)
  u = rng.standard_normal((6,)).astype(np.float32)
  mask = np.array([[T, T, T, F, F], [T, F, T, T, T]])
  pooled, weights = attention_pooling(
    jnp.asarray(h), jnp.asarray(u), jnp.asarray(mask), keys=jnp.asarray(keys)
  )
  ref_w = _softmax_ref(np.einsum('bta,a->bt', keys, u), mask)
  np.testing.assert_allclose(weights, ref_w, **TOL)
  assert np.all(np.asarray(weights)[~mask] == 0.0)
  np.testing.assert_allclose(pooled, np.einsum('bt,btd->bd', ref_w, h), **TOL)


def test_split_heads_layout():
  """split_heads([2, 5, 12], 3) is [2, 3, 5, 4] with out[b, n, t, h] == x[b, t, n*4 + h]."""
  x = np.arange(2 * 5 * 12, dtype=np.float32).reshape(2, 5, 12)
  out = np.asarray(split_heads(jnp.asarray(x), 3))
  assert out.shape == (2, 3, 5, 4)
  for b, n, t, h in np.ndindex(*out.shape):
    assert out[b, n, t, h] == x[b, t, n * 4 + h]


def test_merge_heads_inverts_split(rng):
  """merge_heads(split_heads(x)) returns x exactly."""
  x = rng.standard_normal((2, 5, 12)).astype(np.float32)
  np.testing.assert_array_equal(merge_heads(split_heads(jnp.asarray(x), 3)), x)


def test_split_heads_bad_num_heads_raises():
  """Features not divisible by num_heads (12 by 5) raise ValueError; merge needs 3 dims."""
  with pytest.raises(ValueError, match='num_heads=5'):
    split_heads(jnp.zeros((2, 5, 12)), 5)
  with pytest.raises(ValueError, match='num_heads'):
    split_heads(jnp.zeros((2, 5, 12)), 0)
  with pytest.raises(ValueError, match='merge_heads'):
    merge_heads(jnp.zeros((5, 12)))


def test_attention_entropy_by_hand():
  """One-hot rows have entropy 0, uniform rows over S keys log S, masked zeros add nothing."""
  weights = np.array(
    [[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [0.5, 0.5, 0.0, 0.0], [0.9, 0.1, 0.0, 0.0]]
  )
  expected = [0.0, np.log(4), np.log(2), -(0.9 * np.log(0.9) + 0.1 * np.log(0.1))]
  np.testing.assert_allclose(attention_entropy(weights), expected, rtol=1e-6)
  gradient = jax.grad(lambda w: attention_entropy(w).sum())(jnp.asarray(weights))
  assert np.all(np.isfinite(gradient))
