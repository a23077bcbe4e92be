"""The options a multi-head attention layer's configuration gives its attention variant.

`AttentionOptions` is the base class of `models.attention_layer.MultiHeadAttention` that turns
the layer's `AttentionConfig` and parameters into the keyword arguments of `attention.VARIANTS`'
functions: the scores of a registered score's per-head parameters, the kernel, soft-capping,
scale, sink and window, Hedgehog's feature maps, and the position biases (ALiBi, T5) and kept-token
rotations that depend on where queries and keys sit. Whole-sequence calls and decoding steps both
read them here, so that a decoding step attends as the whole sequence does.
"""

import functools
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp

import attention
from models.layers import score_param_attr

Array = jax.Array


class AttentionOptions(nnx.Module):
  """The variant's options of a layer that holds `config` (an `AttentionConfig`), `variant` (its
  `attention.Variant`), the parameters `sink`, `query_features`, `key_features` and
  `relative_bias` (each None where the configuration builds none) and one attribute per parameter
  of its registered score (`score_param_attr`)."""

  @property
  def registered_score(self) -> attention.Score:
    return attention.get_score(self.config.score)

  def _options(self) -> dict[str, Any]:
    """The variant's options this configuration sets that do not depend on positions: each one
    the variant declares (the configuration refused any other when it was made)."""
    config, options = self.config, {}
    if config.score != 'scaled_dot':
      options['scores'] = self._scores
    if config.attention_impl is not None:
      options['implementation'] = config.attention_impl
    if config.softcap:
      options['softcap'] = float(config.softcap)
    if config.query_scale is not None:
      options['scale'] = float(config.query_scale)
    if self.sink is not None:
      options['sink'] = self.sink[...]
    if config.window:
      options['window'] = config.window
    if self.query_features is not None:
      options['feature_weights'] = (self.query_features[...], self.key_features[...])
    return options

  def _position_options(
    self, t: int, s: int, positions: Array | None, is_causal: bool
  ) -> dict[str, Array]:
    """The position bias of a whole-sequence call of T queries and S keys, if any.

    ALiBi at the default positions goes to a variant that takes slopes as slopes, so the chunked
    kernel forms it block by block instead of as a `[N, T, S]` array.
    """
    bias = self.config.position_bias
    if bias is None:
      return {}
    slopes = 'alibi_slopes' in self.variant.options
    if bias == 'alibi' and slopes and positions is None and not self.config.sink_tokens:
      return {'alibi_slopes': attention.alibi_slopes(self.config.num_heads)}
    q_positions, k_positions = self._whole_positions(t, s, positions)
    return {'bias': self._position_bias(q_positions, k_positions, causal=is_causal)}

  def _kept_rotary(self, options: dict[str, Any], q_positions: Array, k_positions: Array) -> None:
    """With rope and kept first tokens, `options['scores']` scores each kept key from where a
    streaming cache's query sits (`attention.kept_rotary_scores`); other positions: no change."""
    config = self.config
    if config.positions != 'rope' or not config.sink_tokens:
      return
    scores = options.get('scores')
    if scores is None:  # the scaled dot product, as the kernels would form it
      scores = functools.partial(attention.scaled_dot_scores, scale=options.pop('scale', None))
    options['scores'] = attention.kept_rotary_scores(
      scores,
      q_positions,
      k_positions,
      config.window,
      config.sink_tokens,
      base=config.rope_base,
      layout=config.rope_layout,
    )

  @staticmethod
  def _whole_positions(t: int, s: int, positions: Array | None) -> tuple[Array, Array]:
    """Query and key positions of a whole-sequence call (self-attention keys share `positions`)."""
    if positions is None:
      return jnp.arange(t), jnp.arange(s)
    return jnp.asarray(positions), jnp.asarray(positions)

  def _position_bias(self, q_positions: Array, k_positions: Array, *, causal: bool) -> Array:
    """ALiBi or T5 bias `[..., N, T, S]` for queries and keys at the given positions (the kept
    first tokens at their offsets in a streaming cache, `attention.cache_offsets`)."""
    window, sink_tokens = self.config.window, self.config.sink_tokens
    if sink_tokens:
      relative = attention.cache_offsets(q_positions, k_positions, window, sink_tokens)
    else:
      relative = attention.relative_positions(q_positions, k_positions)
    if self.config.position_bias == 'alibi':
      return attention.alibi_bias_at(attention.alibi_slopes(self.config.num_heads), relative)
    return attention.t5_bias_at(self.relative_bias[...], relative, bidirectional=not causal)

  def _scores(self, q: Array, k: Array) -> Array:
    """The registered score of q `[B, N, T, H]` and k `[B, N, S, H]`, `[B, N, T, S]`."""
    params = {
      param.name: getattr(self, score_param_attr(param.name))[...]
      for param in self.registered_score.params
    }  # each [N, ...]
    # Per-head parameters lead with N; vmap pairs them with the heads axis (-3) of q and k.
    per_head = lambda q, k, params: self.registered_score(q, k, **params)
    return jax.vmap(per_head, in_axes=(-3, -3, 0), out_axes=-3)(q, k, params)
