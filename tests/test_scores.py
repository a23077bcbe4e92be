"""Score functions against NumPy references, hand-computed values and their statistics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention.penalties import attention_entropy
from attention.scores import (
  SCORES,
  additive_scores,
  cosine_scores,
  dot_scores,
  general_scores,
  get_score_fn,
  project_keys,
  scaled_dot_scores,
)

TOL = dict(atol=1e-5, rtol=1e-5)


def _qk(rng, t=4, s=5, d=8, lead=(2, 3)):
  """Random float32 queries `[*lead, T, D]` and keys `[*lead, S, D]`."""
  q = rng.standard_normal((*lead, t, d)).astype(np.float32)
  k = rng.standard_normal((*lead, s, d)).astype(np.float32)
  return q, k


def test_dot_scores_hand_computed():
  """q=[[1,0],[0,2]], k=[[1,1],[3,0]] gives dot scores [[1,3],[2,0]]."""
  q = jnp.array([[1.0, 0.0], [0.0, 2.0]])
  k = jnp.array([[1.0, 1.0], [3.0, 0.0]])
  expected = np.array([[1.0, 3.0], [2.0, 0.0]])
  np.testing.assert_array_equal(dot_scores(q, k), expected)
  np.testing.assert_allclose(scaled_dot_scores(q, k), expected / np.sqrt(2.0), **TOL)


def test_dot_scores_matches_numpy(rng):
  """dot_scores on [2, 3, T, D] x [2, 3, S, D] equals an einsum reference."""
  q, k = _qk(rng)
  out = dot_scores(jnp.asarray(q), jnp.asarray(k))
  assert out.shape == (2, 3, 4, 5)
  np.testing.assert_allclose(out, np.einsum('bntd,bnsd->bnts', q, k), **TOL)


def test_dot_scores_broadcasts_leading_dims(rng):
  """Keys shared across the batch ([3, S, D]) broadcast against queries [2, 3, T, D]."""
  q, _ = _qk(rng)
  k = rng.standard_normal((3, 5, 8)).astype(np.float32)
  np.testing.assert_allclose(dot_scores(q, k), np.einsum('bntd,nsd->bnts', q, k), **TOL)


def test_scaled_dot_scores_default_scale_temperature(rng):
  """Default scale is 1/sqrt(D); explicit scale multiplies; temperature divides."""
  q, k = _qk(rng)
  raw = np.einsum('bntd,bnsd->bnts', q, k)
  np.testing.assert_allclose(scaled_dot_scores(q, k), raw / np.sqrt(8.0), **TOL)
  np.testing.assert_allclose(scaled_dot_scores(q, k, scale=0.3), raw * 0.3, **TOL)
  np.testing.assert_allclose(scaled_dot_scores(q, k, temperature=4.0), raw / 4.0, **TOL)


def test_general_scores_matches_numpy(rng):
  """general_scores with Dq != Dk equals sum_{d,e} q_td W_de k_se computed with loops."""
  q = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
  k = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
  w = rng.standard_normal((6, 7)).astype(np.float32)
  expected = np.zeros((2, 3, 4, 5), np.float64)
  for b in range(2):
    for n in range(3):
      for t in range(4):
        for s in range(5):
          expected[b, n, t, s] = q[b, n, t] @ w @ k[b, n, s]
  np.testing.assert_allclose(general_scores(q, k, w), expected, **TOL)


def _additive_ref(q, k, w_q, w_k, v):
  """Loop reference for v . tanh(q W_q + k W_k) over leading dims [B, N]."""
  b_, n_, t_, s_ = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
  out = np.zeros((b_, n_, t_, s_), np.float64)
  for b in range(b_):
    for n in range(n_):
      for t in range(t_):
        for s in range(s_):
          out[b, n, t, s] = v @ np.tanh(q[b, n, t] @ w_q + k[b, n, s] @ w_k)
  return out


def test_additive_scores_matches_numpy_and_k_proj(rng):
  """additive_scores equals a loop reference, and precomputed k_proj gives the same scores."""
  q = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
  k = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
  w_q = rng.standard_normal((6, 10)).astype(np.float32) * 0.3
  w_k = rng.standard_normal((7, 10)).astype(np.float32) * 0.3
  v = rng.standard_normal((10,)).astype(np.float32)
  expected = _additive_ref(q, k, w_q, w_k, v)
  out = additive_scores(q, k, w_q, w_k, v)
  assert out.shape == (2, 3, 4, 5)
  np.testing.assert_allclose(out, expected, **TOL)
  k_proj = project_keys(jnp.asarray(k), jnp.asarray(w_k))
  np.testing.assert_allclose(k_proj, np.einsum('bnsd,da->bnsa', k, w_k), **TOL)
  np.testing.assert_allclose(additive_scores(q, None, w_q, None, v, k_proj=k_proj), expected, **TOL)


def test_cosine_scores_matches_numpy(rng):
  """cosine_scores equals scale * q.k / (|q| |k|)."""
  q, k = _qk(rng)
  qn = q / np.linalg.norm(q, axis=-1, keepdims=True)
  kn = k / np.linalg.norm(k, axis=-1, keepdims=True)
  expected = 5.0 * np.einsum('bntd,bnsd->bnts', qn, kn)
  np.testing.assert_allclose(cosine_scores(q, k, scale=5.0), expected, **TOL)


def test_cosine_scores_bounds_and_parallel(rng):
  """Cosine scores lie in [-scale, scale]; parallel vectors score scale, antiparallel -scale."""
  q, k = _qk(rng, t=16, s=16)
  out = np.asarray(cosine_scores(q, k, scale=3.0))
  assert np.all(out <= 3.0 + 1e-5) and np.all(out >= -3.0 - 1e-5)
  x = rng.standard_normal((1, 8)).astype(np.float32)
  pair = np.concatenate([2.5 * x, -0.5 * x])  # parallel and antiparallel to x
  np.testing.assert_allclose(cosine_scores(x, pair, scale=3.0), [[3.0, -3.0]], **TOL)


def test_dot_score_variance_grows_with_d_and_scaling_fixes_it(rng):
  """Unit-variance q, k with D=256: dot scores have variance ~D, scaled scores ~1 (within 10%)."""
  d, n = 256, 8000
  q = rng.standard_normal((n, 1, d)).astype(np.float32)  # n independent (q, k) pairs
  k = rng.standard_normal((n, 1, d)).astype(np.float32)
  raw_var = float(np.var(np.asarray(dot_scores(q, k))))
  scaled_var = float(np.var(np.asarray(scaled_dot_scores(q, k))))
  assert abs(raw_var / d - 1.0) < 0.1, raw_var
  assert abs(scaled_var - 1.0) < 0.1, scaled_var


def test_registry_keys_and_lookup():
  """SCORES holds exactly the five kinds and get_score_fn returns the matching function."""
  assert set(SCORES) == {'additive', 'cosine', 'dot', 'general', 'scaled_dot'}
  assert get_score_fn('dot') is dot_scores
  assert get_score_fn('additive') is additive_scores


def test_get_score_fn_unknown_lists_valid_names():
  """An unknown score name raises ValueError naming every valid kind."""
  with pytest.raises(ValueError, match='bogus') as err:
    get_score_fn('bogus')
  for name in ('additive', 'cosine', 'dot', 'general', 'scaled_dot'):
    assert name in str(err.value)


@pytest.mark.parametrize('fn', [dot_scores, scaled_dot_scores, cosine_scores])
def test_mismatched_features_raise(fn):
  """Queries and keys with different feature sizes raise ValueError naming both shapes."""
  with pytest.raises(ValueError, match=r'\(2, 4, 8\).*\(2, 5, 6\)'):
    fn(jnp.zeros((2, 4, 8)), jnp.zeros((2, 5, 6)))


def test_general_scores_wrong_w_shape_raises():
  """general_scores rejects a w that is not [Dq, Dk]."""
  q, k = jnp.zeros((4, 6)), jnp.zeros((5, 7))
  for w in (jnp.zeros((7, 6)), jnp.zeros((6,)), jnp.zeros((6, 7, 1))):
    with pytest.raises(ValueError, match='general_scores'):
      general_scores(q, k, w)


def test_scale_and_temperature_together_raise():
  """Passing both scale and temperature to scaled_dot_scores raises ValueError."""
  with pytest.raises(ValueError, match='not both'):
    scaled_dot_scores(jnp.ones((2, 4)), jnp.ones((3, 4)), scale=0.5, temperature=2.0)


def test_jit_matches_numpy(rng):
  """Jitted scaled_dot_scores and additive_scores agree with the NumPy references."""
  q, k = _qk(rng)
  jitted = jax.jit(scaled_dot_scores)(q, k)
  np.testing.assert_allclose(jitted, np.einsum('bntd,bnsd->bnts', q, k) / np.sqrt(8.0), **TOL)
  w_q = rng.standard_normal((8, 4)).astype(np.float32)
  w_k = rng.standard_normal((8, 4)).astype(np.float32)
  v = rng.standard_normal((4,)).astype(np.float32)
  np.testing.assert_allclose(
    jax.jit(additive_scores)(q, k, w_q, w_k, v), _additive_ref(q, k, w_q, w_k, v), **TOL
  )


def test_vmap_general_scores(rng):
  """vmap of general_scores over a batch axis equals the per-example einsum reference."""
  q = rng.standard_normal((3, 4, 6)).astype(np.float32)
  k = rng.standard_normal((3, 5, 7)).astype(np.float32)
  w = rng.standard_normal((6, 7)).astype(np.float32)
  out = jax.vmap(lambda qi, ki: general_scores(qi, ki, jnp.asarray(w)))(q, k)
  np.testing.assert_allclose(out, np.einsum('btd,de,bse->bts', q, w, k), **TOL)


def test_grad_dot_and_cosine(rng):
  """d sum(q k^T)/dq is the row sum of k for every query; cosine grads are finite, even at zero."""
  q, k = _qk(rng, lead=())
  grad_q = jax.grad(lambda q_: jnp.sum(dot_scores(q_, k)))(q)
  np.testing.assert_allclose(grad_q, np.broadcast_to(k.sum(0), q.shape), **TOL)
  q_zero = q.copy()
  q_zero[0] = 0.0  # an all-zero query must not produce NaN gradients
  grad_cos = jax.grad(lambda q_: jnp.sum(cosine_scores(q_, k) ** 2))(q_zero)
  assert np.all(np.isfinite(grad_cos))


def test_unscaled_dot_scores_saturate_the_softmax_as_d_k_grows():
  """The notes' reason for 1/√d_k: with unit-variance queries and keys, q·k has variance d_k, so
  unscaled weights sharpen (entropy falls) with d_k while scaled ones keep one sharpness."""
  rng = np.random.default_rng(0)
  scores = {'dot': dot_scores, 'scaled_dot': scaled_dot_scores}
  entropies = {name: [] for name in scores}
  for d_k in (16, 64, 256):
    q = rng.standard_normal((512, 1, d_k)).astype(np.float32)  # [B, T=1, H]
    k = rng.standard_normal((512, 16, d_k)).astype(np.float32)  # [B, S=16, H]
    for name, score in scores.items():
      weights = jax.nn.softmax(score(q, k), axis=-1)  # [B, 1, 16]
      entropies[name].append(float(attention_entropy(weights).mean()))
  dot, scaled = entropies['dot'], entropies['scaled_dot']
  assert dot[0] > dot[1] > dot[2] and dot[2] < dot[0] / 4  # 0.88, 0.39, 0.18 nats
  assert max(scaled) - min(scaled) < 0.05 and min(scaled) > 2.3  # ~2.35 (uniform: 2.77)
