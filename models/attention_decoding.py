"""Decoding of a multi-head attention layer: `AttentionDecoding`, the base of
`models.attention_layer.MultiHeadAttention` that holds its decoding state and its cached steps.

A step projects the new positions' queries, keys and values once (`_project_self`), hands them
to the variant's `step` (`attention.VARIANTS`), which reads and updates the state, and attends
through `_attend_at`, the layer's own variant over keys at explicit positions, so that a cached
step attends as the whole sequence does. A cache a press evicted from runs `_attend_kept`.
"""

import jax
import jax.numpy as jnp

import attention
from models import interventions
from models.attention_options import AttentionOptions
from models.layers import merge_project_heads

Array = jax.Array


class AttentionDecoding(AttentionOptions):
  """The decoding methods of a layer that also has `_project_self(x, positions)`, `_gate(x, out)`
  and `_options()` (`models.attention_layer.MultiHeadAttention`)."""

  def _attend_at(
    self, q: Array, keys: Array, values: Array, q_positions: Array, k_positions: Array
  ) -> Array:
    """The variant's causal attention of `q [B, N, T, H]` over cached keys at explicit positions
    (decoding). Visibility (causal, the window, empty slots) and position biases come from the
    positions."""
    options = self._options()
    options.pop('window', None)  # in the mask below
    if self.config.position_bias is not None:
      options['bias'] = self._position_bias(q_positions, k_positions, causal=True)
    self._kept_rotary(options, q_positions, k_positions)
    return self.variant.attend(
      q,
      keys.astype(q.dtype),
      values.astype(q.dtype),
      mask=attention.window_mask(
        q_positions, k_positions, self.config.window, self.config.sink_tokens
      ),
      **options,
    )

  def _attend_kept(self, q: Array, keys: Array, values: Array, mask: Array) -> Array:
    """The variant over an evicted cache's slots, visibility given whole by `mask [B, N, T, L]`
    (a press runs only on layers with no window and no position bias:
    `models.compression.check_press`)."""
    if self.config.attention == 'differential':
      # A pair of heads reads the values of two key/value heads at one slot; a press keeps
      # slots per head.
      raise ValueError("A press cannot evict from attention='differential' layers.")
    options = self._options()
    options.pop('window', None)
    return self.variant.attend(
      q, keys.astype(q.dtype), values.astype(q.dtype), mask=mask, **options
    )

  def init_cache(self, batch_size: int, max_length: int) -> dict[str, Array]:
    """The variant's empty decoding state for `max_length` positions (see `attention.variants`):
    K/V buffers `[B, K, L, H]` in `cache_dtype`, a ring of `window` slots, or running sums."""
    # Linear attention sums over features: Hedgehog's map has two per column of its W.
    features = self.d_k if self.query_features is None else 2 * self.d_k
    return self.variant.init_state(
      batch_size,
      self.num_kv_heads,
      features,
      self.d_v,
      max_length=max_length,
      window=self.config.window,
      sink_tokens=self.config.sink_tokens,
      dtype=jnp.dtype(self.config.cache_dtype),
    )

  def decode_step(
    self, x: Array, cache: dict[str, Array], step: Array
  ) -> tuple[Array, dict[str, Array]]:
    """Causal self-attention for new positions, without recomputing the earlier ones.

    Args:
      x: the inputs at positions `step .. step+T-1`, `[B, T, D]`: T = 1 when decoding token by
        token, a whole prompt when prefilling the cache in one parallel pass.
      cache: the state from `init_cache` after positions `0 .. step-1`.
      step: int32 scalar, the 0-based position of x's first row; may be traced.

    Returns:
      `(output [B, T, D], the state after positions step .. step+T-1)`; no dropout.
    """
    positions = step + jnp.arange(x.shape[1])  # [T]
    q, new = self._project_self(x, positions)  # [B, N|K, T, H]
    # What a press scores a prefill by (read by `models.compression.prefill`, scored by
    # `attention.presses`); a no-op outside a capture.
    q = interventions.tap(self, 'queries', q)
    if 'positions' in cache:  # a cache a press evicted from: slots at explicit positions
      out, cache = attention.kept_step(cache, q, new['k'], new['v'], step, attend=self._attend_kept)
    else:
      out, cache = self.variant.step(
        cache,
        q,
        new['k'],
        new['v'],
        step,
        window=self.config.window,
        sink_tokens=self.config.sink_tokens,
        attend_at=self._attend_at,
        options=self._options(),
      )
    out = self._gate(x, out.astype(x.dtype))  # [B, N, T, d_v]
    return merge_project_heads(self.w_o, out), cache
