"""The Transformer of "Attention Is All You Need" (Vaswani et al. 2017), post- or pre-norm.

Shapes: source ids `[B, S]`, decoder input ids `[B, T]` (`[BOS] + targets[:-1]`), the model's
`pad_id` marks padding; logits `[B, T, V_out]`; attention weights, read by name through
`models.interventions`, `[B, L, N, T, S]` (L layers, N heads).
"""

from typing import Any, ClassVar

from flax import nnx
import jax
import jax.numpy as jnp

from models.blocks import (
  DecoderLayer,
  EncoderLayer,
  decoder_step,
  final_norm,
  init_decoder_cache,
  run_decoder,
)
from models.copy_head import CopyHead
from models.embeddings import LearnedPositions, TokenEmbedding, make_positions
from models.layers import check_positive_ints, dense
from models.stack_config import StackConfig

Array = jax.Array


class Transformer(nnx.Module):
  """Encoder-decoder Transformer; defaults are the paper's base model.

  Attention dropout defaults to 0.0 as in the paper, which applies dropout only to the sublayer
  outputs and to the embedding sums (`dropout_rate`); later Tensor2Tensor setups add 0.1 on the
  attention weights.

  `attention_names`: `encoder_self`, `decoder_self` and `cross` weights `[B, N, T, S]` per layer.
  """

  attention_names: ClassVar[dict[str, str]] = {
    'encoder_self': 'encoder_layers/*/self_attn/weights',
    'decoder_self': 'decoder_layers/*/self_attn/weights',
    'cross': 'decoder_layers/*/cross_attn/weights',
  }

  def __init__(
    self,
    *,
    input_vocab_size: int,
    output_vocab_size: int,
    pad_id: int,
    stack: StackConfig = StackConfig(),
    num_encoder_layers: int | None = None,
    num_decoder_layers: int | None = None,
    share_embeddings: bool = False,
    tie_output: bool = True,
    copy_source: bool = False,
    copy_coverage: bool = False,
    rngs: nnx.Rngs,
  ):
    """Builds the model; bad settings raise ValueError before any parameter is created.

    Args:
      input_vocab_size: source vocabulary size.
      output_vocab_size: target vocabulary size V_out.
      pad_id: the tokenizer's padding id; padded source positions are masked out.
      stack: width, heads, layers (`num_layers` per stack), norm, positions, attention variant.
        Positions `'learned'` are one table shared by both stacks; `'none'` leaves the encoder
        a set; `'rope'`, `'alibi'` and `'t5'` act in the self-attentions of both stacks, and
        cross-attention sees no positions.
      num_encoder_layers: encoder layers, default `stack.num_layers`.
      num_decoder_layers: decoder layers, default `stack.num_layers`.
      share_embeddings: one token table for source and target (needs equal vocabulary sizes).
      tie_output: the output projection is the transposed target embedding.
      copy_source: one softmax over generating a token and copying a source position
        (`models/copy_head.py`, as CopyNet); source and target ids must come from one vocabulary.
      copy_coverage: the copy scores see the pointer's attention already paid to each source
        position (coverage, See et al. 2017); needs `copy_source`.
      rngs: `params` stream for initialisation.
    """
    layers = dict(num_encoder_layers=num_encoder_layers, num_decoder_layers=num_decoder_layers)
    layers = {name: stack.num_layers if value is None else value for name, value in layers.items()}
    check_positive_ints(**layers)
    for name, on in (('share_embeddings', share_embeddings), ('copy_source', copy_source)):
      if on and input_vocab_size != output_vocab_size:
        raise ValueError(
          f'{name}=True needs input_vocab_size == output_vocab_size; got '
          f'{input_vocab_size} and {output_vocab_size}.'
        )

    if copy_coverage and not copy_source:
      raise ValueError('copy_coverage=True needs copy_source=True: it covers the copy scores.')

    d_model = stack.d_model
    self.pad_id = pad_id
    self.dropout_rates = (stack.dropout_rate, stack.attention_dropout_rate)
    self.target_embed = TokenEmbedding(output_vocab_size, d_model, rngs=rngs)
    self.source_embed = (
      None if share_embeddings else TokenEmbedding(input_vocab_size, d_model, rngs=rngs)
    )
    self.positions = make_positions(stack.positions, d_model, stack.max_length, rngs=rngs)
    self.dropout = nnx.Dropout(stack.dropout_rate)
    self.encoder_layers = nnx.List(
      [EncoderLayer(stack.layer_config(i), rngs=rngs) for i in range(layers['num_encoder_layers'])]
    )
    self.decoder_layers = nnx.List(
      [DecoderLayer(stack.layer_config(i), rngs=rngs) for i in range(layers['num_decoder_layers'])]
    )
    self.encoder_norm = final_norm(stack, rngs=rngs)
    self.decoder_norm = final_norm(stack, rngs=rngs)
    self.output_proj = (
      None if tie_output else dense(d_model, output_vocab_size, axes=('embed', 'vocab'), rngs=rngs)
    )
    self.copy_head = CopyHead(d_model, coverage=copy_coverage, rngs=rngs) if copy_source else None

  def _check_ids(self, name: str, ids: Array, deterministic: bool, rngs: nnx.Rngs | None) -> None:
    """Raises ValueError, before tracing, on ids or a dropout setting the model cannot run."""
    if ids.ndim != 2 or not jnp.issubdtype(ids.dtype, jnp.integer):
      raise ValueError(
        f'{name} must be integer ids [B, length]; got {ids.dtype}{tuple(ids.shape)}.'
      )
    if isinstance(self.positions, LearnedPositions) and ids.shape[1] > self.positions.max_length:
      raise ValueError(
        f'{name} has length {ids.shape[1]} > max_length='
        f'{self.positions.max_length} of the learned positions.'
      )
    if not deterministic and rngs is None and max(self.dropout_rates) > 0.0:
      raise ValueError("deterministic=False needs rngs, an nnx.Rngs with a 'dropout' stream.")

  def _embed(
    self, table: TokenEmbedding, ids: Array, deterministic: bool, rngs: nnx.Rngs | None
  ) -> Array:
    """Scaled token embeddings plus positions, then dropout: `[B, T] -> [B, T, D]`."""
    x = table(ids)  # [B, T, D]
    if self.positions is not None:  # float32 encodings
      x = x + self.positions(jnp.arange(ids.shape[1])).astype(x.dtype)
    return self.dropout(x, deterministic=deterministic, rngs=rngs)

  def _logits(
    self,
    y: Array,
    memory: Array,
    source_ids: Array,
    source_mask: Array,
    paid: Array | None = None,
  ) -> tuple[Array, Array | None]:
    """`[B, T, D] -> [B, T, V_out]` float32 logits, after the pre-norm final LayerNorm; with
    `copy_source` the source ids' logits include their copy scores (`CopyHead`), and with
    `copy_coverage` the second value is the pointer's attention paid so far (else None)."""
    if self.decoder_norm is not None:
      y = self.decoder_norm(y)
    logits = self.target_embed.attend(y) if self.output_proj is None else self.output_proj(y)
    logits = logits.astype(jnp.float32)
    if self.copy_head is None:
      return logits, None
    return self.copy_head(logits, y, memory, source_ids, source_mask, paid)

  def encode(
    self,
    inputs: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Encodes source ids `[B, S]` to the memory `[B, S, D]`."""
    self._check_ids('inputs', inputs, deterministic, rngs)
    table = self.target_embed if self.source_embed is None else self.source_embed
    x = self._embed(table, inputs, deterministic, rngs)
    mask = (inputs != self.pad_id)[:, None, None, :]  # [B, 1, 1, S]
    for layer in self.encoder_layers:
      x = layer(x, mask, deterministic=deterministic, rngs=rngs)
    if self.encoder_norm is not None:
      x = self.encoder_norm(x)
    return x

  def decode(
    self,
    decoder_inputs: Array,
    memory: Array,
    source_mask: Array,
    *,
    source_ids: Array | None = None,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Teacher-forced decoding of all positions at once.

    Args:
      decoder_inputs: ids `[B, T]`, `[BOS] + targets[:-1]`.
      memory: encoder output `[B, S, D]`.
      source_mask: `[B, S]`, True = real source token.
      source_ids: the source ids `[B, S]`; needed with `copy_source`.
      deterministic: disables dropout.
      rngs: an `nnx.Rngs` with a `dropout` stream, needed when dropout is active.

    Returns:
      Logits `[B, T, V_out]`.
    """
    self._check_ids('decoder_inputs', decoder_inputs, deterministic, rngs)
    y = self._embed(self.target_embed, decoder_inputs, deterministic, rngs)
    mask = source_mask[:, None, None, :]  # [B, 1, 1, S]
    if self.copy_head is not None and source_ids is None:
      raise ValueError('decode: copy_source=True needs the source ids (source_ids=...).')
    y = run_decoder(self.decoder_layers, y, memory, mask, deterministic=deterministic, rngs=rngs)
    return self._logits(y, memory, source_ids, source_mask)[0]

  def __call__(
    self,
    inputs: Array,
    decoder_inputs: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Logits `[B, T, V_out]` for source `[B, S]` and decoder inputs `[B, T]` (`pad_id` = padding).

    The attention weights are the taps `attention_names` lists (`interventions.attention`).
    """
    run = dict(deterministic=deterministic, rngs=rngs)
    memory = self.encode(inputs, **run)
    return self.decode(decoder_inputs, memory, inputs != self.pad_id, source_ids=inputs, **run)

  def init_decode_cache(self, inputs: Array, max_length: int) -> dict[str, Any]:
    """Encodes `inputs [B, S]` once and allocates the state `decode_step` carries.

    Every leaf leads with B, so beam search can repeat the cache along axis 0:
    `source_mask [B, S]`; per decoder layer the `'self'` state of the attention variant (K/V
    buffers `[B, K, max_length, H]` for softmax attention) and `'cross'` K/V `[B, K, S, H]`
    projected from the memory; with `copy_source` also `memory [B, S, D]` and `source_ids`,
    and with `copy_coverage` the pointer's attention paid so far, `paid [B, S]`.
    """
    if isinstance(self.positions, LearnedPositions) and max_length > self.positions.max_length:
      raise ValueError(
        f'max_length={max_length} exceeds the {self.positions.max_length} learned positions.'
      )
    memory = self.encode(inputs)
    cache = {
      'source_mask': inputs != self.pad_id,
      'layers': init_decoder_cache(self.decoder_layers, memory, max_length),
    }
    if self.copy_head is not None:
      cache.update(memory=memory, source_ids=inputs)
    if self.copy_head is not None and self.copy_head.coverage_weight is not None:
      cache['paid'] = jnp.zeros(inputs.shape, jnp.float32)
    return cache

  def decode_step(
    self, ids: Array, step: Array, cache: dict[str, Any]
  ) -> tuple[Array, dict[str, Any]]:
    """Logits for the token after `ids [B]` at 0-based position `step` (int32 scalar).

    Reads parameters only, so it can be closed over inside `jax.jit` + `lax.while_loop`/`scan`.
    `step` must stay below the cache's `max_length`: a traced step cannot be checked, and past the
    end the buffer write would clamp to the last slot.

    Returns:
      `(logits [B, V_out] float32, the cache with position step written)`.
    """
    y = self.target_embed(ids[:, None])  # [B, 1, D]
    if self.positions is not None:
      y = y + self.positions(jnp.reshape(step, (1,))).astype(y.dtype)
    mask = cache['source_mask'][:, None, None, :]  # [B, 1, 1, S]
    y, layers = decoder_step(self.decoder_layers, y, cache['layers'], step, mask)
    copy_from = (cache.get('memory'), cache.get('source_ids'), cache['source_mask'])
    logits, paid = self._logits(y, *copy_from, cache.get('paid'))
    cache = {**cache, 'layers': layers}
    if paid is not None:
      cache['paid'] = paid
    return logits[:, 0], cache
