"""Transformer blocks: encoder and decoder layers, stacks of them, and the checks they share.

Every Transformer-family model (the encoder-decoder Transformer, the classifier, the language
models, the ViT, the captioner's decoder) builds on these. Shapes: `x`/`y` `[B, T, D]`, memory
`[B, S, D]`, attention weights `[B, N, T, S]` per layer (N heads).
"""

from collections.abc import Sequence
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import nnx

from models.embeddings import POSITIONS
from models.layers import (ACTIVATIONS, FeedForward, MultiHeadAttention, check_attention_args,
                           check_choice)

Array = jax.Array
NORMS = ("post", "pre")
EPS = 1e-6  # every LayerNorm of the Transformer families


def check_stack_args(*, d_model: int, num_heads: int, d_k: int | None, d_v: int | None, score: str,
                     attention_impl: str | None, norm: str, activation: str, positions: str,
                     valid_positions: tuple[str, ...] = POSITIONS) -> None:
  """Raises ValueError, naming the field, on settings no stack of `EncoderLayer`s can take.

  `valid_positions` are the `positions` the model supports; `'rope'` (rotary attention, for models
  that take it) needs an even d_k.
  """
  check_choice("positions", positions, valid_positions)
  check_attention_args(d_model, num_heads, d_k, d_v, score, attention_impl,
                       implementation_field="attention_impl", rotary=positions == "rope")
  check_choice("norm", norm, NORMS)
  check_choice("activation", activation, ACTIVATIONS)
  if positions == "sinusoidal" and d_model % 2:
    raise ValueError(f"d_model must be even for positions='sinusoidal'; got {d_model}.")


class _Block(nnx.Module):
  """Shared residual wiring of the encoder and decoder layers."""

  def __init__(self, d_model: int, *, num_sublayers: int, norm: str, dropout_rate: float,
               rngs: nnx.Rngs):
    self.norm = norm
    self.norms = nnx.List([nnx.LayerNorm(d_model, epsilon=EPS, rngs=rngs)
                           for _ in range(num_sublayers)])
    self.dropout = nnx.Dropout(dropout_rate)

  def residual(self, i: int, x: Array, fn: Callable[[Array], tuple[Array, Any]], *,
               deterministic: bool = True, rngs: nnx.Rngs | None = None) -> tuple[Array, Any]:
    """Sublayer `i` around `fn: x -> (out, aux)`; returns `(new x, aux)`.

    Post-norm is the paper's `LayerNorm(x + Dropout(fn(x)))`; pre-norm is
    `x + Dropout(fn(LayerNorm(x)))`, which keeps an identity path from input to output and trains
    stably without learning-rate warm-up (Xiong et al. 2020).
    """
    if self.norm == "pre":
      out, aux = fn(self.norms[i](x))
      return x + self.dropout(out, deterministic=deterministic, rngs=rngs), aux
    out, aux = fn(x)
    return self.norms[i](x + self.dropout(out, deterministic=deterministic, rngs=rngs)), aux


class EncoderLayer(_Block):
  """Self-attention then feed-forward, each wrapped by `residual`.

  Bidirectional in the encoders; with `is_causal` (and `decode_step`) it is the layer of a
  decoder-only language model.
  """

  def __init__(self, d_model: int, d_ff: int, *, norm: str, activation: str,
               dropout_rate: float, attention_kwargs: dict[str, Any], rngs: nnx.Rngs):
    super().__init__(d_model, num_sublayers=2, norm=norm, dropout_rate=dropout_rate, rngs=rngs)
    self.self_attn = MultiHeadAttention(d_model, **attention_kwargs, rngs=rngs)
    self.ffn = FeedForward(d_model, d_ff, activation=activation, rngs=rngs)

  def __call__(self, x: Array, mask: Array | None, *, is_causal: bool = False,
               deterministic: bool = True, rngs: nnx.Rngs | None = None,
               return_weights: bool = False) -> tuple[Array, Array | None]:
    """`x [B, S, D]`, key mask `[B, 1, 1, S]` or None -> `(x, weights [B, N, S, S] or None)`."""
    run = dict(deterministic=deterministic, rngs=rngs)
    x, weights = self.residual(0, x, lambda h: self.self_attn(
        h, mask=mask, is_causal=is_causal, return_weights=return_weights, **run), **run)
    x, _ = self.residual(1, x, lambda h: (self.ffn(h), None), **run)
    return x, weights

  def decode_step(self, x: Array, cache: dict[str, Array], step: Array
                  ) -> tuple[Array, dict[str, Array]]:
    """Causal layer for positions `step ..` of `x [B, T, D]`; `cache`: this layer's K/V buffers."""
    x, cache = self.residual(0, x, lambda h: self.self_attn.decode_step(h, cache, step))
    x, _ = self.residual(1, x, lambda h: (self.ffn(h), None))
    return x, cache


def encoder_stack(num_layers: int, d_model: int, d_ff: int, *, norm: str, activation: str,
                  dropout_rate: float, attention_dropout_rate: float, rngs: nnx.Rngs,
                  **attention_kwargs: Any) -> tuple[nnx.List, nnx.LayerNorm | None]:
  """`num_layers` `EncoderLayer`s, and the final LayerNorm a pre-norm stack ends with (None for
  post-norm); `attention_kwargs` go to each layer's `MultiHeadAttention`."""
  attention_kwargs = dict(attention_kwargs, dropout_rate=attention_dropout_rate)
  layers = nnx.List([EncoderLayer(d_model, d_ff, norm=norm, activation=activation,
                                  dropout_rate=dropout_rate, attention_kwargs=attention_kwargs,
                                  rngs=rngs) for _ in range(num_layers)])
  return layers, nnx.LayerNorm(d_model, epsilon=EPS, rngs=rngs) if norm == "pre" else None


class DecoderLayer(_Block):
  """Masked self-attention, cross-attention to the encoder memory, feed-forward."""

  def __init__(self, d_model: int, d_ff: int, *, norm: str, activation: str,
               dropout_rate: float, attention_kwargs: dict[str, Any], rngs: nnx.Rngs):
    super().__init__(d_model, num_sublayers=3, norm=norm, dropout_rate=dropout_rate, rngs=rngs)
    self.self_attn = MultiHeadAttention(d_model, **attention_kwargs, rngs=rngs)
    self.cross_attn = MultiHeadAttention(d_model, **attention_kwargs, rngs=rngs)
    self.ffn = FeedForward(d_model, d_ff, activation=activation, rngs=rngs)

  def __call__(self, y: Array, memory: Array, source_mask: Array, *, deterministic: bool = True,
               rngs: nnx.Rngs | None = None, return_weights: bool = False
               ) -> tuple[Array, tuple[Array | None, Array | None]]:
    """`y [B, T, D]`, `memory [B, S, D]`, `source_mask [B, 1, 1, S]` -> `(y, (self_w, cross_w))`.

    Self-attention is causal only: with right padding a real position never sees a padded one,
    and `decode_step`, which cannot know future padding, then computes exactly the same function.
    """
    run = dict(deterministic=deterministic, rngs=rngs)
    y, self_w = self.residual(0, y, lambda h: self.self_attn(
        h, is_causal=True, return_weights=return_weights, **run), **run)
    y, cross_w = self.residual(1, y, lambda h: self.cross_attn(
        h, memory, mask=source_mask, return_weights=return_weights, **run), **run)
    y, _ = self.residual(2, y, lambda h: (self.ffn(h), None), **run)
    return y, (self_w, cross_w)

  def decode_step(self, y: Array, cache: dict[str, Any], step: Array,
                  source_mask: Array) -> tuple[Array, dict[str, Any]]:
    """One position `y [B, 1, D]`; `cache` holds this layer's `'self'` and `'cross'` K/V."""
    y, self_kv = self.residual(0, y, lambda h: self.self_attn.decode_step(h, cache["self"], step))
    y, _ = self.residual(1, y, lambda h: self.cross_attn.attend_kv(h, cache["cross"],
                                                                   mask=source_mask))
    y, _ = self.residual(2, y, lambda h: (self.ffn(h), None))
    return y, {"self": self_kv, "cross": cache["cross"]}


def run_decoder(layers: Sequence[DecoderLayer], y: Array, memory: Array,
                memory_mask: Array | None, *, deterministic: bool = True,
                rngs: nnx.Rngs | None = None, return_weights: bool = False
                ) -> tuple[Array, dict[str, Array] | None]:
  """Teacher-forced `y [B, T, D]` through `DecoderLayer`s reading `memory [B, S, D]`.

  A function over the layers, as are the two below, so that models which hold a decoder stack
  under their own attribute names (their checkpoint paths) share its loops. `memory_mask`
  broadcasts to `[B, N, T, S]` or is None. Returns `(y` (no final norm),
  `{'decoder_self': [B, L, N, T, T], 'cross': [B, L, N, T, S]}` or None).
  """
  self_ws, cross_ws = [], []
  for layer in layers:
    y, (self_w, cross_w) = layer(y, memory, memory_mask, deterministic=deterministic, rngs=rngs,
                                 return_weights=return_weights)
    self_ws.append(self_w)
    cross_ws.append(cross_w)
  if not return_weights:
    return y, None
  return y, {"decoder_self": jnp.stack(self_ws, axis=1), "cross": jnp.stack(cross_ws, axis=1)}


def init_decoder_cache(layers: Sequence[DecoderLayer], memory: Array,
                       max_length: int) -> list[dict[str, Any]]:
  """Per layer: zeroed `'self'` K/V `[B, N, max_length, H]`, `'cross'` K/V `[B, N, S, H]`."""
  return [{"self": layer.self_attn.init_cache(memory.shape[0], max_length, memory.dtype),
           "cross": layer.cross_attn.project_kv(memory)} for layer in layers]


def decoder_step(layers: Sequence[DecoderLayer], y: Array, cache: list[dict[str, Any]],
                 step: Array, memory_mask: Array | None) -> tuple[Array, list[dict[str, Any]]]:
  """Position `step`, `y [B, 1, D]`, through the layers; returns `(y, cache)` (no final norm)."""
  new_cache = []
  for layer, layer_cache in zip(layers, cache):
    y, layer_cache = layer.decode_step(y, layer_cache, step, memory_mask)
    new_cache.append(layer_cache)
  return y, new_cache
