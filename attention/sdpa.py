"""`scaled_dot_product_attention`: one entry point, several implementations.

- `'reference'`: einsum -> masked softmax -> einsum. Materialises the `[..., T, S]` weights
  (`attention_weights`); the readable definition the others are tested against.
- `'chunked'`: online softmax over query and key blocks (`attention/chunked.py`); O(block) memory
  in forward and backward, and the fastest choice on CPU for long sequences.
- `'cudnn'`: `jax.nn.dot_product_attention(implementation='cudnn')`, the fused flash kernel on
  NVIDIA GPUs (float16/bfloat16).
- `'fused'`: a flash kernel of the `tokamax` library (`attention/fused.py`, the `gpu` extra) for
  the variants cuDNN cannot run; off a GPU, tokamax's portable implementation of the same call.
- `'pallas'`: Attend's own flash kernel in Pallas (`attention/pallas_flash.py`), every variant
  computed in the kernel from positions (no mask or bias arrays); off a GPU in interpret mode.
`implementation=None` picks the fastest one that runs the call exactly on this backend: on a GPU
cuDNN, then 'pallas', then 'fused', then 'chunked'; on a CPU 'chunked' or 'reference' by size. The
choice is logged once per shape (absl logging: INFO on a GPU, DEBUG elsewhere).

Variants, all off by default: a sliding `window`, logit soft-capping (`softcap`), attention-sink
logits (`sink`), ALiBi (`alibi_slopes`), and grouped-query attention (keys and values with fewer
heads than the queries). cuDNN runs grouped queries and causal windows; on a GPU 'fused' runs
the others but dropout and the combinations `fused_unsupported` names.
"""

import jax
import jax.numpy as jnp

from attention.biases import alibi_bias_at, relative_positions
from attention.core import attend, drop_weights, masked_softmax, repeat_kv
from attention.dispatch import FAST_KERNELS, UNSUPPORTED, chosen_implementation, log_choice
from attention.masks import causal_mask, combine_masks, sliding_window_mask
from attention.sdpa_checks import check_call, check_variants

Array = jax.Array


def _weights(
  q,
  k,
  *,
  mask,
  bias,
  is_causal,
  scale,
  window=0,
  softcap=0.0,
  sink=None,
  alibi_slopes=None,
  groups=1,
):
  """The reference kernel's weights `[..., T, S]` in q's dtype (see `attention_weights`)."""
  if groups > 1:
    # Each key/value head meets its G query heads as one block of G*T rows, a plain batched
    # matmul against [..., K, S, D]: broadcast against [..., G, T, D], XLA:CPU copies the keys
    # to every query head.
    q = _stack_groups(q, groups)  # [..., K, G*T, D]
  # Scores accumulate in float32 at least: bfloat16 inputs get float32 sums, float64 stay float64.
  wide = jnp.promote_types(jnp.result_type(q, k), jnp.float32)
  scores = jnp.einsum('...td,...sd->...ts', q, k, preferred_element_type=wide) * scale
  if groups > 1:
    scores = _unstack_groups(scores, groups)  # [..., N, T, S]
  weights = normalize_scores(
    scores,
    mask=mask,
    bias=bias,
    alibi_slopes=alibi_slopes,
    is_causal=is_causal,
    window=window,
    softcap=softcap,
    sink=sink,
  )
  return weights.astype(q.dtype)


def _reference(q, k, v, *, dropout_rate, dropout_rng, groups=1, **options):
  if groups == 1 and q.ndim >= 3 and q.shape[-3] > 1 and k.shape[-3] == v.shape[-3] == 1:
    groups = q.shape[-3]  # one key/value head serves every query head (multi-query attention)
  weights = _weights(q, k, groups=groups, **options)  # [..., T, S]
  dropped = drop_weights(weights, dropout_rate, dropout_rng)
  if groups > 1 and q.shape[-2] == 1:
    # One query a head (a decoding step): the weights meet the values by group, so that each
    # key/value head's values are read once, not once per query head (SmolLM2's heads, 28 rows
    # of 1,600 cached positions: 10.6 ms a layer against 44.2 with the values repeated).
    return _unstack_groups(attend(_stack_groups(dropped, groups), v), groups)
  if groups > 1:
    # The values are repeated to the query heads, so that the weights meet them in the layout
    # the softmax made. Meeting the values by group, [..., K, G*T, S], XLA:CPU formed the
    # weights a second time in that shape and kept both for the backward pass (SmolLM2's train
    # step at 8 x 128 tokens: 90 MB more, and no faster).
    return attend(dropped, repeat_kv(v, q.shape[-3]))
  return attend(dropped, v)


def _stack_groups(x: Array, groups: int) -> Array:
  """`[..., N, T, X]` -> `[..., N // G, G * T, X]`: query head n is group member n % G of key/value
  head n // G (the order of `jnp.repeat(k, G, axis=-3)`), its rows stacked after the members
  before it. A reshape: no copy."""
  return x.reshape(*x.shape[:-3], x.shape[-3] // groups, groups * x.shape[-2], x.shape[-1])


def _unstack_groups(x: Array, groups: int) -> Array:
  """`[..., K, G * T, X]` -> `[..., K * G, T, X]`, the inverse of `_stack_groups`."""
  return x.reshape(*x.shape[:-3], x.shape[-3] * groups, x.shape[-2] // groups, x.shape[-1])


def normalize_scores(
  scores: Array,
  *,
  mask: Array | None = None,
  bias: Array | None = None,
  alibi_slopes: Array | None = None,
  is_causal: bool = False,
  window: int = 0,
  softcap: float = 0.0,
  sink: Array | None = None,
) -> Array:
  """Scaled scores `[..., T, S]` -> attention weights, the variants' one definition.

  Soft-cap, add the bias and ALiBi's `-slope · |i - j|`, mask (causal, window), then softmax,
  with one more slot of logit `sink` when given. Queries sit at `0 .. T-1`, keys at `0 .. S-1`.
  `scaled_dot_product_attention` documents the arguments; any score (`attention.SCORES`) can be
  normalised this way.
  """
  t, s = scores.shape[-2:]
  if softcap:
    scores = softcap * jnp.tanh(scores / softcap)
  if bias is not None:
    scores = scores + bias.astype(scores.dtype)
  if alibi_slopes is not None:
    relative = relative_positions(jnp.arange(t), jnp.arange(s))  # [T, S]
    scores = scores + alibi_bias_at(alibi_slopes, relative, scores.dtype)
  if is_causal:
    mask = combine_masks(mask, causal_mask(t, s))
  if window:
    mask = combine_masks(mask, sliding_window_mask(t, s, window=window))
  return masked_softmax(scores, mask) if sink is None else _sink_softmax(scores, mask, sink)


def _sink_softmax(scores: Array, mask: Array | None, sink: Array) -> Array:
  """Softmax over the keys plus one null slot of logit `sink` (broadcasting against the leading
  dims) and value 0: `exp(s_j) / (exp(sink) + Σ_j exp(s_j))`.

  The weights over the real keys sum to less than 1; a fully masked row gets zeros. As in
  `masked_softmax`, masked scores become a finite minimum and the shift is a constant, so
  gradients (also with respect to the sink) stay finite.
  """
  x = scores.astype(jnp.promote_types(scores.dtype, jnp.float32))
  sink = sink.astype(x.dtype)[..., None, None]  # [..., 1, 1]
  if mask is not None:
    x = jnp.where(mask, x, jnp.finfo(x.dtype).min)
  shift = jax.lax.stop_gradient(jnp.maximum(jnp.max(x, axis=-1, keepdims=True), sink))
  e = jnp.exp(x - shift)
  if mask is not None:
    e = jnp.where(mask, e, 0.0)
  total = jnp.exp(sink - shift) + jnp.sum(e, axis=-1, keepdims=True)
  return (e / jnp.where(total > 0, total, 1.0)).astype(scores.dtype)


KERNELS = {'reference': _reference, **FAST_KERNELS}  # every implementation, by name


def scaled_dot_product_attention(
  q: Array,
  k: Array,
  v: Array,
  *,
  mask: Array | None = None,
  bias: Array | None = None,
  is_causal: bool = False,
  scale: float | None = None,
  dropout_rate: float = 0.0,
  dropout_rng: Array | None = None,
  implementation: str | None = None,
  window: int = 0,
  softcap: float = 0.0,
  sink: Array | None = None,
  alibi_slopes: Array | None = None,
) -> Array:
  """`softmax(cap(q kᵀ * scale) + bias + alibi, masked, sink) v`, with a choice of implementation.

  Args:
    q: queries `[..., T, D]`, usually `[B, N, T, H]`; leading dims (batch, heads) broadcast
      against k and v.
    k: keys `[..., S, D]`. With `[..., K, S, H]` for K < N heads, K dividing N, each key head
      serves N // K query heads (grouped-query attention; query head n reads key head
      `n // (N // K)`, the order of `jnp.repeat(k, N // K, axis=-3)`; K = 1 is multi-query).
    v: values `[..., S, Dv]`, heads as k.
    mask: boolean, broadcastable to `[..., T, S]`; True = may attend. A fully masked query row
      gets zero weights and a zero output.
    bias: added to the scores (e.g. relative-position or ALiBi terms), broadcastable to
      `[..., T, S]`.
    is_causal: also apply `causal_mask(T, S)`: query i sees keys 0..i.
    scale: score multiplier; default `1/sqrt(D)`.
    dropout_rate: dropout applied to the attention weights (the paper applies it in training).
    dropout_rng: PRNG key for dropout; required when `dropout_rate > 0`.
    implementation: a name in `KERNELS` (`'reference'`, `'chunked'`, `'cudnn'`, `'fused'`,
      `'pallas'`), or None: the fastest one the dispatcher knows to run the call exactly.
    window: if > 0, sliding-window (local) attention: query i sees key j only if
      `|i - j| < window` (with is_causal: keys `i - window + 1 .. i`). 'chunked' skips the key
      blocks outside the window, so its time grows as S·window.
    softcap: if > 0, logit soft-capping (Gemma 2): the scaled scores s become
      `softcap * tanh(s / softcap)`, before bias, ALiBi and masking.
    sink: attention-sink logits (a learned parameter), broadcastable to the leading dims (e.g.
      `[N]`, one per head): the softmax gets one more slot of that logit and value 0, so the
      weights over the keys sum to less than 1 and a head can attend to nothing.
    alibi_slopes: ALiBi (Press et al. 2022), broadcastable to the leading dims (e.g. `[N]`):
      adds `-slope * |i - j|` to the scores. Treated as a constant (no gradient).

  Returns:
    Output `[..., T, Dv]`. The weights it averages with are `attention_weights` of the same
    arguments (before dropout); no kernel but `'reference'` forms them.
  """
  # Converted here, before any kernel traces them: 'chunked' indexes the mask and bias with traced
  # head indices inside custom_vjp and lax.map, which a NumPy array cannot take.
  q, k, v = jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)
  mask, bias, sink, alibi_slopes = _optional_arrays(mask, bias, sink, alibi_slopes)
  lead, groups = check_call(
    q, k, v, mask, bias, scale, dropout_rate, dropout_rng, implementation, KERNELS
  )
  check_variants(lead, window, softcap, sink, alibi_slopes)
  window, softcap = int(window), float(softcap)
  variants = dict(
    is_causal=is_causal, window=window, softcap=softcap, sink=sink, alibi_slopes=alibi_slopes
  )
  implementation = _implementation(
    implementation, q, k, v, mask=mask, bias=bias, dropout_rate=dropout_rate, variants=variants
  )
  if implementation in FAST_KERNELS:
    q, k, v = _broadcast_leading(q, k, v, lead, groups)
  return KERNELS[implementation](
    q,
    k,
    v,
    mask=mask,
    bias=bias,
    scale=q.shape[-1] ** -0.5 if scale is None else float(scale),
    dropout_rate=float(dropout_rate),
    dropout_rng=dropout_rng,
    groups=groups,
    **variants,
  )


def _optional_arrays(*arrays) -> tuple[Array | None, ...]:
  """Each of `arrays` as a JAX array, None staying None."""
  return tuple(None if x is None else jnp.asarray(x) for x in arrays)


def _implementation(implementation, q, k, v, *, mask, bias, dropout_rate, variants) -> str:
  """The kernel that runs the call: for None the dispatcher's choice (logged); a named one as it
  is, unless it cannot run the call (ValueError, saying why)."""
  call = dict(mask=mask, bias=bias, dropout_rate=dropout_rate, **variants)
  if implementation is None:
    implementation, why = chosen_implementation(q, k, v, **call)
    log_choice(implementation, why, q, k, dict(variants, mask=mask, bias=bias))
  elif implementation in UNSUPPORTED:
    # Named, the Pallas kernel may run in interpret mode off a GPU (slowly: tests, debugging).
    extra = dict(interpret_allowed=True) if implementation == 'pallas' else {}
    reason = UNSUPPORTED[implementation](q, k, v, **call, **extra)
    if reason:
      raise ValueError(
        f'scaled_dot_product_attention: implementation={implementation!r} unavailable: {reason}.'
      )
  return implementation


def _broadcast_leading(q, k, v, lead, groups) -> tuple[Array, Array, Array]:
  """q, k, v broadcast to the output's leading dims `lead`, as the fast kernels take them.

  Grouped keys and values keep their K heads: the kernels expand or group them themselves.
  """
  kv_lead = (*lead[:-1], lead[-1] // groups) if groups > 1 else lead
  q = jnp.broadcast_to(q, (*lead, *q.shape[-2:]))
  k, v = (jnp.broadcast_to(x, (*kv_lead, *x.shape[-2:])) for x in (k, v))
  return q, k, v


def attention_weights(
  q: Array,
  k: Array,
  *,
  mask: Array | None = None,
  bias: Array | None = None,
  is_causal: bool = False,
  scale: float | None = None,
  window: int = 0,
  softcap: float = 0.0,
  sink: Array | None = None,
  alibi_slopes: Array | None = None,
) -> Array:
  """The weights `[..., T, S]` with which `scaled_dot_product_attention` of the same arguments
  averages the values (before dropout), in q's dtype; the arguments mean what it documents.

  Grouped keys `[..., K, S, H]` serve their N // K query heads, as there; the weights have the
  query heads, `[..., N, T, S]`. For reading weights out of a model, see `models.interventions`.
  """
  q, k = jnp.asarray(q), jnp.asarray(k)
  mask, bias, sink, alibi_slopes = _optional_arrays(mask, bias, sink, alibi_slopes)
  lead, groups = check_call(q, k, k, mask, bias, scale, 0.0, None, None, KERNELS)
  check_variants(lead, window, softcap, sink, alibi_slopes)
  if groups == 1 and q.ndim >= 3 and q.shape[-3] > 1 and k.shape[-3] == 1:
    groups = q.shape[-3]  # one key head serves every query head (multi-query attention)
  return _weights(
    q,
    k,
    mask=mask,
    bias=bias,
    is_causal=is_causal,
    scale=q.shape[-1] ** -0.5 if scale is None else float(scale),
    window=int(window),
    softcap=float(softcap),
    sink=sink,
    alibi_slopes=alibi_slopes,
    groups=groups,
  )
