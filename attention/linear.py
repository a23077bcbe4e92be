"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs").

Softmax attention weighs key j for query i by `exp(q_i·k_j)`; linear attention by the kernel
`φ(q_i)·φ(k_j)` with the feature map `φ(x) = elu(x) + 1` (positive, so every weight is too):

    out_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ  /  φ(q_i)ᵀ Σ_j φ(k_j)

The sums over keys do not depend on the query, so the cost is O(T·H·Dv) instead of O(T·S·H), and
no `[T, S]` matrix exists. Causal attention needs the sums over keys `0..i` only: a running state
`(S = Σ φ(k) vᵀ [H, Dv], z = Σ φ(k) [H])`, the fixed-size recurrent state a decoder carries.
For training the causal sums run over chunks of `chunk` positions: inside a chunk a small
`[chunk, chunk]` masked product, across chunks the state, so memory stays O(T·H + H·Dv) per head.

The feature map can also be learned: Hedgehog's (Zhang et al. 2024, "The Hedgehog & the
Porcupine"), which LoLCATs trains to mimic a trained model's softmax attention, is
`φ(x) = [softmax(x W), softmax(-x W)]` over the features, a weight `W [H, F]` per head, so that
the kernel can be as spiky as `exp(q·k)` (`hedgehog_feature_map`).

Shapes: queries `[..., T, H]`, keys `[..., S, H]`, values `[..., S, Dv]`; leading dims broadcast
(so grouped key/value heads broadcast against query heads, see `attention.variants`).
"""

from typing import Callable

import jax
from jax import lax
import jax.numpy as jnp

Array = jax.Array
State = dict[str, Array]
FeatureMap = Callable[[Array], Array]  # `[..., L, H] -> [..., L, F]`, positive features

# Guards the normaliser of a query whose keys are all masked (its output is then zero).
_EPS = 1e-6


def elu_feature_map(x: Array) -> Array:
  """`φ(x) = elu(x) + 1`, the paper's positive feature map, computed in float32."""
  return jax.nn.elu(x.astype(jnp.float32)) + 1.0


def hedgehog_feature_map(x: Array, weight: Array) -> Array:
  """`φ(x) = [softmax(x W), softmax(-x W)]` over the features, in float32: `x [..., L, H]` and a
  per-head `weight [..., H, F]` (its leading dims broadcast against x's heads) give `[..., L, 2F]`.
  The second half answers to the most negative projections as the first does to the largest,
  so a query and a key can match in either direction."""
  projected = jnp.einsum('...lh,...hf->...lf', x.astype(jnp.float32), weight.astype(jnp.float32))
  return jnp.concatenate([jax.nn.softmax(projected), jax.nn.softmax(-projected)], axis=-1)


ELU_MAPS = (elu_feature_map, elu_feature_map)  # the default (queries' map, keys' map)


def _key_features(k: Array, mask: Array | None, key_map: FeatureMap) -> Array:
  """`φ(k)` with masked keys (`mask [..., S]`, True = real) zeroed, so they add nothing."""
  phi_k = key_map(k)  # [..., S, F]
  return phi_k if mask is None else phi_k * mask[..., None]


def init_linear_state(lead: tuple[int, ...], d_k: int, d_v: int) -> State:
  """The empty recurrent state: `{'s': [*lead, F, Dv], 'z': [*lead, F]}`, float32 zeros, for
  `d_k = F` features (H with the elu map, 2F with Hedgehog's)."""
  return {'s': jnp.zeros((*lead, d_k, d_v), jnp.float32), 'z': jnp.zeros((*lead, d_k), jnp.float32)}


def _causal_chunks(
  phi_q: Array, phi_k: Array, v: Array, state: State, chunk: int
) -> tuple[Array, Array, State]:
  """Causal numerators `[..., T, Dv]` and denominators `[..., T]`, and the final state."""
  lead = jnp.broadcast_shapes(phi_q.shape[:-2], phi_k.shape[:-2], v.shape[:-2])
  t = phi_q.shape[-2]
  n = -(-t // chunk)
  pad = lambda x: jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, n * chunk - t), (0, 0)])
  # [n, *lead, chunk, F]: chunks lead so that lax.scan walks them in order.
  split = lambda x: jnp.moveaxis(
    jnp.broadcast_to(pad(x), (*lead, n * chunk, x.shape[-1])).reshape(*lead, n, chunk, x.shape[-1]),
    -3,
    0,
  )
  within = jnp.tril(jnp.ones((chunk, chunk), bool))  # [chunk, chunk]

  def step(carry, xs):
    s, z = carry  # [*lead, H, Dv], [*lead, H]
    q_c, k_c, v_c = xs  # [*lead, chunk, H|Dv]
    weights = jnp.where(within, jnp.einsum('...th,...sh->...ts', q_c, k_c), 0.0)
    numerator = jnp.einsum('...ts,...sv->...tv', weights, v_c) + q_c @ s
    denominator = jnp.sum(weights, axis=-1) + jnp.einsum('...th,...h->...t', q_c, z)
    s = s + jnp.einsum('...sh,...sv->...hv', k_c, v_c)
    z = z + jnp.sum(k_c, axis=-2)
    return (s, z), (numerator, denominator)

  init = (
    jnp.broadcast_to(state['s'], (*lead, *state['s'].shape[-2:])),
    jnp.broadcast_to(state['z'], (*lead, state['z'].shape[-1])),
  )
  (s, z), (num, den) = lax.scan(
    step, init, (split(phi_q), split(phi_k), split(v.astype(jnp.float32)))
  )
  num = jnp.moveaxis(num, 0, -3).reshape(*lead, n * chunk, -1)[..., :t, :]
  den = jnp.moveaxis(den, 0, -2).reshape(*lead, n * chunk)[..., :t]
  return num, den, {'s': s, 'z': z}


def linear_attention(
  q: Array,
  k: Array,
  v: Array,
  *,
  mask: Array | None = None,
  is_causal: bool = False,
  state: State | None = None,
  chunk: int = 64,
  return_state: bool = False,
  feature_maps: tuple[FeatureMap, FeatureMap] = ELU_MAPS,
) -> Array | tuple[Array, State]:
  """Linear attention of queries `[..., T, H]` over keys `[..., S, H]` and values `[..., S, Dv]`.

  Args:
    q: queries.
    k: keys.
    v: values.
    mask: key mask `[..., S]` (broadcasting over leading dims), True = real key.
    is_causal: query i sees keys `0..i` only (T == S), through running sums over chunks.
    state: causal only: the state after earlier positions (decoding; default empty); query i
      then also sees every key the state has summed.
    chunk: positions per chunk of the causal sums.
    return_state: causal only: also return the state after the last key (for decoding).
    feature_maps: `(φ for the queries, φ for the keys)`, each `[..., L, H] -> [..., L, F]`;
      default elu + 1 for both.

  Returns:
    Output `[..., T, Dv]` in v's dtype, or `(output, state)` with `return_state`.
  """
  query_map, key_map = feature_maps
  phi_q, phi_k = query_map(q), _key_features(k, mask, key_map)
  if is_causal:
    if q.shape[-2] != k.shape[-2]:
      raise ValueError(
        f'linear_attention: causal attention needs T == S, got T={q.shape[-2]}, S={k.shape[-2]}.'
      )
    state = init_linear_state((), phi_q.shape[-1], v.shape[-1]) if state is None else state
    num, den, state = _causal_chunks(phi_q, phi_k, v, state, min(chunk, q.shape[-2]))
  else:
    if state is not None or return_state:
      raise ValueError('linear_attention: a decoding state needs is_causal=True.')
    kv = jnp.einsum('...sh,...sv->...hv', phi_k, v.astype(jnp.float32))  # [..., H, Dv]
    num = jnp.einsum('...th,...hv->...tv', phi_q, kv)  # [..., T, Dv]
    den = jnp.einsum('...th,...h->...t', phi_q, jnp.sum(phi_k, axis=-2))  # [..., T]
  out = (num / jnp.maximum(den, _EPS)[..., None]).astype(v.dtype)
  return (out, state) if return_state else out


def linear_attention_weights(
  q: Array,
  k: Array,
  *,
  mask: Array | None = None,
  is_causal: bool = False,
  feature_maps: tuple[FeatureMap, FeatureMap] = ELU_MAPS,
) -> Array:
  """The weights linear attention puts on each key, `[..., T, S]`, for pictures and tests.

  `φ(q_i)·φ(k_j) / Σ_j' φ(q_i)·φ(k_j')` over the keys query i sees: what `linear_attention`
  computes without forming them. Materialises `[T, S]`; the kernel itself never does.
  """
  query_map, key_map = feature_maps
  scores = jnp.einsum('...th,...sh->...ts', query_map(q), _key_features(k, mask, key_map))
  if is_causal:
    scores = jnp.where(jnp.tril(jnp.ones(scores.shape[-2:], bool)), scores, 0.0)
  return scores / jnp.maximum(jnp.sum(scores, axis=-1, keepdims=True), _EPS)
