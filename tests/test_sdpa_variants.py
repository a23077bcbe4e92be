"""scaled_dot_product_attention's variants: sliding window, soft-capping, sinks, ALiBi, GQA.

The reference kernel is checked against an independent float64 NumPy formula and small hand
computations; 'chunked' against 'reference' in values and gradients, with blocks that do not
divide T or S and windows spanning several blocks.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_sdpa import out_and_weights

from attention import chunked as attention_chunked
from attention import chunked_attention, chunked_blocks, dispatch, scaled_dot_product_attention
from attention.masks import sliding_window_mask
from attention.sdpa import attention_weights

T_, F_ = True, False


def numpy_attention(
  q,
  k,
  v,
  *,
  mask=None,
  bias=None,
  is_causal=False,
  window=0,
  softcap=0.0,
  sink=None,
  slopes=None,
  scale=None,
):
  """The variants' definitions in float64 NumPy: GQA by np.repeat, the sink as an extra column."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  if q.ndim >= 3 and k.ndim >= 3:
    k = np.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)
    v = np.repeat(v, q.shape[-3] // v.shape[-3], axis=-3)
  t, s = q.shape[-2], k.shape[-2]
  scale = q.shape[-1] ** -0.5 if scale is None else scale
  x = np.einsum('...td,...sd->...ts', q, k) * scale
  if softcap:
    x = softcap * np.tanh(x / softcap)
  if bias is not None:
    x = x + np.asarray(bias, np.float64)
  i, j = np.arange(t)[:, None], np.arange(s)[None, :]
  if slopes is not None:
    x = x - np.asarray(slopes, np.float64)[..., None, None] * np.abs(i - j)
  visible = np.ones(x.shape, bool)
  if mask is not None:
    visible &= np.asarray(mask)
  if is_causal:
    visible &= j <= i
  if window:
    visible &= np.abs(i - j) < window
  x = np.where(visible, x, -np.inf)
  null = (
    np.full((*x.shape[:-1], 1), -np.inf)
    if sink is None
    else np.broadcast_to(np.asarray(sink, np.float64)[..., None, None], (*x.shape[:-1], 1))
  )
  full = np.concatenate([x, null], axis=-1)  # the sink is one more key
  top = full.max(-1, keepdims=True)
  e = np.exp(full - np.where(np.isfinite(top), top, 0.0))
  total = e.sum(-1, keepdims=True)
  w = (e / np.where(total > 0, total, 1.0))[..., :-1]
  return np.einsum('...ts,...sv->...tv', w, v), w


def normal(rng, *shape):
  return jnp.asarray(rng.standard_normal(shape), jnp.float32)


def test_sliding_window_mask_literal():
  """|i - j| < window, with T != S and with an offset (query i sits at position i + offset)."""
  np.testing.assert_array_equal(
    sliding_window_mask(3, 4, window=2), [[T_, T_, F_, F_], [T_, T_, T_, F_], [F_, T_, T_, T_]]
  )
  np.testing.assert_array_equal(
    sliding_window_mask(1, 5, window=2, offset=3), [[F_, F_, T_, T_, T_]]
  )
  assert sliding_window_mask(4, window=1).tolist() == np.eye(4, dtype=bool).tolist()
  with pytest.raises(ValueError, match='window must be >= 1'):
    sliding_window_mask(3, window=0)


def test_sink_hand_computed():
  """Two keys of score 0 and a sink of 0: each key and the null slot get 1/3; the output is the
  values' sum over 3. A fully masked row gets zero weights and a zero output."""
  q, k = jnp.zeros((1, 2, 4)), jnp.ones((1, 2, 4))  # [N=1, T=2, D]
  v = jnp.array([[[3.0], [6.0]]])
  mask = jnp.array([[True, True], [False, False]])
  out, w = out_and_weights(q, k, v, mask=mask, sink=jnp.zeros(1))
  np.testing.assert_allclose(w, [[[1 / 3, 1 / 3], [0.0, 0.0]]], atol=1e-7)
  np.testing.assert_allclose(out, [[[3.0], [0.0]]], atol=1e-6)


def test_softcap_and_alibi_hand_computed():
  """Scaled scores 40 and 0 capped at 2 become 2·tanh(20) ≈ 2 and 0; ALiBi slope 0.5 then takes
  0.5 per position of distance: query 0's logits are [2 - 0, 0 - 0.5]."""
  q = jnp.array([[[2.0, 0.0]]])  # [N=1, T=1, D=2]
  k = jnp.array([[[20.0, 0.0], [0.0, 1.0]]])
  w = attention_weights(q, k, scale=1.0, softcap=2.0, alibi_slopes=jnp.array([0.5]))
  w1 = 1.0 / (1.0 + np.exp(2.0 * np.tanh(20.0) + 0.5))
  np.testing.assert_allclose(w, [[[1.0 - w1, w1]]], atol=1e-6)


# Each feature alone and together; lead (B=2, N=4); GQA keys have K=2 heads (or K=1: MQA).
REFERENCE_CASES = {
  'window': dict(t=9, s=12, window=3),
  'window_causal': dict(t=10, s=10, window=4, is_causal=True),
  'softcap': dict(t=6, s=7, softcap=0.7, bias=True),
  'sink': dict(t=6, s=7, sink=True, mask=True),
  'alibi': dict(t=6, s=9, slopes=True),
  'gqa': dict(t=5, s=6, kv_heads=2),
  'mqa': dict(t=5, s=6, kv_heads=1),
  'gqa_one_query': dict(t=1, s=6, kv_heads=2, mask=True),  # a decoding step: values by group
  'all': dict(
    t=11, s=11, window=3, is_causal=True, softcap=1.5, sink=True, slopes=True, kv_heads=2
  ),
}


def case_inputs(rng, c, d=8, dv=5):
  """(q, k, v, keyword arguments) of a case: leading dims [2, 4], per-head sink and slopes."""
  t, s, kv = c['t'], c['s'], c.get('kv_heads', 4)
  q, k, v = normal(rng, 2, 4, t, d), normal(rng, 2, kv, s, d), normal(rng, 2, kv, s, dv)
  kwargs = {name: c[name] for name in ('window', 'is_causal', 'softcap') if name in c}
  if c.get('sink'):
    kwargs['sink'] = jnp.array([-1.0, 0.0, 0.5, 2.0])
  if c.get('slopes'):
    kwargs['alibi_slopes'] = jnp.array([0.5, 0.25, 0.125, 0.0625])
  if c.get('bias'):
    kwargs['bias'] = normal(rng, 4, t, s)
  if c.get('mask'):
    kwargs['mask'] = jnp.ones((t, s), bool).at[2].set(False).at[:, 0].set(False)
  return q, k, v, kwargs


def to_numpy_kwargs(kwargs):
  rename = {'alibi_slopes': 'slopes'}
  return {rename.get(name, name): value for name, value in kwargs.items()}


@pytest.mark.parametrize('case', list(REFERENCE_CASES))
def test_reference_matches_numpy(rng, case):
  """Output and weights of 'reference' equal the NumPy definition of each variant."""
  q, k, v, kwargs = case_inputs(rng, REFERENCE_CASES[case])
  out, w = jax.jit(lambda q, k, v: out_and_weights(q, k, v, implementation='reference', **kwargs))(
    q, k, v
  )
  ref_out, ref_w = numpy_attention(q, k, v, **to_numpy_kwargs(kwargs))
  assert w.shape == (2, 4, q.shape[-2], k.shape[-2])
  np.testing.assert_allclose(w, ref_w, atol=1e-6)
  np.testing.assert_allclose(out, ref_out, atol=1e-5)
  if 'sink' in kwargs:
    assert np.all(np.asarray(w).sum(-1) < 1.0)  # the null slot keeps some weight


# T and S are not multiples of the 8 x 8 blocks; windows of 10 span 2-3 blocks each side. The
# combination takes the default CPU path, one (batch, head) slice at a time (per-head sink and
# slopes sliced per slice); the single features run all 8 slices at once, which compiles faster.
CHUNKED_CASES = {
  'window': dict(t=29, s=37, window=10),
  'softcap_bias': dict(t=21, s=19, softcap=0.7, bias=True),
  'sink_masked_rows': dict(t=21, s=19, sink=True, mask=True),
  'alibi': dict(t=21, s=27, slopes=True),
  'gqa': dict(t=13, s=21, kv_heads=2),
  'all': dict(
    t=37,
    s=37,
    window=10,
    is_causal=True,
    softcap=1.5,
    sink=True,
    slopes=True,
    kv_heads=2,
    bias=True,
    head_block=None,
  ),
}


@pytest.mark.parametrize('case', list(CHUNKED_CASES))
def test_chunked_equals_reference_values_and_gradients(rng, case):
  """'chunked' == 'reference' in output and d/dq, d/dk, d/dv, d/dsink, d/dbias."""
  c = CHUNKED_CASES[case]
  q, k, v, kwargs = case_inputs(rng, c)
  sink, bias = kwargs.pop('sink', None), kwargs.pop('bias', None)
  cotangent = normal(rng, 2, 4, c['t'], 5)

  def loss(implementation, **blocks):
    def f(q, k, v, sink, bias):
      kw = dict(kwargs, sink=sink, bias=bias)
      if implementation == 'reference':
        out = scaled_dot_product_attention(q, k, v, implementation='reference', **kw)
      else:
        out = chunked_attention(q, k, v, scale=8**-0.5, **blocks, **kw)
      return jnp.sum(out * cotangent)

    argnums = (0, 1, 2) + ((3,) if sink is not None else ()) + ((4,) if bias is not None else ())
    return jax.jit(jax.value_and_grad(f, argnums))(q, k, v, sink, bias)

  ref_val, ref_grads = loss('reference')
  val, grads = loss('chunked', q_block=8, kv_block=8, head_block=c.get('head_block', 8))
  np.testing.assert_allclose(val, ref_val, rtol=1e-5, atol=1e-5)
  names = 'qkv' + ('s' if sink is not None else '') + ('b' if bias is not None else '')
  assert len(grads) == len(names)
  for name, g, g_ref in zip(names, grads, ref_grads):
    assert g.shape == g_ref.shape
    np.testing.assert_allclose(g, g_ref, atol=3e-5, err_msg=f'gradient wrt {name}')
  if sink is not None:
    assert np.all(np.abs(np.asarray(grads[3])) > 1e-4)  # the sink's gradient is not lost


@pytest.mark.parametrize('case', ['all', 'mqa'])
def test_dispatcher_hands_variants_to_chunked(rng, case):
  """Through scaled_dot_product_attention, 'chunked' (default blocks, grouped or shared keys
  broadcast by the dispatcher) gives the NumPy output."""
  q, k, v, kwargs = case_inputs(rng, REFERENCE_CASES[case])
  out = jax.jit(
    lambda q, k, v: scaled_dot_product_attention(q, k, v, implementation='chunked', **kwargs)
  )(q, k, v)
  np.testing.assert_allclose(out, numpy_attention(q, k, v, **to_numpy_kwargs(kwargs))[0], atol=1e-5)


def test_chunked_dropout_with_variants(rng):
  """With a window, sink, soft-capping, ALiBi and GQA, dropout keeps E[output] (400 copies of
  the batch draw 400 masks in one call), and the gradients wrt the sink and q match central
  differences for the masks drawn."""
  q, k, v, kwargs = case_inputs(
    rng, dict(t=9, s=9, window=3, softcap=1.5, sink=True, slopes=True, kv_heads=2)
  )
  sink = kwargs.pop('sink')
  base = jax.jit(
    lambda q, k, v: scaled_dot_product_attention(
      q, k, v, sink=sink, implementation='reference', **kwargs
    )
  )(q, k, v)
  copies = lambda x: jnp.tile(x, (400, 1, 1, 1))  # [800, ., ., .]
  cotangent = jnp.zeros((800, 4, 9, 5)).at[:2].set(normal(rng, 2, 4, 9, 5))

  def loss(q, sink):
    out = chunked_attention(
      copies(q),
      copies(k),
      copies(v),
      scale=8**-0.5,
      sink=sink,
      dropout_rate=0.3,
      dropout_rng=jax.random.PRNGKey(7),
      **kwargs,
    )
    return jnp.sum(cotangent * out), out

  grad_fn = jax.jit(jax.value_and_grad(loss, (0, 1), has_aux=True))
  (_, outs), (dq, d_sink) = grad_fn(q, sink)
  outs = outs.reshape(400, 2, 4, 9, 5)
  assert not np.allclose(outs[0], outs[1])
  np.testing.assert_allclose(outs.mean(0), base, atol=0.1)
  eps, q_dir, sink_dir = 1e-2, normal(rng, *q.shape), normal(rng, 4)
  central = lambda dq_, ds_: (
    (
      grad_fn(q + eps * dq_, sink + eps * ds_)[0][0]
      - grad_fn(q - eps * dq_, sink - eps * ds_)[0][0]
    )
    / (2 * eps)
  )
  np.testing.assert_allclose(jnp.vdot(d_sink, sink_dir), central(0.0, sink_dir), atol=2e-3)
  np.testing.assert_allclose(jnp.vdot(dq, q_dir), central(q_dir, 0.0), rtol=2e-3, atol=2e-3)


def test_block_ranges_hand_computed():
  """Key blocks per query block (forward) and query blocks per key block (backward) for
  T = S = 37 in 8 x 8 blocks (5 blocks each), against ranges worked out by hand."""
  sizes = dict(q_block=8, kv_block=8, q_len=37, kv_len=37)
  kv_range = lambda i, **kw: tuple(int(x) for x in chunked_blocks.kv_block_range(i, **sizes, **kw))
  q_range = lambda j, **kw: tuple(int(x) for x in chunked_blocks.q_block_range(j, **sizes, **kw))
  # window 10: rows 8i..8i+7 see keys 8i-9 .. 8i+16 (causal: .. 8i+7).
  assert [kv_range(i, window=10) for i in range(5)] == [(0, 3), (0, 4), (0, 5), (1, 5), (2, 5)]
  assert [kv_range(i, window=10, is_causal=True) for i in range(5)] == [
    (0, 1),
    (0, 2),
    (0, 3),
    (1, 4),
    (2, 5),
  ]
  assert [kv_range(i, is_causal=True) for i in range(5)] == [(0, 1), (0, 2), (0, 3), (0, 4), (0, 5)]
  assert kv_range(3) == (0, 5)
  # Keys 8j..8j+7 are seen by rows 8j-9 .. 8j+16 (causal: from 8j).
  assert [q_range(j, window=10) for j in (0, 2, 4)] == [(0, 3), (0, 5), (2, 5)]
  assert [q_range(j, window=10, is_causal=True) for j in (0, 2, 4)] == [(0, 3), (2, 5), (4, 5)]
  assert [q_range(j, is_causal=True) for j in (0, 2, 4)] == [(0, 5), (2, 5), (4, 5)]


@pytest.mark.parametrize('t,s', [(29, 37), (37, 29)])
@pytest.mark.parametrize(
  'window,is_causal', [(10, False), (10, True), (1, False), (3, True), (0, True)]
)
def test_block_ranges_cover_exactly_the_visible_blocks(t, s, window, is_causal):
  """Forward and backward visit the same (query block, key block) pairs: exactly those holding
  a visible score, in 8 x 6 blocks."""
  bq, bk = 8, 6
  mask = np.tril(np.ones((t, s), bool)) if is_causal else np.ones((t, s), bool)
  if window:
    mask &= np.asarray(sliding_window_mask(t, s, window=window))
  visible = {
    (i, j)
    for i in range(-(-t // bq))
    for j in range(-(-s // bk))
    if mask[i * bq : (i + 1) * bq, j * bk : (j + 1) * bk].any()
  }
  kw = dict(q_block=bq, kv_block=bk, q_len=t, kv_len=s, is_causal=is_causal, window=window)
  forward = {
    (i, j)
    for i in range(-(-t // bq))
    for j in range(*map(int, chunked_blocks.kv_block_range(i, **kw)))
  }
  backward = {
    (i, j)
    for j in range(-(-s // bk))
    for i in range(*map(int, chunked_blocks.q_block_range(j, **kw)))
  }
  assert forward == visible
  assert backward == visible


def test_window_default_blocks():
  """A window W gets square blocks of W/4 rounded up to a power of 2, within [128, 512]."""
  blocks = attention_chunked._block_sizes
  assert blocks(32768, 32768, None, None, 256) == (128, 128)
  assert blocks(32768, 32768, None, None, 1000) == (256, 256)
  assert blocks(32768, 32768, None, None, 1025) == (512, 512)
  assert blocks(32768, 32768, None, None, 100000) == (512, 512)
  assert blocks(100, 8192, None, None, 1024) == (100, 256)
  assert blocks(8192, 8192, None, None) == (256, 2048)  # no window: as before
  assert blocks(37, 37, 8, 8, 10) == (8, 8)


BAD = {
  'window_negative': (dict(window=-1), 'window must be a non-negative int'),
  'window_float': (dict(window=2.5), 'window must be a non-negative int'),
  'softcap_negative': (dict(softcap=-1.0), 'softcap must be a non-negative finite number'),
  'softcap_string': (dict(softcap='3'), 'softcap must be a non-negative finite number'),
  'sink_shape': (dict(sink=(3,)), 'sink of shape (3,) does not broadcast to the leading dims'),
  'slopes_shape': (dict(alibi_slopes=(4, 2)), 'alibi_slopes of shape (4, 2) does not broadcast'),
  'gqa_not_divisible': (
    dict(k=(2, 3, 5, 8), v=(2, 3, 5, 8)),
    'q has N=4 heads, not a multiple of the K=3 key/value heads',
  ),
  'gqa_k_v_differ': (dict(k=(2, 2, 5, 8)), 'need the same number of heads'),
  'cudnn_sink': (
    dict(sink=(4,), implementation='cudnn'),
    "implementation='cudnn' unavailable: it cannot run sink",
  ),
  'cudnn_softcap': (dict(softcap=5.0, implementation='cudnn'), 'cannot run softcap=5.0'),
  'cudnn_alibi': (dict(alibi_slopes=(4,), implementation='cudnn'), 'cannot run alibi_slopes'),
  'cudnn_bidirectional_window': (
    dict(window=4, implementation='cudnn'),
    'cannot run window=4 with is_causal=False',
  ),
}


@pytest.mark.parametrize('case', list(BAD))
def test_bad_input_raises_value_error_naming_the_argument(case):
  """Each bad variant setting is one ValueError naming the argument (and, for cuDNN, both)."""
  changes, message = dict(BAD[case][0]), BAD[case][1]
  shapes = dict(q=(2, 4, 3, 8), k=(2, 1, 5, 8), v=(2, 4, 5, 8))
  arrays = {name: jnp.zeros(changes.pop(name, shape)) for name, shape in shapes.items()}
  for name in ('sink', 'alibi_slopes'):
    if name in changes:
      changes[name] = jnp.zeros(changes[name])
  with pytest.raises(ValueError, match=re.escape(message)):
    scaled_dot_product_attention(arrays['q'], arrays['k'], arrays['v'], **changes)


def test_dispatcher_never_picks_cudnn_for_what_it_cannot_run():
  """`cudnn_unsupported` names sink, softcap, ALiBi and non-causal windows before it looks at
  the hardware, so `chosen_implementation` falls back to Attend's Pallas kernel on a GPU (then
  'fused'), else to 'chunked' (long) or 'reference' (short), for them."""
  q = k = v = jnp.zeros((1, 4, 1024, 64), jnp.bfloat16)
  gpu = jax.default_backend() == 'gpu'
  for variant in (
    dict(sink=jnp.zeros(4)),
    dict(softcap=30.0),
    dict(alibi_slopes=jnp.ones(4)),
    dict(window=128),
  ):
    assert dispatch.cudnn_unsupported(q, k, v, **variant) is not None
    picked, why = dispatch.chosen_implementation(q, k, v, **variant)
    assert picked == ('pallas' if gpu else 'chunked')
    assert why.startswith('cuDNN declines: it cannot run')
  # A mask is for cuDNN or the chunked kernel: the Pallas kernel computes its masks itself.
  mask = jnp.ones((1024, 1024), bool)
  picked, why = dispatch.chosen_implementation(q, k, v, mask=mask, is_causal=True, softcap=30.0)
  assert picked != 'pallas'
  if gpu:
    assert "'pallas' declines: it takes no mask or bias array" in why
  assert 'T=4 != S=6' in dispatch.cudnn_unsupported(
    q[..., :4, :], k[..., :6, :], v[..., :6, :], window=2, is_causal=True
  )
