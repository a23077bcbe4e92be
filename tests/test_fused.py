"""'fused' (tokamax's flash kernels, `attention/fused.py`) against the reference kernel.

Off a GPU the same mapping runs through tokamax's portable implementation, so these check, for
every variant 'fused' takes, that the ranges, the shifted sink key, the per-key ALiBi row and the
zeroed empty rows give the reference kernel's values and gradients. On a GPU they run the Mosaic
or Triton kernels in bfloat16 (tolerance of that dtype's rounding).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention import dispatch, fused
from attention import scaled_dot_product_attention as sdpa_call
from attention.kv_cache import window_mask

ON_GPU = jax.default_backend() == 'gpu'
# On a GPU whose jax the installed tokamax's kernels do not build against, 'fused' declines every
# call (tests/test_sdpa_variants.py checks the dispatcher then); there is nothing to compare here.
_NO_KERNELS = (
  fused._kernels_fail_to_build(fused.gpu_implementations())
  if ON_GPU and fused.available()
  else None
)
pytestmark = [
  pytest.mark.skipif(not fused.available(), reason='tokamax is not installed'),
  pytest.mark.skipif(_NO_KERNELS is not None, reason=f"tokamax's GPU kernels: {_NO_KERNELS}"),
]
DTYPE, TOLERANCE = (jnp.bfloat16, 2e-2) if ON_GPU else (jnp.float32, 2e-5)
# Lengths and a head size a GPU kernel's blocks take; odd lengths on a CPU, where the portable
# path has no blocks.
T, S = (128, 128) if ON_GPU else (7, 7)
HEAD = 64 if ON_GPU else 16


def _kept_first_tokens(t, s):
  """A streaming cache's visibility, `[T, S]`: a causal window of 3 plus the first 2 keys."""
  return window_mask(jnp.arange(t), jnp.arange(s), 3, 2)


# name: (options, T, S); 'heads' = key/value heads (of 4 query heads), arrays drawn per name.
CASES = {
  'plain': (dict(), T, S + 2),
  'causal': (dict(is_causal=True), T, S),
  'grouped causal': (dict(is_causal=True, heads=2), T, S),
  'multi-query': (dict(heads=1), T, S),
  'padding mask': (dict(mask='padding'), T, S + 2),
  'bias': (dict(bias=True), T, S),
  'softcap': (dict(softcap=2.0, is_causal=True), T, S),
  'causal alibi': (dict(alibi=True, is_causal=True), T, S),
  'causal alibi, grouped, bias': (dict(alibi=True, is_causal=True, heads=2, bias=True), T, S),
  'sink': (dict(sink=True), T, S),
  'causal sink': (dict(sink=True, is_causal=True), T, S),
  'sink with padding mask': (dict(sink=True, mask='padding'), T, S),
  'causal window': (dict(window=3, is_causal=True), T, S),
  'bidirectional window': (dict(window=3), T, S),
  'causal window, T < S': (dict(window=3, is_causal=True), T - 2, S),
  'bidirectional window, T > S (empty rows)': (dict(window=2), T + 4, S - 2),
  'kept first tokens': (dict(mask='kept first tokens'), T, S),
  'fully masked rows': (dict(mask='empty rows', bias=True), T, S),
}


def _arrays(options, t, s, seed):
  rng = np.random.default_rng(seed)
  draw = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
  kv = options.get('heads', 4)
  arrays = dict(q=draw(2, 4, t, HEAD), k=draw(2, kv, s, HEAD), v=draw(2, kv, s, HEAD))
  arrays['cotangent'] = draw(2, 4, t, HEAD)
  extra = {}
  if options.get('bias'):
    extra['bias'] = draw(1, 4, t, s)
  if options.get('sink'):
    extra['sink'] = draw(4)
  if options.get('alibi'):
    extra['alibi_slopes'] = jnp.array([0.5, 0.25, 0.125, 0.0625])
  mask = options.get('mask')
  if mask == 'padding':
    extra['mask'] = (jnp.arange(s) < jnp.array([s, s // 2])[:, None])[:, None, None, :]
  elif mask == 'kept first tokens':
    extra['mask'] = _kept_first_tokens(t, s)
  elif mask == 'empty rows':
    extra['mask'] = jnp.ones((2, 1, t, s), bool).at[1, :, 2, :].set(False)
  flags = {key: options[key] for key in ('is_causal', 'window', 'softcap') if key in options}
  return arrays, extra, flags


def _values_and_grads(implementation, options, t, s):
  arrays, extra, flags = _arrays(options, t, s, seed=len(str(options)) + t)
  learned = {name: extra[name] for name in ('bias', 'sink') if name in extra}
  fixed = {name: x for name, x in extra.items() if name not in learned}

  def loss(q, k, v, learned):
    out = sdpa_call(q, k, v, implementation=implementation, **learned, **fixed, **flags)
    return jnp.sum(out.astype(jnp.float32) * arrays['cotangent']), out

  inputs = [arrays[name].astype(DTYPE) for name in 'qkv']
  (_, out), grads = jax.jit(jax.value_and_grad(loss, (0, 1, 2, 3), has_aux=True))(*inputs, learned)
  return out, grads


def _relative_error(x, ref):
  x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
  return np.linalg.norm(x - ref) / max(np.linalg.norm(ref), 1e-30)


@pytest.mark.parametrize('case', list(CASES))
def test_fused_equals_the_reference_kernel(case):
  options, t, s = CASES[case]
  if options.get('softcap') and ON_GPU and 'mosaic' not in fused.gpu_implementations():
    pytest.skip("tokamax's Triton backward has no soft-capping")
  out, grads = _values_and_grads('fused', options, t, s)
  ref_out, ref_grads = _values_and_grads('reference', options, t, s)
  assert out.dtype == DTYPE
  assert _relative_error(out, ref_out) < TOLERANCE
  flat, ref_flat = jax.tree.leaves(grads), jax.tree.leaves(ref_grads)
  assert len(flat) == len(ref_flat)
  for g, g_ref in zip(flat, ref_flat):
    assert np.all(np.isfinite(np.asarray(g, np.float32)))
    assert _relative_error(g, g_ref) < TOLERANCE


def test_rows_that_see_no_key_are_zero():
  """A query with nothing to attend to gets zeros, as from every other kernel (tokamax alone
  would average the values)."""
  options, t, s = CASES['fully masked rows']
  out, _ = _values_and_grads('fused', options, t, s)
  np.testing.assert_array_equal(np.asarray(out[1, :, 2], np.float32), 0.0)
  assert np.abs(np.asarray(out[0, :, 2], np.float32)).max() > 0.01


DECLINED = {
  'dropout': (dict(dropout_rate=0.1), 'no dropout'),
  'softcap with bias': (dict(softcap=5.0, bias=jnp.zeros((4, 4))), 'caps the logits after'),
  'softcap with sink': (dict(softcap=5.0, sink=jnp.zeros(4)), 'caps the logits after'),
  'bidirectional alibi': (dict(alibi_slopes=jnp.ones(4)), 'is_causal=True only'),
  'sink with window': (dict(sink=jnp.zeros(4), window=2, is_causal=True), 'sink with a window'),
  'sink with alibi': (
    dict(sink=jnp.zeros(4), alibi_slopes=jnp.ones(4), is_causal=True),
    'sink with ALiBi',
  ),
}


@pytest.mark.parametrize('case', list(DECLINED))
def test_fused_declines_what_it_cannot_run_exactly(case):
  """Each combination tokamax cannot express exactly is refused with its reason, by name."""
  options, message = DECLINED[case]
  q = k = v = jnp.zeros((1, 4, 4, 16), DTYPE)
  assert message in fused.fused_unsupported(q, k, v, **options)
  rng = {'dropout_rng': jax.random.key(0)} if 'dropout_rate' in options else {}
  with pytest.raises(ValueError, match="implementation='fused' unavailable"):
    sdpa_call(q, k, v, implementation='fused', **options, **rng)


def test_the_choice_is_logged_once_per_shape(caplog):
  """`implementation=None` logs the kernel it picked, and why, once for each shape."""
  dispatch._LOGGED.clear()
  q = jnp.zeros((1, 2, 600, 8))
  with caplog.at_level('DEBUG', logger='absl'):
    for _ in range(3):
      sdpa_call(q, q, q, softcap=1.0)
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith('attention:')]
  assert len(lines) == 1
  picked = 'pallas' if ON_GPU else 'chunked'  # Attend's Pallas kernel comes before 'fused'
  assert lines[0].startswith(f'attention: {picked} for q(1, 2, 600, 8)')
  assert 'with softcap' in lines[0] and 'cuDNN declines: it cannot run softcap=1.0' in lines[0]
