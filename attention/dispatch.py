"""Which kernel runs a call of `scaled_dot_product_attention`: the kernels beside the reference
one, and the choice among them for `implementation=None`.

On a GPU: cuDNN where it runs the call (`cudnn_unsupported` says why not), then Attend's own
Pallas flash kernel (`attention/pallas_flash.py`: causal masks, windows, ALiBi, sinks,
soft-capping and grouped heads computed in the kernel; on an H200 each such variant within 2.5x
of cuDNN's plain causal time at S=8192, docs/benchmarks.md), then tokamax's fused kernels
(`attention/fused.py`, for what takes a bias array), then the chunked kernel; on a CPU the chunked
kernel from `_CHUNKED_MIN_SCORES` score entries per head (from `_MASKED_SMALL_HEAD_MIN_SCORES`
for a masked call with small heads), below that the reference one
(`attention/sdpa.py`, the readable definition the others are tested against). The choice, and
why, is logged once per shape."""

import math

from absl import logging
import jax
import jax.numpy as jnp

from attention.chunked import chunked_attention
from attention.fused import fused_attention, fused_unsupported
from attention.pallas_flash import flash_attention, pallas_unsupported

Array = jax.Array

# From this many score entries per head (T * S) the chunked kernel wins on CPU. Medians on 2 shared
# CPU cores (B=8, N=8, H=64, float32) under mimalloc, as the entry points run: at S=512 chunked
# takes 0.8x reference's time forward and 0.75x forward+backward; at S=384 they tie; at S=256
# reference is 15% faster forward. Under glibc malloc reference's [T, S] buffers fault in afresh
# at every call: chunked is then 2.5x faster at S=512, 3x at S=384.
_CHUNKED_MIN_SCORES = 512 * 512

# With a mask (padding or causal) and heads of at most `_SMALL_HEAD` features, from
# `_MASKED_SMALL_HEAD_MIN_SCORES` on: chunked masks one (batch, head) slice at a time, while
# reference masks the whole [B, N, T, S] and its small-head matmuls run slowly. Chunked's time /
# reference's on 2 CPU cores (float32, mimalloc, 28 November 2026), forward and fwd+bwd, S=128:
# 0.57 / 0.81 (B=8, N=8, H=32, padding), 0.54 / 0.72 (causal), 0.66 / 0.81 (B=32, N=12, H=32,
# MiniLM's shape: its encoder forward 660 -> 609 ms), 0.99 / 0.68 (B=8, N=12, H=16); S=256
# 0.68-0.89 / 0.60-0.95; a small call (B=4, N=6, ~1 ms) 0.97-1.08 / 0.98-1.15. At H=64 chunked
# was faster forward (0.75-0.95) but 2-10% slower fwd+bwd, and without a mask slower in both
# (1.13-1.38), so those keep `_CHUNKED_MIN_SCORES`.
_MASKED_SMALL_HEAD_MIN_SCORES = 128 * 128
_SMALL_HEAD = 32


# Every kernel is called as `kernel(q, k, v, *, mask, bias, is_causal, scale, dropout_rate,
# dropout_rng, window, softcap, sink, alibi_slopes, groups)` (see `attention/sdpa.py`); these
# adapters pass each library kernel the options it takes.


def _chunked(q, k, v, *, groups=1, **options):
  del groups  # chunked_attention repeats grouped keys and values to the query heads itself.
  return chunked_attention(q, k, v, **options)


def _cudnn(q, k, v, *, mask, bias, is_causal, scale, window=0, groups=1, **unsupported):
  # jax.nn exposes no cuDNN dropout, soft-capping, sinks or ALiBi slopes: the dispatcher sends
  # none of them here (see `cudnn_unsupported`).
  del groups, unsupported
  # jax.nn wants [B, T, N, H] while Attend keeps heads as a leading dim, [..., N, T, H]: fold all
  # leading dims but the last into B and use the last as N. Keys and values keep their K heads:
  # jax.nn runs grouped-query attention itself.
  lead, t, s = q.shape[:-2], q.shape[-2], k.shape[-2]
  b = math.prod(lead[:-1]) if lead else 1
  to_btnh = lambda x: jnp.swapaxes(x.reshape(b, -1, *x.shape[-2:]), 1, 2)
  to_bnts = lambda x: None if x is None else jnp.broadcast_to(x, (*lead, t, s)).reshape(b, -1, t, s)
  # jax.nn's (left, right) window counts keys either side, inclusive; cuDNN takes left ones only.
  local_window = (window - 1, 0) if window else None
  out = jax.nn.dot_product_attention(
    to_btnh(q),
    to_btnh(k),
    to_btnh(v),
    bias=to_bnts(bias),
    mask=to_bnts(mask),
    scale=scale,
    is_causal=is_causal,
    local_window_size=local_window,
    implementation='cudnn',
  )  # [B, T, N, Dv]
  return jnp.swapaxes(out, 1, 2).reshape(*lead, t, v.shape[-1])


def _pallas(q, k, v, *, mask, bias, dropout_rate, dropout_rng, groups=1, **options):
  # pallas_unsupported refused masks, biases and dropout; the kernel groups K/V heads itself.
  # `options`: scale, is_causal, window, softcap, sink, alibi_slopes.
  del mask, bias, dropout_rate, dropout_rng, groups
  return flash_attention(q, k, v, **options)


FAST_KERNELS = {  # every kernel but the reference one, by name
  'chunked': _chunked,
  'cudnn': _cudnn,
  'fused': fused_attention,
  'pallas': _pallas,
}


def cudnn_unsupported(
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
  """Why cuDNN cannot run this call, or None if it can. The variants come first: what they name
  does not depend on the machine."""
  if softcap:
    return f"it cannot run softcap={softcap}: jax.nn's cuDNN call has no logit soft-capping"
  if sink is not None:
    return f"it cannot run sink (shape {tuple(sink.shape)}): jax.nn's cuDNN call has no sink slot"
  if alibi_slopes is not None:
    return "it cannot run alibi_slopes: jax.nn's cuDNN call takes no ALiBi slopes"
  if window and not is_causal:
    return (
      f"it cannot run window={window} with is_causal=False: jax.nn's cuDNN call takes a "
      'window of past keys only'
    )
  if window and q.shape[-2] != k.shape[-2]:
    # Where the band sits for T != S is not documented for cuDNN's sliding window.
    return f'it cannot run window={window} with T={q.shape[-2]} != S={k.shape[-2]}'
  if jax.default_backend() != 'gpu':
    return f'it needs an NVIDIA GPU and the JAX backend is {jax.default_backend()!r}'
  if q.dtype not in (jnp.float16, jnp.bfloat16):
    return f'it needs float16 or bfloat16 inputs, got {q.dtype}'
  if q.shape[-1] % 8 or q.shape[-1] > 128 or v.shape[-1] != q.shape[-1]:
    return (
      'it needs equal query/value head sizes <= 128 and divisible by 8, '
      f'got D={q.shape[-1]}, Dv={v.shape[-1]}'
    )
  masked = mask is not None or bias is not None or is_causal or window > 0
  if masked and (q.shape[-2] % 2 or k.shape[-2] % 2):
    # cuDNN's backward takes a mask, a bias or causal masking at even lengths only.
    return f'masked attention needs even lengths, got T={q.shape[-2]}, S={k.shape[-2]}'
  if dropout_rate > 0.0:
    return 'jax.nn exposes no cuDNN dropout'
  return None


# Why each fast kernel cannot run a call, or None: `(q, k, v, *, mask, bias, dropout_rate,
# is_causal, window, softcap, sink, alibi_slopes)`. The order is the GPU's order of preference.
UNSUPPORTED = {
  'cudnn': cudnn_unsupported,
  'pallas': pallas_unsupported,
  'fused': fused_unsupported,
}


def chosen_implementation(
  q: Array,
  k: Array,
  v: Array,
  *,
  mask: Array | None = None,
  bias: Array | None = None,
  is_causal: bool = False,
  dropout_rate: float = 0.0,
  window: int = 0,
  softcap: float = 0.0,
  sink: Array | None = None,
  alibi_slopes: Array | None = None,
) -> tuple[str, str]:
  """(the kernel `scaled_dot_product_attention(..., implementation=None)` runs for these
  arguments on this backend, why): the arguments mean what it documents."""
  call = dict(
    mask=mask,
    bias=bias,
    dropout_rate=dropout_rate,
    is_causal=is_causal,
    window=window,
    softcap=softcap,
    sink=sink,
    alibi_slopes=alibi_slopes,
  )
  declined = []
  for name, unsupported in UNSUPPORTED.items():
    if name != 'cudnn' and jax.default_backend() != 'gpu':
      break  # the Pallas and fused kernels are GPU kernels (tokamax's also runs on a CPU, slowly)
    reason = unsupported(q, k, v, **call)
    if reason is None:
      return name, '; '.join(declined) or 'cuDNN runs it'
    declined.append(f'{"cuDNN" if name == "cudnn" else repr(name)} declines: {reason}')
  why = '; '.join(declined)
  masked_small_heads = (mask is not None or is_causal) and q.shape[-1] <= _SMALL_HEAD
  threshold = _MASKED_SMALL_HEAD_MIN_SCORES if masked_small_heads else _CHUNKED_MIN_SCORES
  if q.shape[-2] * k.shape[-2] >= threshold:
    return 'chunked', why
  return 'reference', why


_LOGGED = set()


def log_choice(implementation: str, why: str, q, k, variants: dict) -> None:
  """Logs the kernel picked for this call's shapes once (a jitted caller traces once per shape)."""
  # The options set: arrays given, and flags and numbers other than False and 0.
  unset = lambda x: x is None or (isinstance(x, (bool, int, float)) and not x)
  on = tuple(name for name, x in variants.items() if not unset(x))
  key = (implementation, q.shape, k.shape, str(q.dtype), on)
  if key not in _LOGGED:
    _LOGGED.add(key)
    # INFO on a GPU, where the choice among kernels matters; DEBUG (-v=1) on a CPU.
    logging.log(
      logging.INFO if jax.default_backend() == 'gpu' else logging.DEBUG,
      'attention: %s for q%s k%s %s%s (%s)',
      implementation,
      tuple(q.shape),
      tuple(k.shape),
      q.dtype,
      f' with {", ".join(on)}' if on else '',
      why,
    )
