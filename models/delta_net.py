"""A delta-rule token mixer: Gated DeltaNet (Yang et al. 2025) as Qwen3-Next's linear-attention
layers have it, or plain DeltaNet (Yang et al. 2024), in place of self-attention.

Shapes: inputs `[B, T, D]`; inside, query/key heads `[B, Hk, T, Dk]`, value heads `[B, H, T, Dv]`
with Hk dividing H (value head h reads key head `h // (H / Hk)`).
"""

import math

from flax import nnx
import jax
import jax.numpy as jnp

import attention
from models import interventions
from models.layers import RMSNorm, dense, merge_project_heads
from models.mechanism_config import DELTA_RULE
from models.stack_config import AttentionConfig

Array = jax.Array
State = dict[str, Array]


class DeltaNet(nnx.Module):
  """Qwen3-Next's Gated DeltaNet block: `W_O(norm(o) * silu(z))` per head, with `o` the gated
  delta rule (`attention.delta_rule`) over

  - queries, keys and values `x W_Q`, `x W_K`, `x W_V` (no biases), each through one depthwise
    causal convolution of width `conv_size` (`conv [W, C]`, no bias) and SiLU, queries and keys
    then L2-normalised in float32 (queries also scaled by `Dk^-1/2` in the kernel);
  - write strengths `beta = sigmoid(x W_B)` and, gated, log-decays
    `g = -exp(a_log) * softplus(x W_A + dt_bias)` per value head (`a_log`, `dt_bias [H]`);
    plain DeltaNet (`attention='deltanet'`) has neither, so nothing decays;
  - `z = x W_Z`, the output gate, through a per-head RMSNorm with a learned scale (`norm`).

  Sizes: H = `delta_heads or num_heads` value heads, Hk = `delta_key_heads or H` query/key
  heads, Dk = `delta_key_dim or head_size`, Dv = `delta_value_dim or value_size`. Causal only:
  a whole sequence runs chunked, decoding steps from the cache `{'conv': the last W-1
  projected inputs [B, W-1, C], 'state': [B, H, Dk, Dv]}`. The methods are MultiHeadAttention's,
  so a stack (`models.blocks.self_attention`) prefills and decodes without asking which runs.

  Taps (`models.interventions`): `queries`, `keys` (normalised), `values`, `weights` (the attention
  form `[B, H, T, T]`, inside a capture only; the output is then `weights @ values`) and `heads`
  `[B, H, T, Dv]`, the gated norm's per-head output before `W_O`.
  """

  def __init__(self, config: AttentionConfig, *, rngs: nnx.Rngs):
    """Builds the projections, the convolution and the gates the configuration needs."""
    if config.attention not in DELTA_RULE:
      raise ValueError(
        f'DeltaNet is the layer of attention in {DELTA_RULE}; got {config.attention!r}.'
      )
    self.config = config
    self.variant = attention.get_variant(config.attention)
    h = self.num_heads
    hk, dk, dv, d = self.num_key_heads, self.d_k, self.d_v, config.d_model
    project = lambda width: dense(d, width, use_bias=False, axes=('embed', 'heads'), rngs=rngs)
    self.w_q, self.w_k = project(hk * dk), project(hk * dk)
    self.w_v, self.w_z = project(h * dv), project(h * dv)
    self.w_b = project(h)
    width = config.conv_size
    bound = 1 / math.sqrt(width)  # torch's Conv1d default for a depthwise kernel of this width
    self.conv = nnx.Param(
      jax.random.uniform(rngs.params(), (width, self.channels), jnp.float32, -bound, bound)
    )
    if config.attention == 'gated_deltanet':
      self.w_a = project(h)
      # Mamba 2's start: decay rates A in [1, 16], step sizes dt log-uniform in [0.001, 0.1].
      self.a_log = nnx.Param(jnp.log(jax.random.uniform(rngs.params(), (h,), minval=1, maxval=16)))
      dt = jnp.exp(
        jax.random.uniform(rngs.params(), (h,), minval=math.log(1e-3), maxval=math.log(0.1))
      )
      self.dt_bias = nnx.Param(dt + jnp.log(-jnp.expm1(-dt)))  # softplus^-1(dt)
    else:
      self.w_a = self.a_log = self.dt_bias = None
    self.norm = RMSNorm(dv, epsilon=getattr(config, 'norm_eps', 1e-6))
    self.w_o = dense(h * dv, d, use_bias=False, axes=('heads', 'embed'), rngs=rngs)

  @property
  def num_heads(self) -> int:
    """The value heads H (each with its own state)."""
    return self.config.delta_heads or self.config.num_heads

  @property
  def channels(self) -> int:
    """The convolution's channels C: queries', keys' and values' features side by side."""
    return 2 * self.num_key_heads * self.d_k + self.num_heads * self.d_v

  @property
  def num_key_heads(self) -> int:
    return self.config.delta_key_heads or self.num_heads

  @property
  def d_k(self) -> int:
    return self.config.delta_key_dim or self.config.head_size

  @property
  def d_v(self) -> int:
    return self.config.delta_value_dim or self.config.value_size

  def _convolve(self, x: Array, past: Array) -> tuple[Array, Array]:
    """SiLU of the causal depthwise convolution of `x W_QKV [B, T, C]` after the `past [B, W-1,
    C]` inputs; returns it and the last W-1 inputs (the next call's past)."""
    qkv = jnp.concatenate([self.w_q(x), self.w_k(x), self.w_v(x)], axis=-1)  # [B, T, C]
    inputs = jnp.concatenate([past.astype(qkv.dtype), qkv], axis=1)  # [B, W-1+T, C]
    kernel, length = self.conv[...].astype(qkv.dtype), x.shape[1]
    mixed = sum(inputs[:, j : j + length] * kernel[j] for j in range(kernel.shape[0]))
    return jax.nn.silu(mixed), inputs[:, inputs.shape[1] - past.shape[1] :]

  def _heads(self, x: Array, past: Array) -> tuple[Array, Array, Array, dict[str, Array], Array]:
    """`(queries [B, Hk, T, Dk], keys, values [B, H, T, Dv], the variant's options, the conv's
    new past)` of `x [B, T, D]`; queries and keys L2-normalised."""
    mixed, past = self._convolve(x, past)
    qk = self.num_key_heads * self.d_k
    q, k, v = jnp.split(mixed, [qk, 2 * qk], axis=-1)
    q = attention.l2_normalize(attention.split_heads(q, self.num_key_heads))  # [B, Hk, T, Dk]
    k = attention.l2_normalize(attention.split_heads(k, self.num_key_heads))
    v = attention.split_heads(v, self.num_heads)  # [B, H, T, Dv]
    to_heads = lambda y: jnp.swapaxes(y, -1, -2)  # [B, T, H] -> [B, H, T]
    options = {'beta': to_heads(jax.nn.sigmoid(self.w_b(x)))}
    if self.w_a is not None:
      rate = jax.nn.softplus(self.w_a(x) + self.dt_bias[...])  # [B, T, H]
      options['decay'] = to_heads(-jnp.exp(self.a_log[...]) * rate)
    return q, k, v, options, past

  def _output(self, o: Array, x: Array) -> Array:
    """`W_O(norm(o) * silu(z))` of the delta rule's `o [B, H, T, Dv]`: `[B, T, D]`."""
    z = attention.split_heads(self.w_z(x), self.num_heads)  # [B, H, T, Dv]
    gated = self.norm(o) * jax.nn.silu(z.astype(jnp.promote_types(z.dtype, jnp.float32)))
    heads = interventions.tap(self, 'heads', gated.astype(x.dtype))
    return merge_project_heads(self.w_o, heads)  # [B, T, D]

  def __call__(
    self,
    x: Array,
    context: Array | None = None,
    *,
    positions: Array | None = None,
    mask: Array | None = None,
    is_causal: bool = False,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """The layer over a whole sequence `x [B, T, D]` -> `[B, T, D]`, chunked. Positions enter
    through the recurrence's order alone; there is no dropout."""
    del positions, deterministic, rngs
    if context is not None or mask is not None or not is_causal:
      raise ValueError(
        f'attention={self.config.attention!r} is a causal recurrence: it runs with '
        'is_causal=True, no mask and no context (not in an encoder or cross-attention).'
      )
    past = jnp.zeros((x.shape[0], self.config.conv_size - 1, self.channels), x.dtype)
    q, k, v, options, _ = self._heads(x, past)
    q, k = interventions.tap(self, 'queries', q), interventions.tap(self, 'keys', k)
    v = interventions.tap(self, 'values', v)
    if interventions.active():  # the attention form, so that an edit of it drives the output
      weights = self.variant.weights(q, k, is_causal=True, **options)  # [B, H, T, T]
      o = interventions.tap(self, 'weights', weights) @ v.astype(weights.dtype)
    else:
      o = self.variant.attend(q, k, v, is_causal=True, **options)  # [B, H, T, Dv]
    return self._output(o, x)

  def init_cache(self, batch_size: int, max_length: int) -> State:
    """The empty decoding cache (module docstring), float32, its size independent of
    `max_length`."""
    del max_length
    state = self.variant.init_state(
      batch_size,
      self.num_heads,
      self.d_k,
      self.d_v,
      max_length=0,
      window=0,
      sink_tokens=0,
      dtype=jnp.float32,
    )
    conv = jnp.zeros((batch_size, self.config.conv_size - 1, self.channels), jnp.float32)
    return {'conv': conv, **state}

  def decode_step(self, x: Array, cache: State, step: Array) -> tuple[Array, State]:
    """New positions `x [B, T, D]` (one token, or a prompt prefilled in one chunked pass) from
    the cache of the positions before; returns `(output [B, T, D], the updated cache)`."""
    q, k, v, options, past = self._heads(x, cache['conv'])
    q = interventions.tap(self, 'queries', q)
    o, state = self.variant.step(
      {'state': cache['state']},
      q,
      k,
      v,
      step,
      window=0,
      sink_tokens=0,
      attend_at=None,
      options=options,
    )
    return self._output(o, x), {'conv': past.astype(cache['conv'].dtype), **state}
