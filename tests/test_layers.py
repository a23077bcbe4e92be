"""Multi-head attention, feed-forward, pooling and embeddings against NumPy references."""

import math
import types

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import interventions
from models.attention_layer import MultiHeadAttention
from models.embeddings import LearnedPositions, SinusoidalPositions, TokenEmbedding, make_positions
from models.layers import (
  AttentionPooling,
  FeedForward,
  dense,
  merge_project_heads,
  project_heads,
  project_heads_together,
)
from models.stack_config import AttentionConfig

TOL = dict(atol=1e-5, rtol=1e-5)
SCORE_KINDS = ('scaled_dot', 'dot', 'general', 'additive', 'cosine')
T_, F_ = True, False


def rngs(seed: int = 0, stream: str = 'params') -> nnx.Rngs:
  """An `nnx.Rngs` over 'rbg' keys, which keeps these tests fast.

  Eager JAX compiles a kernel per random op and shape, and on CPU threefry kernels take about six
  times longer to compile than rbg ones.
  """
  return nnx.Rngs(**{stream: jax.random.key(seed, impl='rbg')})


def _np(param) -> np.ndarray:
  return np.asarray(param[...], np.float64)


def _softmax(scores, mask):
  """Masked softmax over the last axis in float64 (no fully masked rows in these tests)."""
  scores = np.where(mask, scores, -np.inf)
  e = np.exp(scores - scores.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _np_scores(mha, kind, q, k):
  """NumPy scores `[B, N, T, S]` from per-head q `[B, N, T, H]` and k `[B, N, S, H]`."""
  if kind == 'scaled_dot':
    return np.einsum('bnth,bnsh->bnts', q, k) / math.sqrt(q.shape[-1])
  if kind == 'dot':
    return np.einsum('bnth,bnsh->bnts', q, k)
  if kind == 'general':
    return np.einsum('bnth,nhg,bnsg->bnts', q, _np(mha.score_w), k)
  if kind == 'additive':
    qa = np.einsum('bnth,nha->bnta', q, _np(mha.score_wq))
    ka = np.einsum('bnsh,nha->bnsa', k, _np(mha.score_wk))
    hidden = np.tanh(qa[:, :, :, None, :] + ka[:, :, None, :, :])  # [B, N, T, S, A]
    return np.einsum('bntsa,na->bnts', hidden, _np(mha.score_v))
  # cosine_scores guards the norms with eps = 1e-6 inside the square root.
  q_unit = q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True) + 1e-6)
  k_unit = k / np.sqrt(np.sum(k * k, axis=-1, keepdims=True) + 1e-6)
  return _np(mha.score_scale)[:, None, None] * np.einsum('bnth,bnsh->bnts', q_unit, k_unit)


def _np_mha(mha, kind, x, context, mask):
  """NumPy multi-head attention: project, split heads, score, softmax, sum, merge, project."""
  n = mha.num_heads

  def proj(linear, inp):
    out = np.asarray(inp, np.float64) @ _np(linear.kernel) + _np(linear.bias)  # [B, L, N*H]
    return out.reshape(*out.shape[:2], n, -1).transpose(0, 2, 1, 3)  # [B, N, L, H]

  q, k, v = proj(mha.w_q, x), proj(mha.w_k, context), proj(mha.w_v, context)
  weights = _softmax(_np_scores(mha, kind, q, k), mask)
  heads = np.einsum('bnts,bnsv->bntv', weights, v)
  merged = heads.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[1], -1)  # [B, T, N*Dv]
  return merged @ _np(mha.w_o.kernel) + _np(mha.w_o.bias), weights


def _mha(**kwargs) -> MultiHeadAttention:
  """The attention layer every test here uses: D=8, N=2, d_k=3, d_v=5.

  Queries are [2, 5, 8] and context [2, 6, 8] throughout, the sizes of test_transformer's model:
  eager JAX compiles each op once per shape, so shared sizes keep the suite fast.
  """
  sizes = dict(d_model=8, num_heads=2, d_k=3, d_v=5)
  return MultiHeadAttention(AttentionConfig(**{**sizes, **kwargs}), rngs=rngs(0))


def _with_weights(mha: MultiHeadAttention, *args, **kwargs):
  """`(output, weights [B, N, T, S])` of `mha(*args, **kwargs)`, the weights read by capture."""
  out, captured = interventions.capture(mha, *args, **kwargs)
  return out, captured['weights']


@pytest.mark.parametrize('kind', SCORE_KINDS)
def test_mha_matches_numpy(rng, kind):
  """Cross-attention with d_k != d_v and a padding mask equals NumPy; masked keys get 0 weight."""
  mha = _mha(score=kind)
  x = rng.standard_normal((2, 5, 8)).astype(np.float32)
  context = rng.standard_normal((2, 6, 8)).astype(np.float32)
  keep = np.array([[T_, T_, T_, T_, F_, F_], [T_, T_, T_, T_, T_, T_]])
  mask = keep[:, None, None, :]  # [B, 1, 1, S]
  out, weights = _with_weights(mha, jnp.asarray(x), jnp.asarray(context), mask=jnp.asarray(mask))
  np.testing.assert_allclose(mha(jnp.asarray(x), jnp.asarray(context), mask=mask), out, **TOL)
  ref_out, ref_w = _np_mha(mha, kind, x, context, mask)
  assert out.shape == (2, 5, 8) and weights.shape == (2, 2, 5, 6)
  np.testing.assert_allclose(weights, ref_w, **TOL)
  np.testing.assert_allclose(out, ref_out, **TOL)
  np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, **TOL)
  assert np.all(np.asarray(weights)[0, :, :, 4:] == 0.0)


@pytest.mark.parametrize('kind,d_v', (('scaled_dot', 5), ('additive', 5), ('scaled_dot', 3)))
def test_mha_causal_and_incremental_decoding(rng, kind, d_v):
  """Causal self-attention puts 0 on future keys; decode_step step by step reproduces it (with
  d_v == d_k it projects queries, keys and values in one matmul)."""
  mha = _mha(d_v=d_v, score=kind)
  x = jnp.asarray(rng.standard_normal((2, 5, 8)), jnp.float32)
  full, weights = _with_weights(mha, x, is_causal=True)
  future = np.triu(np.ones((5, 5), bool), k=1)
  assert np.all(np.asarray(weights)[:, :, future] == 0.0)
  np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, **TOL)
  cache = mha.init_cache(2, 8)
  assert cache['k'].shape == (2, 2, 8, 3) and cache['v'].shape == (2, 2, 8, d_v)
  steps = []
  for t in range(5):
    out, cache = mha.decode_step(x[:, t : t + 1], cache, jnp.int32(t))
    steps.append(out)
  np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, **TOL)


def test_mha_chunked_kernel_matches_reference_and_a_capture_reads_its_weights(rng):
  """attention_impl='chunked' gives the reference output; a capture forms the weights."""
  x = jnp.asarray(rng.standard_normal((2, 6, 8)), jnp.float32)
  ref, chunked = _mha(attention_impl='reference'), _mha(attention_impl='chunked')
  out_ref = ref(x, is_causal=True)
  out_chunked = chunked(x, is_causal=True)
  out_w, weights = _with_weights(chunked, x, is_causal=True)
  np.testing.assert_allclose(out_chunked, out_ref, **TOL)
  np.testing.assert_allclose(out_w, out_ref, **TOL)
  assert weights.shape == (2, 2, 6, 6)


@pytest.mark.parametrize('kind', ('scaled_dot', 'cosine'))
def test_mha_attention_dropout(rng, kind):
  """Dropout changes the output only in training, per key; weights are returned pre-dropout."""
  mha = _mha(score=kind, attention_dropout_rate=0.5)
  x = jnp.asarray(rng.standard_normal((2, 6, 8)), jnp.float32)
  det, det_w = _with_weights(mha, x)
  drop_a, drop_w = _with_weights(mha, x, deterministic=False, rngs=rngs(1, 'dropout'))
  drop_b = mha(x, deterministic=False, rngs=rngs(2, 'dropout'))
  drop_a2 = mha(x, deterministic=False, rngs=rngs(1, 'dropout'))
  np.testing.assert_allclose(drop_w, det_w, **TOL)
  np.testing.assert_array_equal(drop_a, drop_a2)
  assert not np.allclose(drop_a, det, atol=1e-3) and not np.allclose(drop_a, drop_b, atol=1e-3)
  with pytest.raises(ValueError, match='rngs'):
    mha(x, deterministic=False)


def test_mha_without_bias_has_exact_parameter_count():
  """No biases leaves only the four kernels: 8*(2*3) * 2 + 8*(2*5) + (2*5)*8."""
  mha = _mha(qkv_bias=False, out_bias=False)
  sizes = [leaf.size for leaf in jax.tree.leaves(nnx.state(mha, nnx.Param))]
  assert sum(sizes) == 8 * 6 * 2 + 8 * 10 + 10 * 8


@pytest.mark.parametrize(
  'kwargs, match',
  [
    (dict(score='luong'), "score must be one of 'additive', 'cosine', 'dot'"),
    (dict(attention_impl='flash'), "attention_impl must be one of None, 'reference'"),
    (dict(score='dot', attention_impl='chunked'), "only to score='scaled_dot'"),
    (dict(num_heads=3), 'divisible by num_heads=3'),
    (dict(attention_dropout_rate=1.0), 'attention_dropout_rate must be in'),
  ],
)
def test_mha_bad_arguments_raise(kwargs, match):
  """Each bad setting raises one ValueError naming the field and the valid values."""
  with pytest.raises(ValueError, match=match):
    AttentionConfig(d_model=8, **{'num_heads': 2, **kwargs})


def test_mha_d_k_d_v_lift_divisibility():
  """With d_k and d_v given, d_model need not be divisible by num_heads (checked abstractly)."""
  config = AttentionConfig(d_model=8, num_heads=3, d_k=4, d_v=2)
  mha = nnx.eval_shape(lambda: MultiHeadAttention(config, rngs=rngs(0)))
  out = nnx.eval_shape(lambda m, x: m(x), mha, jax.ShapeDtypeStruct((1, 2, 8), jnp.float32))
  assert out.shape == (1, 2, 8)
  assert mha.w_q.kernel.shape == (8, 12) and mha.w_v.kernel.shape == (8, 6)


@pytest.mark.parametrize('activation', ('relu', 'gelu'))
def test_feed_forward_matches_numpy(rng, activation):
  """act(x W1 + b1) W2 + b2 with ReLU or (tanh-approximated) GELU."""
  ffn = FeedForward(8, 10, activation=activation, rngs=rngs(0))
  x = rng.standard_normal((2, 5, 8))
  hidden = x @ _np(ffn.w_1.kernel) + _np(ffn.w_1.bias)
  if activation == 'relu':
    hidden = np.maximum(hidden, 0.0)
  else:
    hidden = 0.5 * hidden * (1 + np.tanh(np.sqrt(2 / np.pi) * (hidden + 0.044715 * hidden**3)))
  expected = hidden @ _np(ffn.w_2.kernel) + _np(ffn.w_2.bias)
  np.testing.assert_allclose(ffn(jnp.asarray(x, jnp.float32)), expected, **TOL)
  with pytest.raises(ValueError, match="activation must be one of 'relu', 'gelu'"):
    FeedForward(8, 10, activation='swish', rngs=rngs(0))


def test_dense_on_rows_and_its_gradients_match_numpy(rng):
  """`dense` flattens the leading dims into rows (models.layers.on_rows): the values and every
  gradient are the plain `x W + b`'s, for 3-D, 2-D and 1-D inputs."""
  layer = dense(4, 3, rngs=rngs(0))
  kernel, bias = _np(layer.kernel), _np(layer.bias)
  for shape in ((2, 5, 4), (5, 4), (4,)):
    x = rng.standard_normal(shape)
    np.testing.assert_allclose(layer(jnp.asarray(x, jnp.float32)), x @ kernel + bias, **TOL)
  x, upstream = rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 3))
  graphdef, params = nnx.split(layer)
  loss = lambda params, x: jnp.sum(nnx.merge(graphdef, params)(x) * upstream)
  grads, dx = jax.grad(loss, argnums=(0, 1))(params, jnp.asarray(x, jnp.float32))
  rows, up_rows = x.reshape(-1, 4), upstream.reshape(-1, 3)  # d/dW of sum(up * (x W)) = xᵀ up
  np.testing.assert_allclose(grads['kernel'][...], rows.T @ up_rows, **TOL)
  np.testing.assert_allclose(grads['bias'][...], up_rows.sum(0), **TOL)
  np.testing.assert_allclose(dx, upstream @ kernel.T, **TOL)


def test_gated_feed_forward_is_swiglu_without_biases(rng):
  """Llama's (silu(x W_gate) * x W_1) W_2, no biases: SwiGLU (Shazeer 2020)."""
  ffn = FeedForward(8, 10, activation='silu', gated=True, use_bias=False, rngs=rngs(0))
  assert ffn.w_1.bias is None and ffn.w_gate.bias is None and ffn.w_2.bias is None
  x = rng.standard_normal((2, 5, 8))
  gate = x @ _np(ffn.w_gate.kernel)
  hidden = gate / (1 + np.exp(-gate)) * (x @ _np(ffn.w_1.kernel))
  expected = hidden @ _np(ffn.w_2.kernel)
  np.testing.assert_allclose(ffn(jnp.asarray(x, jnp.float32)), expected, **TOL)


def test_attention_pooling_matches_numpy(rng):
  """HAN pooling: alpha = softmax(tanh(h W + b) . u_w) over real steps; output sum_t alpha_t h_t."""
  pool = AttentionPooling(8, 6, rngs=rngs(0))
  h = rng.standard_normal((2, 6, 8))
  mask = np.array([[T_, T_, T_, F_, F_, F_], [T_, T_, T_, T_, T_, T_]])
  pooled, weights = pool(jnp.asarray(h, jnp.float32), jnp.asarray(mask))
  u = np.tanh(h @ _np(pool.proj.kernel) + _np(pool.proj.bias))  # [B, T, A]
  ref_w = _softmax(u @ _np(pool.context), mask)
  assert pooled.shape == (2, 8) and weights.shape == (2, 6)
  np.testing.assert_allclose(weights, ref_w, **TOL)
  np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, **TOL)
  assert np.all(np.asarray(weights)[0, 3:] == 0.0)
  np.testing.assert_allclose(pooled, np.einsum('bt,btd->bd', ref_w, h), **TOL)


def test_token_embedding_scales_lookup_and_ties_output(rng):
  """Lookups are table rows times sqrt(D) = sqrt(8); attend is x Eᵀ with the same table."""
  emb = TokenEmbedding(13, 8, rngs=rngs(0))
  table = _np(emb.embed.embedding)
  ids = np.array([[3, 0, 6]])
  np.testing.assert_allclose(emb(jnp.asarray(ids)), table[ids] * np.sqrt(8.0), **TOL)
  x = rng.standard_normal((2, 5, 8))
  np.testing.assert_allclose(emb.attend(jnp.asarray(x, jnp.float32)), x @ table.T, **TOL)


def test_positional_embeddings():
  """Sinusoidal: PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(...); learned: table rows."""
  pe = np.asarray(SinusoidalPositions(4)(jnp.arange(3)))
  p = np.arange(3)[:, None]
  freq = 10000.0 ** (-np.arange(0, 4, 2) / 4)
  np.testing.assert_allclose(pe[:, 0::2], np.sin(p * freq), **TOL)
  np.testing.assert_allclose(pe[:, 1::2], np.cos(p * freq), **TOL)
  learned = make_positions('learned', 8, 8, rngs=rngs(0))
  assert isinstance(learned, LearnedPositions)
  np.testing.assert_allclose(learned(jnp.array([5, 1])), _np(learned.embed.embedding)[[5, 1]])
  with pytest.raises(ValueError, match="positions must be one of 'sinusoidal', 'learned'"):
    make_positions('rotary', 8, 8, rngs=rngs(0))
  with pytest.raises(ValueError, match='even'):
    SinusoidalPositions(5)


@pytest.mark.parametrize('length', (1, 5))  # a decoding step's single row and a sequence
def test_head_projections_and_their_gradients_match_numpy(rng, length):
  """`project_heads` and `merge_project_heads` (`x @ W` on rows, then the heads' transpose):
  values and both gradients of `sum(g * out)` against NumPy, for B=2, D=8, N=2, H=3."""
  b, d, n, h = 2, 8, 2, 3
  x = rng.standard_normal((b, length, d)).astype(np.float32)
  heads = rng.standard_normal((b, n, length, h)).astype(np.float32)
  w_in = rng.standard_normal((d, n * h)).astype(np.float32)
  w_out = rng.standard_normal((n * h, d)).astype(np.float32)
  g_heads = rng.standard_normal((b, n, length, h)).astype(np.float32)
  g_out = rng.standard_normal((b, length, d)).astype(np.float32)
  linear = lambda kernel: types.SimpleNamespace(kernel=kernel, bias=None)  # what they read
  to_heads = lambda y: y.reshape(b, length, n, h).transpose(0, 2, 1, 3)  # [B, T, N*H] -> heads
  from_heads = lambda y: y.transpose(0, 2, 1, 3).reshape(b, length, n * h)

  project = lambda x, w: jnp.sum(g_heads * project_heads(linear(w), x, n))
  value = project_heads(linear(jnp.asarray(w_in)), jnp.asarray(x), n)
  dx, dw = jax.grad(project, argnums=(0, 1))(jnp.asarray(x), jnp.asarray(w_in))
  np.testing.assert_allclose(value, to_heads(x @ w_in), **TOL)
  g = from_heads(g_heads)  # [B, T, N*H]
  np.testing.assert_allclose(dx, g @ w_in.T, **TOL)
  np.testing.assert_allclose(dw, np.einsum('btd,btf->df', x, g), **TOL)

  merge = lambda y, w: jnp.sum(g_out * merge_project_heads(linear(w), y))
  value = merge_project_heads(linear(jnp.asarray(w_out)), jnp.asarray(heads))
  dy, dw = jax.grad(merge, argnums=(0, 1))(jnp.asarray(heads), jnp.asarray(w_out))
  np.testing.assert_allclose(value, from_heads(heads) @ w_out, **TOL)
  np.testing.assert_allclose(dy, to_heads(g_out @ w_out.T), **TOL)
  np.testing.assert_allclose(dw, np.einsum('btf,btd->fd', from_heads(heads), g_out), **TOL)


def test_heads_projected_together_match_numpy(rng):
  """`project_heads_together` equals each linear's `split_heads(x @ W + b)`, for three linears
  (self-attention's W_Q, W_K, W_V) with biases, B=2, T=4, D=8, N=2, H=3."""
  b, t, d, n, h = 2, 4, 8, 2, 3
  x = rng.standard_normal((b, t, d)).astype(np.float32)
  params = [
    (
      rng.standard_normal((d, n * h)).astype(np.float32),
      rng.standard_normal(n * h).astype(np.float32),
    )
    for _ in range(3)
  ]
  linears = [
    types.SimpleNamespace(kernel=jnp.asarray(w), bias=jnp.asarray(bias)) for w, bias in params
  ]
  outs = project_heads_together(linears, jnp.asarray(x), (n, n, n))
  assert len(outs) == 3
  for out, (w, bias) in zip(outs, params):
    want = (x @ w + bias).reshape(b, t, n, h).transpose(0, 2, 1, 3)  # [B, N, T, H]
    np.testing.assert_allclose(out, want, **TOL)
