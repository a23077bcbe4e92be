"""One score registry: a score added to `attention.SCORES` runs in both attention layers, with the
parameters it declares; an unknown name fails when a layer is built."""

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from models import interventions
from models.attention_layer import MultiHeadAttention
from models.rnn_attention import make_attention
from models.stack_config import AttentionConfig

TOL = dict(atol=1e-5, rtol=1e-5)
BUILT_IN = "'additive', 'cosine', 'dot', 'general', 'scaled_dot'"


def rngs(seed: int = 0) -> nnx.Rngs:
  """Parameter keys over 'rbg', whose random kernels compile faster on CPU than threefry's."""
  return nnx.Rngs(params=jax.random.key(seed, impl='rbg'))


def low_rank_scores(q, k, u, w, *, k_low=None):
  """`(q U)(k W)ᵀ`: a bilinear score of rank A; `k_low` = `k W` when computed beforehand."""
  k_low = jnp.einsum('...sd,da->...sa', k, w) if k_low is None else k_low  # [..., S, A]
  return jnp.einsum('...ta,...sa->...ts', jnp.einsum('...td,da->...ta', q, u), k_low)


def _shifted_normal(sizes):
  # Mean 1/A, which none of the built-in initialisers has: the test can see this one was used.
  return lambda key, shape, dtype: 1.0 / sizes.a + 0.1 * jax.random.normal(key, shape, dtype)


LOW_RANK = attention.Score(
  low_rank_scores,
  params=(
    attention.ScoreParam('u', ('q', 'a'), _shifted_normal),
    attention.ScoreParam('w', ('k', 'a'), _shifted_normal),
  ),
  prepare=attention.KeyPrep(
    lambda k, w: jnp.einsum('...sd,da->...sa', k, w), uses=('w',), into='k_low'
  ),
  same_features=False,
)


def neg_sq_distance(q, k):
  """`-|q - k|²`, a parameter-free score registered as a plain function."""
  return -jnp.sum((q[..., :, None, :] - k[..., None, :, :]) ** 2, axis=-1)


@pytest.fixture
def registry(monkeypatch):
  """attention.SCORES with 'low_rank' and 'neg_sq_distance' added for one test."""
  monkeypatch.setitem(attention.SCORES, 'low_rank', LOW_RANK)
  monkeypatch.setitem(attention.SCORES, 'neg_sq_distance', neg_sq_distance)


def _softmax(scores, mask):
  scores = np.where(mask, scores, -np.inf)
  e = np.exp(scores - scores.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _np(param) -> np.ndarray:
  return np.asarray(param[...], np.float64)


def _np_scores(name, q, k, u=None, w=None):
  """float64 scores `[..., T, S]`; for 'low_rank' with U `[Dq, A]`, W `[Dk, A]`."""
  if name == 'low_rank':
    return (q @ u) @ np.swapaxes(k @ w, -1, -2)
  return -np.sum((q[..., :, None, :] - k[..., None, :, :]) ** 2, axis=-1)


@pytest.mark.parametrize('name', ['low_rank', 'neg_sq_distance'])
def test_multi_head_attention_runs_a_newly_registered_score(registry, rng, name):
  """Per-head parameters as declared ([N, H, H], initialised per head), output equal to NumPy."""
  del registry
  config = AttentionConfig(d_model=8, num_heads=2, d_k=3, d_v=5, score=name)
  mha = MultiHeadAttention(config, rngs=rngs())
  x = rng.standard_normal((2, 5, 8))
  context = rng.standard_normal((2, 6, 8))
  mask = np.array([[True] * 4 + [False] * 2, [True] * 6])[:, None, None, :]  # [B, 1, 1, S]
  out, captured = interventions.capture(
    mha, jnp.asarray(x, jnp.float32), jnp.asarray(context, jnp.float32), mask=jnp.asarray(mask)
  )
  weights = captured['weights']

  def heads(linear, inp):  # [B, N, L, H]
    y = inp @ _np(linear.kernel) + _np(linear.bias)
    return y.reshape(2, -1, 2, y.shape[-1] // 2).transpose(0, 2, 1, 3)

  q, k, v = heads(mha.w_q, x), heads(mha.w_k, context), heads(mha.w_v, context)
  if name == 'low_rank':
    u, w = _np(mha.score_u), _np(mha.score_w)
    assert u.shape == w.shape == (2, 3, 3)
    assert abs(u.mean() - 1 / 3) < 0.1 and not np.allclose(u[0], u[1])  # declared init, per head
    scores = np.stack([_np_scores(name, q[:, n], k[:, n], u[n], w[n]) for n in range(2)], 1)
  else:
    scores = _np_scores(name, q, k)
  ref_w = _softmax(scores, mask)
  ref_out = np.einsum('bnts,bnsv->btnv', ref_w, v).reshape(2, 5, 10) @ _np(mha.w_o.kernel)
  np.testing.assert_allclose(weights, ref_w, **TOL)
  np.testing.assert_allclose(out, ref_out + _np(mha.w_o.bias), **TOL)


@pytest.mark.parametrize('name', ['low_rank', 'neg_sq_distance'])
def test_rnn_attention_runs_a_newly_registered_score(registry, rng, name):
  """Dq=16 != Dk=32: the declared key step runs in prepare(), or a plain score gets key_proj;
  weights and context equal NumPy."""
  del registry
  layer = make_attention(name, query_dim=16, key_dim=32, rngs=rngs())
  q = rng.standard_normal((2, 3, 16))
  k = rng.standard_normal((2, 5, 32))
  mask = np.array([[True] * 5, [True] * 3 + [False] * 2])[:, None, :]  # [B, 1, S]
  prepared = layer.prepare(jnp.asarray(k, jnp.float32))
  context, weights = layer(
    jnp.asarray(q, jnp.float32), prepared, jnp.asarray(k, jnp.float32), jnp.asarray(mask)
  )
  if name == 'low_rank':
    assert layer.key_proj is None and layer.u.shape == (16, 16) and layer.w.shape == (32, 16)
    np.testing.assert_allclose(prepared, k @ _np(layer.w), **TOL)  # k W, once
    scores = _np_scores(name, q, k, _np(layer.u), _np(layer.w))
  else:
    scores = _np_scores(name, q, k @ _np(layer.key_proj.kernel))
  ref_w = _softmax(scores, mask)
  np.testing.assert_allclose(weights, ref_w, **TOL)
  np.testing.assert_allclose(context, ref_w @ k, **TOL)


def test_registered_score_is_listed_and_callable_by_name(registry, rng):
  """The new names join the valid ones; SCORES[name](q, k, **params) is the score function."""
  del registry
  q, k = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
  u, w = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
  np.testing.assert_allclose(
    attention.SCORES['low_rank'](q, k, u=u, w=w), _np_scores('low_rank', q, k, u, w), **TOL
  )
  assert attention.get_score_fn('neg_sq_distance') is neg_sq_distance
  with pytest.raises(ValueError, match='low_rank, neg_sq_distance, scaled_dot'):
    attention.get_score('bogus')


@pytest.mark.parametrize(
  'build',
  [
    lambda score: MultiHeadAttention(
      AttentionConfig(d_model=8, num_heads=2, score=score), rngs=rngs()
    ),
    lambda score: make_attention(score, query_dim=4, key_dim=6, rngs=rngs()),
  ],
  ids=['multi_head', 'rnn'],
)
def test_unknown_score_fails_at_construction(build):
  """One sentence naming the field and every valid score, raised before any parameter exists."""
  with pytest.raises(ValueError, match=rf"^score must be one of {BUILT_IN}; got 'bogus'\.$"):
    build('bogus')


def test_score_param_rejects_an_unknown_dim():
  """A parameter shape may name only q, k and a."""
  with pytest.raises(ValueError, match='shape dims must be among q, k, a; got'):
    attention.ScoreParam('w', ('q', 'd'), _shifted_normal)
