"""The (gated) delta rule (Schlag et al. 2021; Yang et al. 2024, 2025): linear attention whose
state is a fast-weight memory `S [Dk, Dv]` that each token corrects rather than adds to.

Token by token, with the key `k_t`, value `v_t`, write strength `beta_t` in (0, 1) and, for the
gated rule (Gated DeltaNet), a log-decay `g_t <= 0`:

    S' = exp(g_t) S_{t-1}                              (forget: decay first)
    S_t = S' + beta_t k_t (v_t - S'^T k_t)^T           (then write the error, the delta rule)
    o_t = S_t^T q_t

Queries are scaled by `Dk^-1/2`. Without `g` (plain DeltaNet) nothing decays. Three forms compute
it: `delta_rule_recurrent` (a `lax.scan` over tokens, the reference), `delta_rule_chunked` (the
WY/UT form: within a chunk of C tokens the writes are folded into one triangular solve and a few
matmuls, and only the chunks are scanned; training and prefill), and `delta_rule_step` (a
decoding block from a state). `delta_rule_weights` is the quadratic attention form: the output
is linear in the values, `o = W v` with `W [T, S]` lower triangular, what a capture reads.

Shapes: queries and keys `[B, Hk, T, Dk]`, values `[B, H, T, Dv]`, `beta` and `g` `[B, H, T]`,
states `[B, H, Dk, Dv]`, with Hk query/key heads dividing the H value heads (value head h reads
key head `h // (H / Hk)`, Qwen3-Next's `repeat_interleave`). Every leading dim but the heads is
free. Arithmetic runs in float32 or wider; outputs come back in the values' dtype, states stay
float32 (or wider).
"""

from typing import Any, Callable

import jax
import jax.numpy as jnp

Array = jax.Array
L2_EPS = 1e-6  # inside the rsqrt of the sum of squares, as Qwen3-Next's (and FLA's) l2norm


def l2_normalize(x: Array, eps: float = L2_EPS) -> Array:
  """`x * rsqrt(sum(x^2) + eps)` over the last axis, in float32 or wider."""
  x = x.astype(jnp.promote_types(x.dtype, jnp.float32))
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


def _check(q: Array, k: Array, v: Array, beta: Array, g: Array | None) -> None:
  """ValueError, in one sentence, for shapes that do not fit together."""
  heads, key_heads = v.shape[-3], k.shape[-3]
  if q.shape != k.shape or q.shape[-2] != v.shape[-2] or heads % key_heads:
    raise ValueError(
      f'delta rule: queries and keys [B, Hk, T, Dk] with Hk dividing the value heads of '
      f'values [B, H, T, Dv]; got {q.shape}, {k.shape} and {v.shape}.'
    )
  for name, gate in (('beta', beta), ('g', g)):
    if gate is not None and gate.shape != v.shape[:-1]:
      raise ValueError(f'delta rule: {name} must be [B, H, T] = {v.shape[:-1]}; got {gate.shape}.')


def _prepare(q, k, v, beta, g, l2_norm: bool):
  """The kernels' common inputs: keys and queries repeated to the value heads, normalised as
  asked, queries scaled by `Dk^-1/2`, everything in float32 or wider, `g` zeros when None."""
  _check(q, k, v, beta, g)
  dtype = jnp.promote_types(v.dtype, jnp.float32)
  repeats = v.shape[-3] // k.shape[-3]
  q, k = (jnp.repeat(x.astype(dtype), repeats, axis=-3) for x in (q, k))  # [B, H, T, Dk]
  if l2_norm:
    q, k = l2_normalize(q), l2_normalize(k)
  q = q * q.shape[-1] ** -0.5
  g = jnp.zeros(v.shape[:-1], dtype) if g is None else g.astype(dtype)
  return q, k, v.astype(dtype), beta.astype(dtype), g


def _initial(state: Array | None, k: Array, v: Array) -> Array:
  """The state to start from, `[B, H, Dk, Dv]` in the kernels' dtype (zeros when None)."""
  if state is None:
    return jnp.zeros((*v.shape[:-2], k.shape[-1], v.shape[-1]), v.dtype)
  return state.astype(jnp.promote_types(state.dtype, v.dtype))


def delta_rule_recurrent(
  q: Array,
  k: Array,
  v: Array,
  beta: Array,
  g: Array | None = None,
  *,
  initial_state: Array | None = None,
  l2_norm: bool = False,
) -> tuple[Array, Array]:
  """The delta rule token by token (module docstring), a `lax.scan` over T.

  Args:
    q: queries `[B, Hk, T, Dk]`.
    k: keys `[B, Hk, T, Dk]`.
    v: values `[B, H, T, Dv]`, Hk dividing H.
    beta: write strengths `[B, H, T]` in (0, 1).
    g: log-decays `[B, H, T]` (<= 0); None = no decay (plain DeltaNet).
    initial_state: `[B, H, Dk, Dv]`; None = zeros.
    l2_norm: L2-normalise queries and keys first (Qwen3-Next's `use_qk_l2norm_in_kernel`).

  Returns:
    `(outputs [B, H, T, Dv] in v's dtype, the final state [B, H, Dk, Dv])`.
  """
  q, k, v32, beta, g = _prepare(q, k, v, beta, g, l2_norm)

  def token(state, inputs):
    q_t, k_t, v_t, beta_t, g_t = inputs  # [B, H, Dk|Dv], [B, H]
    state = state * jnp.exp(g_t)[..., None, None]  # decay first
    error = v_t - jnp.einsum('...kv,...k->...v', state, k_t)  # [B, H, Dv]
    state = state + jnp.einsum('...k,...v->...kv', k_t, beta_t[..., None] * error)
    return state, jnp.einsum('...kv,...k->...v', state, q_t)

  time_major = [jnp.moveaxis(x, -2, 0) for x in (q, k, v32)] + [
    jnp.moveaxis(x, -1, 0) for x in (beta, g)
  ]  # [T, B, H, ...]
  state, out = jax.lax.scan(token, _initial(initial_state, k, v32), time_major)
  return jnp.moveaxis(out, 0, -2).astype(v.dtype), state  # [B, H, T, Dv]


def _lower(size: int, *, strict: bool) -> Array:
  """`[C, C]` True on and below (strict: below) the diagonal."""
  return jnp.tril(jnp.ones((size, size), bool), -1 if strict else 0)


def _pairwise_decay(cum: Array) -> Array:
  """`exp(cum_i - cum_j)` for j <= i, else 0, `[..., C, C]`: what the state decays between
  token j's write and token i's read (masked before the exp, which would overflow above)."""
  diff = cum[..., :, None] - cum[..., None, :]  # [..., C, C]
  causal = _lower(cum.shape[-1], strict=False)
  return jnp.where(causal, jnp.exp(jnp.where(causal, diff, 0.0)), 0.0)


def _ut_solve(k: Array, beta: Array, decay: Array, rhs: Array) -> Array:
  """`(I + N)^-1 rhs` per chunk, `N = tril_strict(diag(beta) k k^T * decay)`: the UT transform
  that turns C sequential delta-rule writes into matmuls. `k [..., C, Dk]`, `rhs [..., C, F]`.

  N is strictly lower triangular, so nilpotent (`N^C = 0`), and the inverse is the finite
  product `(I - N)(I + N^2)(I + N^4)...` over the powers below C: log2(C) squarings, matmuls
  only. (XLA:CPU's triangular solve, a LAPACK call, took most of a chunked pass's time and hung
  inside a train step.)"""
  system = (beta[..., None] * k) @ jnp.swapaxes(k, -1, -2) * decay  # [..., C, C]
  power = -jnp.where(_lower(k.shape[-2], strict=True), system, 0.0)  # -N: (I + N)^-1 = sum (-N)^i
  out = rhs + power @ rhs  # (I - N) rhs
  for _ in range(max(0, (k.shape[-2] - 1).bit_length() - 1)):
    power = power @ power  # (-N)^(2^j)
    out = out + power @ out
  return out


def delta_rule_chunked(
  q: Array,
  k: Array,
  v: Array,
  beta: Array,
  g: Array | None = None,
  *,
  chunk_size: int = 64,
  initial_state: Array | None = None,
  l2_norm: bool = False,
) -> tuple[Array, Array]:
  """The delta rule chunk by chunk (Yang et al. 2024's WY/UT form, with Gated DeltaNet's decay):
  the same function as `delta_rule_recurrent`, in T/C sequential steps of matmuls.

  Within a chunk, with `c` the cumulative log-decay from its start and `Γ_ij = exp(c_i - c_j)`
  (j <= i), the UT transform `A = (I + tril_strict(diag(β) K Kᵀ ⊙ Γ))^-1` gives the chunk's
  pseudo-values `U = A diag(β) V` and decayed keys `W = A diag(β) exp(c) K`; from the state S
  entering it, the writes are `U - W S`, the outputs `exp(c) Q S + (Q Kᵀ ⊙ Γ)(U - W S)` and the
  state leaving it `exp(c_C) S + (exp(c_C - c) K)ᵀ (U - W S)`. T is padded with zero keys and
  write strengths to a multiple of C, which leave the state unchanged.

  Args: as `delta_rule_recurrent`, and `chunk_size` C (64, as Qwen3-Next's).

  Returns:
    `(outputs [B, H, T, Dv] in v's dtype, the final state [B, H, Dk, Dv])`.
  """
  if not isinstance(chunk_size, int) or chunk_size < 1:
    raise ValueError(f'chunk_size must be a positive integer; got {chunk_size!r}.')
  q, k, v32, beta, g = _prepare(q, k, v, beta, g, l2_norm)
  state = _initial(initial_state, k, v32)
  length = v.shape[-2]
  chunk = min(chunk_size, length)
  pad = -length % chunk
  pad_seq = lambda x, axis: jnp.pad(x, [(0, pad) if a == axis else (0, 0) for a in range(x.ndim)])
  q, k, v32 = (pad_seq(x, x.ndim - 2) for x in (q, k, v32))
  beta, g = (pad_seq(x, x.ndim - 1) for x in (beta, g))
  split = lambda x: x.reshape(*x.shape[:-2], -1, chunk, x.shape[-1])  # [B, H, T/C, C, D]
  q, k, v32 = split(q), split(k), split(v32)
  beta, g = (x.reshape(*x.shape[:-1], -1, chunk) for x in (beta, g))  # [B, H, T/C, C]
  cum = jnp.cumsum(g, axis=-1)  # [B, H, T/C, C]
  decay = _pairwise_decay(cum)  # [B, H, T/C, C, C]
  rhs = jnp.concatenate([v32, k * jnp.exp(cum)[..., None]], axis=-1) * beta[..., None]
  solved = _ut_solve(k, beta, decay, rhs)  # [B, H, T/C, C, Dv + Dk]
  u, w = solved[..., : v32.shape[-1]], solved[..., v32.shape[-1] :]
  intra = q @ jnp.swapaxes(k, -1, -2) * decay  # [B, H, T/C, C, C]
  q_read = q * jnp.exp(cum)[..., None]  # [B, H, T/C, C, Dk]
  k_write = k * jnp.exp(cum[..., -1:] - cum)[..., None]
  chunk_decay = jnp.exp(cum[..., -1])[..., None, None]  # [B, H, T/C, 1, 1]

  def step(state, inputs):
    u_c, w_c, intra_c, q_c, k_c, decay_c = inputs  # one chunk, [B, H, C, ...]
    writes = u_c - w_c @ state  # [B, H, C, Dv]
    out = q_c @ state + intra_c @ writes
    return state * decay_c + jnp.swapaxes(k_c, -1, -2) @ writes, out

  chunks = [jnp.moveaxis(x, -3, 0) for x in (u, w, intra, q_read, k_write, chunk_decay)]
  state, out = jax.lax.scan(step, state, chunks)  # [T/C, B, H, C, Dv]
  out = jnp.moveaxis(out, 0, -3).reshape(*v.shape[:-2], -1, v.shape[-1])  # [B, H, T+pad, Dv]
  return out[..., :length, :].astype(v.dtype), state


def delta_rule_step(
  state: Array,
  q: Array,
  k: Array,
  v: Array,
  beta: Array,
  g: Array | None = None,
  *,
  chunk_size: int = 64,
  l2_norm: bool = False,
) -> tuple[Array, Array]:
  """A decoding update: the T new tokens (T = 1 token by token, a prompt when prefilling) read
  and update the fixed-size `state [B, H, Dk, Dv]`; one token by the recurrence, a block
  chunked. Shapes as `delta_rule_recurrent`. Returns `(outputs [B, H, T, Dv], the new state)`."""
  if v.shape[-2] == 1:
    return delta_rule_recurrent(q, k, v, beta, g, initial_state=state, l2_norm=l2_norm)
  return delta_rule_chunked(
    q, k, v, beta, g, chunk_size=chunk_size, initial_state=state, l2_norm=l2_norm
  )


def delta_rule_weights(
  q: Array, k: Array, beta: Array, g: Array | None = None, *, l2_norm: bool = False
) -> Array:
  """The attention form from a zero state: `W [B, H, T, T]`, lower triangular, such that the
  delta rule's outputs are `W @ v` (`delta_rule_recurrent(q, k, v, beta, g)[0]`). It is the
  chunked form with one chunk: `W = (Q Kᵀ ⊙ Γ) (I + tril_strict(diag(β) K Kᵀ ⊙ Γ))^-1 diag(β)`.
  Unlike softmax weights, rows need not be positive or sum to 1. O(T^2 Dk + T^3)."""
  values = jnp.zeros((*beta.shape, 1), q.dtype)  # only the heads' count and length are read
  q, k, _, beta, g = _prepare(q, k, values, beta, g, l2_norm)
  decay = _pairwise_decay(jnp.cumsum(g, axis=-1))  # [B, H, T, T]
  written = _ut_solve(k, beta, decay, jnp.eye(k.shape[-2]) * beta[..., None, :])  # A diag(β)
  return (q @ jnp.swapaxes(k, -1, -2) * decay) @ written


# The variant's contract (`attention.variants.Variant`): `beta` and `decay` (= g) arrive as the
# options of that name; queries and keys are taken as they are (a layer normalises them first).


def _check_options(mask: Array | None, is_causal: bool, beta: Array | None) -> None:
  if not is_causal or mask is not None:
    raise ValueError(
      'The delta rule is causal and reads no mask (it is a recurrence over the tokens); got '
      f'is_causal={is_causal} and mask={None if mask is None else mask.shape}.'
    )
  if beta is None:
    raise ValueError('The delta rule needs the option beta, the write strengths [B, H, T].')


def gated_delta_attend(
  q: Array,
  k: Array,
  v: Array,
  *,
  mask: Array | None = None,
  is_causal: bool = False,
  beta: Array | None = None,
  decay: Array | None = None,
) -> Array:
  """The gated delta rule over a whole sequence from a zero state, chunked: `[B, H, T, Dv]`
  (`decay` = the log-decay g; None = plain DeltaNet). Causal only, no mask: ValueError else."""
  _check_options(mask, is_causal, beta)
  return delta_rule_chunked(q, k, v, beta, decay)[0]


def gated_delta_weights(
  q: Array,
  k: Array,
  *,
  mask: Array | None = None,
  is_causal: bool = False,
  beta: Array | None = None,
  decay: Array | None = None,
) -> Array:
  """`gated_delta_attend`'s attention form `[B, H, T, T]` (`delta_rule_weights`)."""
  _check_options(mask, is_causal, beta)
  return delta_rule_weights(q, k, beta, decay)


def delta_attend(
  q: Array,
  k: Array,
  v: Array,
  *,
  mask: Array | None = None,
  is_causal: bool = False,
  beta: Array | None = None,
) -> Array:
  """Plain DeltaNet's `gated_delta_attend`: nothing decays."""
  return gated_delta_attend(q, k, v, mask=mask, is_causal=is_causal, beta=beta)


def delta_weights(
  q: Array,
  k: Array,
  *,
  mask: Array | None = None,
  is_causal: bool = False,
  beta: Array | None = None,
) -> Array:
  """Plain DeltaNet's attention form `[B, H, T, T]`."""
  return gated_delta_weights(q, k, mask=mask, is_causal=is_causal, beta=beta)


def init_delta_state(
  batch: int,
  kv_heads: int,
  d_k: int,
  d_v: int,
  *,
  max_length: int,
  window: int,
  sink_tokens: int,
  dtype: Any,
) -> dict[str, Array]:
  """`{'state': zeros [B, H, Dk, Dv]}` (`kv_heads` = H, the value heads), float32 whatever the
  length or the cache's dtype: a fixed-size memory that every token rewrites."""
  del max_length, window, sink_tokens, dtype
  return {'state': jnp.zeros((batch, kv_heads, d_k, d_v), jnp.float32)}


def delta_step(
  state: dict[str, Array],
  q: Array,
  k: Array,
  v: Array,
  step: Array,
  *,
  window: int,
  sink_tokens: int,
  attend_at: Callable[..., Array],
  options: dict[str, Any],
) -> tuple[Array, dict[str, Array]]:
  """Positions `step ..` of q, k, v from the state, which takes them in (`delta_rule_step`);
  `options['beta']` and `options.get('decay')` are theirs, `[B, H, T]`."""
  del step, window, sink_tokens, attend_at  # the state holds everything before this block
  _check_options(None, True, options.get('beta'))
  out, new = delta_rule_step(state['state'], q, k, v, options['beta'], options.get('decay'))
  return out, {'state': new.astype(state['state'].dtype)}
