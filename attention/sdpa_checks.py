"""The checks of `scaled_dot_product_attention`'s arguments, run before any kernel traces them.

Each raises ValueError with one sentence naming the argument; `check_call` also works out what
every kernel needs from the shapes: the output's leading dims and, for grouped-query keys and
values, how many query heads each key/value head serves.
"""

import math
import numbers

import jax.numpy as jnp

from attention.core import check_kv, check_mask
from attention.scores import check_qk

NAME = 'scaled_dot_product_attention'


def lead_and_groups(q, k, v) -> tuple[tuple[int, ...], int]:
  """(leading dims of the output, query heads G per key/value head).

  Axis -3 holds the heads. Keys and values with K heads there, 1 < K < N and K dividing the
  query's N, serve G = N // K query heads each (grouped-query attention); otherwise G = 1 and
  all leading dims broadcast as usual (K = 1 is multi-query attention).
  """
  n = q.shape[-3] if q.ndim >= 3 else 1
  kv_heads = {x.shape[-3] for x in (k, v) if x.ndim >= 3} - {1}
  groups = 1
  if n > 1 and kv_heads and min(kv_heads) < n:
    if len(kv_heads) > 1:
      raise ValueError(
        f'{NAME}: grouped-query keys and values need the same number of heads, '
        f'got k{tuple(k.shape)} and v{tuple(v.shape)}.'
      )
    heads = kv_heads.pop()
    if n % heads:
      raise ValueError(
        f'{NAME}: q has N={n} heads, not a multiple of the K={heads} key/value heads of '
        f'k{tuple(k.shape)}, v{tuple(v.shape)}; grouped-query attention needs N % K == 0.'
      )
    groups = n // heads
  # Grouped heads count as N for broadcasting the other leading dims.
  widen = lambda x: (
    x.shape[:-3] + (n,) if groups > 1 and x.ndim >= 3 and x.shape[-3] > 1 else x.shape[:-2]
  )
  try:
    lead = jnp.broadcast_shapes(q.shape[:-2], widen(k), widen(v))
  except ValueError:
    raise ValueError(
      f'{NAME}: leading dims of q{tuple(q.shape)}, k{tuple(k.shape)}, '
      f'v{tuple(v.shape)} do not broadcast.'
    ) from None
  return lead, groups


def check_variants(lead, window, softcap, sink, alibi_slopes) -> None:
  """Raises ValueError on a bad window, softcap, sink or alibi_slopes."""
  if isinstance(window, bool) or not isinstance(window, numbers.Integral) or window < 0:
    raise ValueError(f'{NAME}: window must be a non-negative int (0 = no window), got {window!r}.')
  if (
    isinstance(softcap, bool)
    or not isinstance(softcap, numbers.Real)
    or not 0.0 <= softcap < math.inf
  ):
    raise ValueError(
      f'{NAME}: softcap must be a non-negative finite number (0 = off), got {softcap!r}.'
    )
  for arg, x in (('sink', sink), ('alibi_slopes', alibi_slopes)):
    if x is None:
      continue
    try:
      fits = jnp.broadcast_shapes(tuple(x.shape), lead) == tuple(lead)
    except ValueError:
      fits = False
    if not fits:
      raise ValueError(
        f'{NAME}: {arg} of shape {tuple(x.shape)} does not broadcast to the leading dims '
        f'{tuple(lead)} of q, k, v (e.g. [N], one per head, for q [B, N, T, H]).'
      )


def check_call(
  q, k, v, mask, bias, scale, dropout_rate, dropout_rng, implementation, implementations
) -> tuple[tuple[int, ...], int]:
  """Raises ValueError, before any tracing, on inputs no implementation could handle, or on an
  `implementation` that is neither None nor a name of `implementations`.

  Returns `lead_and_groups(q, k, v)`.
  """
  check_qk(q, k, NAME)
  check_kv(k, v, NAME)
  lead, groups = lead_and_groups(q, k, v)
  scores_shape = (*lead, q.shape[-2], k.shape[-2])
  check_mask(mask, scores_shape, NAME)
  if bias is not None:
    check_mask(bias, scores_shape, f'{NAME} (bias)')
  if mask is not None and mask.dtype != jnp.bool_:
    raise ValueError(f'{NAME}: mask must be boolean, got {mask.dtype}.')
  if not 0.0 <= dropout_rate < 1.0:
    raise ValueError(f'{NAME}: dropout_rate must be in [0, 1), got {dropout_rate}.')
  if dropout_rate > 0.0 and dropout_rng is None:
    raise ValueError(f'{NAME}: dropout_rate > 0 needs a dropout_rng.')
  if scale is not None and not isinstance(scale, numbers.Real):
    raise ValueError(f'{NAME}: scale must be a number, got {type(scale).__name__}.')
  if implementation is not None and implementation not in implementations:
    raise ValueError(
      f'Unknown attention implementation {implementation!r}; valid implementations: '
      f'{", ".join(implementations)} (or None to pick automatically).'
    )
  return lead, groups
