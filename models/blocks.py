"""Transformer blocks: encoder and decoder layers and stacks of them, built from a `StackConfig`.

Every Transformer-family model (the encoder-decoder Transformer, the classifier, the language
models, the ViT, the captioner's decoder) builds on these. Shapes: `x`/`y` `[B, T, D]`, memory
`[B, S, D]`. Each attention layer's weights, `[B, N, T, S]`, are read by capture
(`models.interventions`) as `<layer path>/self_attn/weights` and `.../cross_attn/weights`.

Each layer also taps its residual stream, `[B, T, D]`, under TransformerLens's names (its
`TransformerBlock` and, for the decoder layer's three sublayers, its `T5Block`): `resid_pre`
(the stream the layer reads), `attn_out` (what self-attention adds to it), `resid_mid` (the
stream after self-attention), in a `DecoderLayer` `cross_attn_out` and `resid_mid_cross` (the
same for cross-attention), `mlp_out` (what the feed-forward sublayer adds), and `residual` (the
stream the layer passes on: TransformerLens's `resid_post`). A sublayer's output is tapped as it
is added: after a sandwich norm's post-norm (as TransformerLens's Gemma 2 block takes
`hook_attn_out`, "that which is added to the residual stream") and after dropout. In a post-norm
layer the streams are taken after the norm that ends each sublayer, i.e. what the next sublayer
reads (TransformerLens's BERT block hooks `resid_mid` and `resid_post` before that norm). The
decoding steps tap nothing.
"""

from collections.abc import Sequence
from typing import Any, Callable

from flax import nnx
import jax

from models import interventions
from models.attention_layer import MultiHeadAttention
from models.delta_net import DeltaNet
from models.latent_attention import LatentAttention
from models.layers import FeedForward, RMSNorm
from models.mechanism_config import DELTA_RULE
from models.stack_config import StackConfig

Array = jax.Array
EPS = 1e-6  # every LayerNorm of the Transformer families, unless a `StackConfig.norm_eps` says


class _Block(nnx.Module):
  """Shared residual wiring of the encoder and decoder layers."""

  def __init__(self, stack: StackConfig, *, num_sublayers: int, rngs: nnx.Rngs):
    self.norm = stack.norm
    self.norms = nnx.List([make_norm(stack, rngs=rngs) for _ in range(num_sublayers)])
    self.post_norms = (
      nnx.List([make_norm(stack, rngs=rngs) for _ in range(num_sublayers)])
      if stack.sandwich_norm
      else None
    )
    self.dropout = nnx.Dropout(stack.dropout_rate)

  def residual(
    self,
    i: int,
    x: Array,
    fn: Callable[[Array], tuple[Array, Any]],
    *,
    tap: str | None = None,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> tuple[Array, Any]:
    """Sublayer `i` around `fn: x -> (out, aux)`; returns `(new x, aux)`.

    Post-norm is the paper's `LayerNorm(x + Dropout(fn(x)))`; pre-norm is
    `x + Dropout(fn(LayerNorm(x)))`, which keeps an identity path from input to output and trains
    stably without learning-rate warm-up (Xiong et al. 2020). A sandwich norm normalises `fn`'s
    output too, `x + Dropout(post_norm(fn(LayerNorm(x))))` (Gemma 2 and 3). `tap` names what is
    added to the stream, `Dropout(...)` (None: no tap, for the decoding steps).
    """
    if self.norm == 'pre':
      out, aux = fn(self.norms[i](x))
      if self.post_norms is not None:
        out = self.post_norms[i](out)
    else:
      out, aux = fn(x)
    out = self.dropout(out, deterministic=deterministic, rngs=rngs)  # [B, T, D]
    if tap is not None:
      out = interventions.tap(self, tap, out)
    return (x + out if self.norm == 'pre' else self.norms[i](x + out)), aux


class EncoderLayer(_Block):
  """Self-attention then feed-forward, each wrapped by `residual`.

  Bidirectional in the encoders; with `is_causal` (and `decode_step`) it is the layer of a
  decoder-only language model.
  """

  def __init__(self, stack: StackConfig, *, rngs: nnx.Rngs):
    super().__init__(stack, num_sublayers=2, rngs=rngs)
    self.self_attn = self_attention(stack, rngs=rngs)
    self.ffn = feed_forward(stack, rngs=rngs)

  def __call__(
    self,
    x: Array,
    mask: Array | None,
    *,
    is_causal: bool = False,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """`x [B, S, D]`, key mask `[B, 1, 1, S]` or None -> `x`."""
    run = dict(deterministic=deterministic, rngs=rngs)
    x = interventions.tap(self, 'resid_pre', x)
    attend = lambda h: (self.self_attn(h, mask=mask, is_causal=is_causal, **run), None)
    x, _ = self.residual(0, x, attend, tap='attn_out', **run)
    x = interventions.tap(self, 'resid_mid', x)
    x, _ = self.residual(1, x, lambda h: (self.ffn(h), None), tap='mlp_out', **run)
    return interventions.tap(self, 'residual', x)  # the stream after it: resid_post

  def decode_step(
    self, x: Array, cache: dict[str, Array], step: Array
  ) -> tuple[Array, dict[str, Array]]:
    """Causal layer for positions `step ..` of `x [B, T, D]`; `cache`: its decoding state."""
    x, cache = self.residual(0, x, lambda h: self.self_attn.decode_step(h, cache, step))
    x, _ = self.residual(1, x, lambda h: (self.ffn(h), None))
    return x, cache


def encoder_stack(stack: StackConfig, *, rngs: nnx.Rngs) -> tuple[nnx.List, nnx.LayerNorm | None]:
  """`stack.num_layers` `EncoderLayer`s, and the final LayerNorm a pre-norm stack ends with
  (None for post-norm)."""
  layers = nnx.List(
    [EncoderLayer(stack.layer_config(i), rngs=rngs) for i in range(stack.num_layers)]
  )
  return layers, final_norm(stack, rngs=rngs)


def self_attention(stack: StackConfig, *, rngs: nnx.Rngs) -> nnx.Module:
  """The self-attention sublayer a layer's configuration asks for: every variant of
  `attention.VARIANTS` runs in `MultiHeadAttention`, but for the two that need a layer of their
  own. Each has the same methods (`__call__`, `init_cache`, `decode_step`) and the module path
  `self_attn`, so a stack, its decoding and its taps do not ask which one runs."""
  if stack.kv_lora_rank:  # multi-head latent attention (and DeepSeek Sparse Attention)
    return LatentAttention(stack, rngs=rngs)
  if stack.attention in DELTA_RULE:  # (gated) DeltaNet: a recurrence with its own projections
    return DeltaNet(stack, rngs=rngs)
  return MultiHeadAttention(stack, rngs=rngs)


def final_norm(stack: StackConfig, *, rngs: nnx.Rngs) -> nnx.Module | None:
  """The norm a pre-norm stack ends with; None for post-norm."""
  return make_norm(stack, rngs=rngs) if stack.norm == 'pre' else None


def make_norm(stack: StackConfig, *, rngs: nnx.Rngs) -> nnx.Module:
  """One of the stack's norms over D: a LayerNorm, or an RMSNorm (`norm_type='rmsnorm'`; scaling
  by 1 + w with `norm_plus_one`)."""
  if stack.norm_type == 'rmsnorm':  # norm_plus_one needs it (StackConfig checks)
    return RMSNorm(stack.d_model, epsilon=stack.norm_eps, plus_one=stack.norm_plus_one)
  return nnx.LayerNorm(stack.d_model, epsilon=stack.norm_eps, rngs=rngs)


def feed_forward(stack: StackConfig, *, rngs: nnx.Rngs) -> FeedForward:
  """The stack's feed-forward sublayer."""
  return FeedForward(
    stack.d_model,
    stack.d_ff,
    activation=stack.activation,
    gated=stack.gated_mlp,
    use_bias=stack.mlp_bias,
    rngs=rngs,
  )


class DecoderLayer(_Block):
  """Masked self-attention, cross-attention to the encoder memory, feed-forward."""

  def __init__(self, stack: StackConfig, *, rngs: nnx.Rngs):
    super().__init__(stack, num_sublayers=3, rngs=rngs)
    self.self_attn = MultiHeadAttention(stack, rngs=rngs)
    self.cross_attn = MultiHeadAttention(stack.cross_attention(), rngs=rngs)
    self.ffn = feed_forward(stack, rngs=rngs)

  def __call__(
    self,
    y: Array,
    memory: Array,
    source_mask: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """`y [B, T, D]`, `memory [B, S, D]`, `source_mask [B, 1, 1, S]` -> `y`.

    Self-attention is causal only: with right padding a real position never sees a padded one,
    and `decode_step`, which cannot know future padding, then computes exactly the same function.
    """
    run = dict(deterministic=deterministic, rngs=rngs)
    y = interventions.tap(self, 'resid_pre', y)
    attend = lambda h: (self.self_attn(h, is_causal=True, **run), None)
    y, _ = self.residual(0, y, attend, tap='attn_out', **run)
    y = interventions.tap(self, 'resid_mid', y)
    cross = lambda h: (self.cross_attn(h, memory, mask=source_mask, **run), None)
    y, _ = self.residual(1, y, cross, tap='cross_attn_out', **run)
    y = interventions.tap(self, 'resid_mid_cross', y)
    y, _ = self.residual(2, y, lambda h: (self.ffn(h), None), tap='mlp_out', **run)
    return interventions.tap(self, 'residual', y)  # the stream after it: resid_post

  def decode_step(
    self, y: Array, cache: dict[str, Any], step: Array, source_mask: Array
  ) -> tuple[Array, dict[str, Any]]:
    """One position `y [B, 1, D]`; `cache` holds this layer's `'self'` state and `'cross'` K/V."""
    y, self_kv = self.residual(0, y, lambda h: self.self_attn.decode_step(h, cache['self'], step))
    y, _ = self.residual(
      1, y, lambda h: (self.cross_attn.attend_kv(h, cache['cross'], mask=source_mask), None)
    )
    y, _ = self.residual(2, y, lambda h: (self.ffn(h), None))
    return y, {'self': self_kv, 'cross': cache['cross']}


def run_decoder(
  layers: Sequence[DecoderLayer],
  y: Array,
  memory: Array,
  memory_mask: Array | None,
  *,
  deterministic: bool = True,
  rngs: nnx.Rngs | None = None,
) -> Array:
  """Teacher-forced `y [B, T, D]` through `DecoderLayer`s reading `memory [B, S, D]`.

  A function over the layers, as are the two below, so that models which hold a decoder stack
  under their own attribute names (their checkpoint paths) share its loops. `memory_mask`
  broadcasts to `[B, N, T, S]` or is None. Returns y (no final norm).
  """
  for layer in layers:
    y = layer(y, memory, memory_mask, deterministic=deterministic, rngs=rngs)
  return y


def init_decoder_cache(
  layers: Sequence[DecoderLayer], memory: Array, max_length: int
) -> list[dict[str, Any]]:
  """Per layer: the empty `'self'` state (K/V `[B, K, max_length, H]` for softmax attention) and
  `'cross'` K/V `[B, K, S, H]`."""
  return [
    {
      'self': layer.self_attn.init_cache(memory.shape[0], max_length),
      'cross': layer.cross_attn.project_kv(memory),
    }
    for layer in layers
  ]


def decoder_step(
  layers: Sequence[DecoderLayer],
  y: Array,
  cache: list[dict[str, Any]],
  step: Array,
  memory_mask: Array | None,
) -> tuple[Array, list[dict[str, Any]]]:
  """Position `step`, `y [B, 1, D]`, through the layers; returns `(y, cache)` (no final norm)."""
  new_cache = []
  for layer, layer_cache in zip(layers, cache):
    y, layer_cache = layer.decode_step(y, layer_cache, step, memory_mask)
    new_cache.append(layer_cache)
  return y, new_cache
