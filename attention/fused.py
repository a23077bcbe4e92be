"""`'fused'`: the variants cuDNN cannot run, in a fused flash kernel of the `tokamax` library.

tokamax (OpenXLA's Pallas kernel library, the `gpu` extra) has flash attention with its backward
pass for NVIDIA GPUs: Mosaic GPU kernels for Hopper and Blackwell, Triton ones for Ampere and
later. Its kernels take grouped key/value heads, an additive bias, a boolean mask, per-query key
ranges `[k_start, k_end)` and logit soft-capping. Attend's variants map onto those exactly:

- a window is a per-query key range (causal or not, T = S or not), so no mask array is formed;
- causal ALiBi, `-slope·(i - j)` for j <= i, equals `slope·j` up to a constant per query, which
  softmax ignores: a bias of one row per head, `[N, 1, S]`, instead of `[N, T, S]`;
- a sink is one more key in front, of value 0, whose logit comes from that bias row; causal
  ranges shift by one so every query sees it.

`fused_unsupported` says why a call does not map (dropout; soft-capping together with a bias, which
tokamax caps after adding and Attend before; ALiBi without causal masking, `|i - j|`; a sink with a
window, whose range would leave the sink out, or with ALiBi, whose per-query term the sink's logit
would need). Where a query sees no key, Attend's kernels return zeros and tokamax the mean of the
values: the output is zeroed there. On a GPU whose jax the installed tokamax's kernels do not
build against, every call is declined with the build error (`_kernels_fail_to_build`).

Off a GPU tokamax's portable `'xla'` implementation runs the same mapping (and materialises the
weights), so the CPU tests check the mapping against the reference kernel.
"""

import functools
import importlib.metadata
import importlib.util
import os

from absl import flags
import jax
import jax.numpy as jnp

Array = jax.Array

# tokamax's GPU implementations, tried in order; each raises NotImplementedError where it cannot
# run a call. ATTEND_FUSED_IMPLEMENTATIONS (comma-separated) overrides the order: `triton` alone
# where tokamax's Mosaic kernels do not build against the installed jax (tokamax 0.0.12 on jax
# 0.11.2: "Mesh.__init__() got an unexpected keyword argument 'out_shape'"; the gpu extra pins the
# jax it was released with).
DEFAULT_GPU_IMPLEMENTATIONS = ('mosaic', 'triton')
INSTALL_HINT = "pip install 'attend[gpu]'"


def gpu_implementations() -> tuple[str, ...]:
  """The tokamax implementations tried on a GPU, in order."""
  names = os.environ.get('ATTEND_FUSED_IMPLEMENTATIONS', '')
  return tuple(n.strip() for n in names.split(',') if n.strip()) or DEFAULT_GPU_IMPLEMENTATIONS


def available() -> bool:
  """Whether tokamax is installed (it is imported only when a call needs it)."""
  return importlib.util.find_spec('tokamax') is not None


@functools.cache
def _kernels_fail_to_build(names: tuple[str, ...]) -> str | None:
  """Why tokamax's GPU kernels do not build here (its first error), or None if they do.

  A tokamax release is written against the jax of its day: on a newer jax its Pallas kernels can
  fail while being traced (tokamax 0.0.12 on jax 0.11.2: Mosaic's `Mesh(out_shape=...)`, Triton's
  removed `pl.dot`). One small causal call, forward and backward, is compiled once per process so
  that such a machine keeps the other kernels instead of failing at every call.
  """
  shape = jax.ShapeDtypeStruct((1, 1, 128, 64), jnp.bfloat16)
  to_library = lambda x: jnp.swapaxes(x, -3, -2)

  def loss(q, k, v):
    out = _library_call(
      *map(to_library, (q, k, v)),
      names=names,
      bias=None,
      mask=_tokamax_mask(None, None, None, is_causal=True),
      logits_scale=0.125,
      logits_soft_cap=None,
    )
    return jnp.sum(out.astype(jnp.float32))

  try:
    jax.jit(jax.grad(loss, (0, 1, 2))).lower(shape, shape, shape).compile()
  except Exception as error:  # noqa: BLE001  # any failure: the kernels are unusable here
    return f'{type(error).__name__}: {str(error).splitlines()[0][:200]}'
  return None


def fused_unsupported(
  q,
  k,
  v,
  *,
  mask=None,
  bias=None,
  dropout_rate=0.0,
  is_causal=False,
  window=0,
  softcap=0.0,
  sink=None,
  alibi_slopes=None,
) -> str | None:
  """Why the fused kernel cannot run this call exactly, or None if it can."""
  del mask  # any boolean mask: it is passed on as one
  if not available():
    return f'it needs the tokamax library ({INSTALL_HINT})'
  if dropout_rate > 0.0:
    return "tokamax's kernels take no dropout"
  if softcap and (bias is not None or alibi_slopes is not None or sink is not None):
    return (
      'it cannot run softcap with a bias, ALiBi or a sink: tokamax caps the logits after '
      'adding the bias, Attend before'
    )
  if alibi_slopes is not None and not is_causal:
    return 'it runs ALiBi with is_causal=True only (-slope*|i - j| is no per-key bias)'
  if sink is not None and window:
    return 'it cannot run a sink with a window (the sink key would fall outside the range)'
  if sink is not None and alibi_slopes is not None:
    return (
      "it cannot run a sink with ALiBi (ALiBi's per-key row drops a per-query term the sink "
      'logit would need)'
    )
  if jax.default_backend() == 'gpu':
    if softcap and 'mosaic' not in gpu_implementations():
      return "tokamax's Triton backward pass has no soft-capping (its Mosaic one has)"
    if q.dtype not in (jnp.float16, jnp.bfloat16):
      return f'its GPU kernels need float16 or bfloat16 inputs, got {q.dtype}'
    if v.shape[-1] != q.shape[-1]:
      return f'it needs equal query and value head sizes, got D={q.shape[-1]}, Dv={v.shape[-1]}'
    failure = _kernels_fail_to_build(gpu_implementations())
    if failure:
      return f'tokamax {_version()} does not build on jax {jax.__version__} here ({failure})'
  return None


def _key_ranges(t: int, s: int, *, is_causal: bool, window: int, shift: int):
  """Per-query `(k_start, k_end)`, each `[T]` or None: the keys `[start, end)` query i may see
  (causal: `j <= i`; window: `|i - j| < window`), with `shift` keys in front of all of them."""
  i = jnp.arange(t)
  start = jnp.maximum(i - window + 1, 0) + shift if window else None
  if is_causal:
    end = i + 1 + shift
  elif window:
    end = jnp.minimum(i + window, s) + shift
  else:
    end = None
  return start, end


def _with_sink(k, v, bias, mask, sink):
  """Keys and values with one zero key in front, the bias `[..., T|1, S+1]` holding the sink's
  logit in its first column, the mask `[..., T|1, S+1]` seeing it."""
  pad = lambda x: jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(1, 0), (0, 0)])
  sink = jnp.asarray(sink, jnp.float32)
  lead = jnp.broadcast_shapes(sink.shape, () if bias is None else bias.shape[:-2])
  if bias is None:
    bias = jnp.zeros((1, k.shape[-2]), jnp.float32)
  bias = jnp.broadcast_to(bias, (*lead, *bias.shape[-2:]))
  column = jnp.broadcast_to(sink.reshape(*sink.shape, 1, 1), (*lead, bias.shape[-2], 1))
  bias = jnp.concatenate([column.astype(bias.dtype), bias], axis=-1)
  if mask is not None:
    mask = jnp.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(1, 0)], constant_values=True)
  return pad(k), pad(v), bias, mask


def _alibi_key_bias(alibi_slopes: Array, s: int) -> Array:
  """`slope·j` per head and key, `[..., N, 1, S]` in float32: causal ALiBi up to a per-query
  constant. float32 because the terms grow with S (a bfloat16 8192 is exact to 32 only)."""
  slopes = jax.lax.stop_gradient(jnp.asarray(alibi_slopes, jnp.float32))  # a constant, as elsewhere
  return slopes[..., None, None] * jnp.arange(s, dtype=jnp.float32)


def _add(x: Array | None, y: Array) -> Array:
  return y if x is None else x.astype(jnp.float32) + y


def fused_attention(
  q,
  k,
  v,
  *,
  mask,
  bias,
  is_causal,
  scale,
  dropout_rate,
  dropout_rng,
  window=0,
  softcap=0.0,
  sink=None,
  alibi_slopes=None,
  groups=1,
):
  """The kernel of `scaled_dot_product_attention(..., implementation='fused')`: q `[..., N, T,
  H]`, k and v `[..., K, S, H]` (K dividing N), as `scaled_dot_product_attention` passes them."""
  del dropout_rate, dropout_rng, groups  # no dropout here; tokamax groups K/V heads itself
  t, s = q.shape[-2], k.shape[-2]
  if alibi_slopes is not None:
    bias = _add(bias, _alibi_key_bias(alibi_slopes, s))
  shift = 0
  if sink is not None:
    k, v, bias, mask = _with_sink(k, v, bias, mask, sink)
    shift = 1
  k_start, k_end = _key_ranges(t, s, is_causal=is_causal, window=window, shift=shift)
  library_mask = _tokamax_mask(mask, k_start, k_end, is_causal=is_causal and not shift)
  # tokamax wants [batch..., T, N, H]; Attend keeps the heads in front of T.
  to_library = lambda x: jnp.swapaxes(x, -3, -2)
  out = _library_call(
    to_library(q),
    to_library(k),
    to_library(v),
    bias=bias,
    mask=library_mask,
    logits_scale=scale,
    logits_soft_cap=softcap or None,
  )
  out = jnp.swapaxes(out, -3, -2)  # [..., N, T, Dv]
  if mask is None and not window:
    return out  # every query sees key 0 (or the sink)
  seen = _sees_a_key(mask, k_start, k_end, k.shape[-2])
  return jnp.where(seen[..., None], out, 0).astype(out.dtype)


def _tokamax_mask(mask, k_start, k_end, *, is_causal):
  """tokamax's mask object for a boolean mask `[..., T, S]` and per-query ranges `[T]`."""
  from tokamax._src.ops.attention import base  # pylint: disable=g-import-not-at-top

  return base.Mask(mask, k_start=k_start, k_end=k_end, is_causal=is_causal)


def _version() -> str:
  return importlib.metadata.version('tokamax')


def _library_call(q, k, v, *, names=None, **arguments):
  """tokamax's first implementation that runs the call (GPU: `gpu_implementations()`; else its
  portable 'xla'). Called below its public `dot_product_attention`, which takes the window as
  ranges of T = S only: the ranges here hold for any T and S (tokamax is pinned to one release).
  """
  from tokamax._src.ops.attention import api  # pylint: disable=g-import-not-at-top

  if not flags.FLAGS.is_parsed():
    # tokamax reads its absl flags at the first call and would parse sys.argv for them: under
    # pytest or in a notebook those are not absl flags. Its defaults stand in; the entry points
    # parse the command line with absl before any call.
    flags.FLAGS.mark_as_parsed()
  if names is None:
    names = gpu_implementations() if jax.default_backend() == 'gpu' else ('xla',)
  declined = []
  for name in names:
    kernel = api.IMPLEMENTATIONS.get('mosaic_gpu' if name == 'mosaic' else name)
    if kernel is None:
      declined.append(f'{name}: not in this tokamax build')
      continue
    try:
      return kernel(q, k, v, precision=None, q_sharding=None, **arguments)
    except NotImplementedError as e:
      declined.append(f'{name}: {e}')
  raise NotImplementedError(f'tokamax ran none of {names}: {"; ".join(declined)}')


def _sees_a_key(mask, k_start, k_end, s: int) -> Array:
  """`[..., T]`: whether query i sees any key, in its range and its mask."""
  seen = None
  if k_start is not None or k_end is not None:
    start = 0 if k_start is None else k_start
    end = s if k_end is None else jnp.minimum(k_end, s)
    seen = start < end
  if mask is not None:
    if k_start is not None or k_end is not None:
      j = jnp.arange(s)
      in_range = (j >= (0 if k_start is None else k_start[:, None])) & (
        j < (s if k_end is None else k_end[:, None])
      )
      mask = mask & in_range
    any_key = jnp.any(mask, axis=-1)
    seen = any_key if seen is None else any_key & seen
  return seen
