"""The part of the language models (`models.language`) that both share: token embeddings,
positions and a stack of the Transformer's `EncoderLayer`s, run causally or bidirectionally.

Shapes: token ids `[B, T]`, the model's `pad_id` marks padding; states `[B, T, D]`.
"""

import math
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp

from models import interventions
from models.blocks import encoder_stack
from models.embeddings import LearnedPositions, TokenEmbedding, lookup, make_positions
from models.layers import check_choice, check_vocab, is_int
from models.stack_config import StackConfig

Array = jax.Array


class TokenStack(nnx.Module):
  """Token embedding, positions and a stack of `EncoderLayer`s, the part both models share.

  Its parameter names (`embed`, `positions`, `layers`, `final_norm`) are the same in both models
  and under every head, so checkpoints move between them by name. A subclass sets `causal` and
  defines `_logits`, its output head; `token_logits` is then the same for both.

  BERT's embedding options, off by default (no parameters then, so older checkpoints load as
  they are): `scale_embeddings=False` takes token rows unscaled, `type_vocab_size` > 0 adds a
  learned token-type (segment) embedding `token_types`, and `embed_norm` layer-normalises the sum
  (`embed_norm`, epsilon `stack.norm_eps`) before dropout.
  """

  causal: bool

  def __init__(
    self,
    *,
    vocab_size: int,
    pad_id: int,
    stack: StackConfig,
    scale_embeddings: bool = True,
    embed_norm: bool = False,
    type_vocab_size: int = 0,
    rngs: nnx.Rngs,
  ):
    check_vocab(vocab_size, pad_id)
    check_choice('scale_embeddings', scale_embeddings, (True, False))
    check_choice('embed_norm', embed_norm, (False, True))
    if not is_int(type_vocab_size) or type_vocab_size < 0:
      raise ValueError(
        f'type_vocab_size must be a non-negative integer (0 = no token types); '
        f'got {type_vocab_size!r}.'
      )
    self.pad_id = pad_id
    self.dropout_rates = (stack.dropout_rate, stack.attention_dropout_rate)
    self.embed = TokenEmbedding(vocab_size, stack.d_model, scale=scale_embeddings, rngs=rngs)
    # None for positions that act inside every self-attention (RoPE, ALiBi, T5).
    self.positions = make_positions(stack.positions, stack.d_model, stack.max_length, rngs=rngs)
    self.token_types = (
      nnx.Embed(
        type_vocab_size, stack.d_model, embedding_init=nnx.initializers.normal(1.0), rngs=rngs
      )
      if type_vocab_size
      else None
    )
    self.embed_norm = (
      nnx.LayerNorm(stack.d_model, epsilon=stack.norm_eps, rngs=rngs) if embed_norm else None
    )
    self.dropout = nnx.Dropout(stack.dropout_rate)
    self.layers, self.final_norm = encoder_stack(stack, rngs=rngs)

  def _check_length(self, length: int, what: str) -> None:
    """Raises ValueError if `length` positions exceed the learned table (`what` names them)."""
    if isinstance(self.positions, LearnedPositions) and length > self.positions.max_length:
      raise ValueError(
        f'{what} need {length} positions > max_length='
        f'{self.positions.max_length} of the learned positions.'
      )

  def _check_ids(
    self, ids: Any, deterministic: bool, rngs: nnx.Rngs | None, *, documents: bool = False
  ) -> Array:
    """`ids` as a JAX array; raises ValueError on ids or a dropout setting no call can run.

    Ids are `[B, T]`, or with `documents` also `[B, S, W]`, read as one sequence of S*W tokens.
    """
    ids = jnp.asarray(ids)
    ndims, shapes = ((2, 3), '[B, T] or [B, S, W]') if documents else ((2,), '[B, T]')
    if ids.ndim not in ndims or not jnp.issubdtype(ids.dtype, jnp.integer):
      raise ValueError(f'inputs must be integer ids {shapes}; got {ids.dtype}{tuple(ids.shape)}.')
    self._check_length(math.prod(ids.shape[1:]), f'inputs of shape {tuple(ids.shape)}')
    if not deterministic and rngs is None and max(self.dropout_rates) > 0.0:
      raise ValueError("deterministic=False needs rngs, an nnx.Rngs with a 'dropout' stream.")
    return ids

  def _embed(
    self,
    ids: Array,
    start: Array | int,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    token_types: Array | None = None,
    *,
    tapped: bool = False,
  ) -> Array:
    """Token embeddings plus positions `start ..` (plus token types, LayerNorm where built),
    then dropout: `[B, T] -> [B, T, D]`. `token_types` `[B, T]`: None = all type 0. `tapped`:
    through the taps `embeddings` and `position_embeddings` (the decoding steps tap nothing)."""
    tap = interventions.tap if tapped else lambda module, name, value: value
    x = tap(self, 'embeddings', self.embed(ids))  # [B, T, D]
    if self.positions is not None:
      rows = self.positions(start + jnp.arange(ids.shape[1])).astype(x.dtype)  # float32 table
      x = x + tap(self, 'position_embeddings', rows)  # [T, D]
    if self.token_types is not None:
      types = jnp.zeros_like(ids) if token_types is None else token_types
      x = x + lookup(self.token_types, types).astype(x.dtype)
    if self.embed_norm is not None:
      x = self.embed_norm(x)
    return self.dropout(x, deterministic=deterministic, rngs=rngs)

  def encode(
    self,
    ids: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    token_types: Array | None = None,
  ) -> tuple[Array, Array | None]:
    """Encodes ids `[B, T]` to `(states [B, T, D], mask [B, T] True = real)`.

    States are after the final LayerNorm for pre-norm. A causal model reads no padding mask (see
    `DecoderLM`), so its mask is None. `token_types` `[B, T]` (segment ids, for a model built with
    `type_vocab_size`): None = all 0.
    """
    mask = None if self.causal else ids != self.pad_id  # [B, T]
    key_mask = None if mask is None else mask[:, None, None, :]
    run = dict(deterministic=deterministic, rngs=rngs)
    x = self._embed(ids, 0, token_types=token_types, tapped=True, **run)
    for layer in self.layers:
      x = layer(x, key_mask, is_causal=self.causal, **run)
    if self.final_norm is not None:
      x = self.final_norm(x)
    return x, mask

  def token_logits(
    self,
    ids: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Float32 logits `[B, T, V]` for every position: next-token (`DecoderLM`) or masked-token
    (`EncoderMLM`); the self-attention weights are the taps `attention_names` lists.

    In `DecoderLM` position t's row predicts token t+1 from tokens `0 .. t`; in `EncoderMLM` every
    row predicts the token at its position, and the loss picks the masked ones.

    Args:
      ids: int token ids `[B, T]`; for `EncoderMLM` masked positions hold the tokenizer's mask id.
      deterministic: False turns dropout on.
      rngs: an `nnx.Rngs` with a 'dropout' stream, needed when dropout is on.
    """
    return self.logits_of(self.token_states(ids, deterministic=deterministic, rngs=rngs))

  def token_states(
    self,
    ids: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """The final states `[B, T, D]` that `logits_of` maps to `token_logits` (a training loss
    that never makes all the logits at once, `tasks.losses.summed_cross_entropy`, reads these)."""
    ids = self._check_ids(ids, deterministic, rngs)
    states, _ = self.encode(ids, deterministic=deterministic, rngs=rngs)
    return states

  def logits_of(self, states: Array) -> Array:
    """The output head: final states `[..., D]` -> logits `[..., V]`, float32 or wider."""
    return self._logits(states)
