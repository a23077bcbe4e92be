"""Image captioning with visual attention: a decoder attends to an image encoder's regions.

Shapes: images float `[B, H, W, C]`; region features `[B, R, D]` on a `gh x gw` grid
(`Captioner.grid`), row-major: region r is grid row `r // gw`, column `r % gw`, and covers
image rows `[row H/gh, (row+1) H/gh)` and the matching columns. Decoder inputs int ids `[B, T]`
(`[BOS] + caption[:-1]`, padding at the end); logits float32 `[B, T, V]`; cross-attention
weights are read by name through `models.interventions` (`Captioner.attention_names`).

Encoders (`encoder`):

- `'cnn'`: `ConvEncoder` (`models.conv_encoder`), a small CNN whose cells are the regions (Xu
  et al. 2015 use VGG's).
- `'vit'`: the ViT's `PatchEncoder` without a class token; the patches are the regions.

Both add 2-D positions (learned or sinusoidal), so the decoder can look for "the next digit to the
right" by where a region is, not only by what it shows.

Decoders (`decoder`):

- `'gru'`: Show, Attend and Tell (Xu et al. 2015) with Bahdanau's step (`models.seq2seq`): the
  state starts at `tanh(W mean_r a_r)`; step t attends from `h_{t-1}` to the regions, steps the
  GRU on `[E y_{t-1}; c_t]` and predicts from the deep output `W_o [h_t; c_t; E y_{t-1}]`.
- `'transformer'`: the Transformer's decoder stack (`models.blocks.run_decoder`): causal
  self-attention, cross-attention to the regions, pre-norm with a final LayerNorm, sinusoidal
  token positions.
"""

import dataclasses
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp

from models import interventions, rnn_attention
from models.blocks import EPS, DecoderLayer, decoder_step, init_decoder_cache, run_decoder
from models.conv_encoder import ConvEncoder, check_cnn
from models.embeddings import SinusoidalPositions, TokenEmbedding, lookup
from models.layers import check_choice, check_positive_ints, check_vocab, dense
from models.seq2seq import bahdanau_step
from models.stack_config import StackConfig
from models.variant_config import VariantConfig
from models.vision import (
  PatchEncoder,
  check_dropout,
  check_image_shape,
  check_images,
  check_positions_2d,
)

Array = jax.Array
ENCODERS = ('cnn', 'vit')
DECODERS = ('gru', 'transformer')
# The Transformer decoder's fixed choices (and the ViT encoder's): pre-norm trains without warm-up;
# the decoder's token positions are sinusoidal (the encoder's are `positions`).
_STACK = dict(norm='pre', activation='gelu', positions='sinusoidal')


def _image_encoder(
  encoder: str,
  image_shape: tuple[int, int, int],
  cnn_channels: tuple[int, ...],
  patch_size: int,
  layers: int,
  positions: str,
  stack: StackConfig,
  rngs: nnx.Rngs,
) -> ConvEncoder | PatchEncoder:
  """The `encoder` of the regions, `'cnn'` or `'vit'` (its stack `layers` deep)."""
  if encoder == 'cnn':
    return ConvEncoder(
      image_shape, tuple(cnn_channels), stack.d_model, positions=positions, rngs=rngs
    )
  vit = dataclasses.replace(stack, num_layers=layers, positions=positions)
  return PatchEncoder(image_shape, patch_size, class_token=False, stack=vit, rngs=rngs)


class Captioner(nnx.Module):
  """Image captioner with attention over image regions; implements `ImageCaptioner`.

  It has no `__call__`: with one it would also match the `EncoderDecoder` Protocol (which checks
  method names only) and be offered to translation. Dropout (`dropout_rate`) acts on the token
  embeddings, on the GRU's output features, and on every sublayer output of the Transformer
  stacks (ViT encoder, Transformer decoder).

  Decoding cache (every leaf leads with B): GRU `{'keys': [B, R, K], 'values': [B, R, D],
  'state': [B, 1, D]}`; Transformer `{'layers': [{'self': the attention variant's state (K/V
  [B, heads, max_length, H] for softmax attention), 'cross': K/V [B, heads, R, H]}] * L}`.

  `attention_names` (by the decoder and encoder built): `cross`, the words' attention over the
  regions (GRU: `attn/weights` per step `[B, T, 1, R]`; Transformer: per layer `[B, N, T, R]`),
  `decoder_self` and `encoder_self` where there are such layers.
  """

  @property
  def attention_names(self) -> dict[str, str]:
    """`{role: name pattern}` of this captioner's attention (see `models.interventions`)."""
    names = {}
    if isinstance(self.image_encoder, PatchEncoder):
      names['encoder_self'] = 'image_encoder/layers/*/self_attn/weights'
    if self.decoder_kind == 'gru':
      return {**names, 'cross': 'attn/weights'}
    return {
      **names,
      'cross': 'decoder_layers/*/cross_attn/weights',
      'decoder_self': 'decoder_layers/*/self_attn/weights',
    }

  def __init__(
    self,
    *,
    image_shape: tuple[int, int, int],
    vocab_size: int,
    pad_id: int,
    encoder: str = 'cnn',
    decoder: str = 'gru',
    d_model: int = 128,
    cnn_channels: tuple[int, ...] = (32, 64),
    patch_size: int = 4,
    encoder_layers: int = 2,
    decoder_layers: int = 1,
    num_heads: int = 4,
    d_ff: int = 256,
    embed_dim: int = 64,
    score: str = 'additive',
    positions: str = 'learned',
    dropout_rate: float = 0.0,
    variant: VariantConfig = VariantConfig(),
    rngs: nnx.Rngs,
  ):
    """Builds the model; bad settings raise ValueError before any parameter is created.

    Args:
      image_shape: `(H, W, C)` of the images.
      vocab_size: caption vocabulary size V.
      pad_id: the tokenizer's padding id; captions are right-padded, which causal decoding never
        reads, so it only has to be a valid id.
      encoder: `'cnn'` or `'vit'`.
      decoder: `'gru'` or `'transformer'`.
      d_model: width D of the regions, the GRU state and the Transformer stacks.
      cnn_channels: channels of the CNN's stages; H and W must be divisible by 2^stages.
      patch_size: the ViT encoder's patch size; must divide H and W.
      encoder_layers: the ViT encoder's layers.
      decoder_layers: the Transformer decoder's layers.
      num_heads: attention heads of the Transformer stacks.
      d_ff: inner width of their feed-forward sublayers.
      embed_dim: the GRU decoder's token embedding size E.
      score: the GRU decoder's attention score, a name in `attention.SCORES`.
      positions: the regions' 2-D positions, `'learned'` or `'sinusoidal'` (d_model % 4 == 0).
      dropout_rate: dropout rate (see the class docstring).
      variant: the attention variant of the Transformer stacks (ViT encoder, Transformer decoder).
      rngs: `params` stream for initialisation.
    """
    image_shape = check_image_shape(image_shape)
    check_vocab(vocab_size, pad_id)
    check_choice('encoder', encoder, ENCODERS)
    check_choice('decoder', decoder, DECODERS)
    check_positive_ints(
      encoder_layers=encoder_layers, decoder_layers=decoder_layers, embed_dim=embed_dim
    )
    check_positions_2d(positions, d_model)
    # The Transformer stacks' settings; checked even when no stack is built.
    stack = StackConfig(
      d_model=d_model,
      num_heads=num_heads,
      d_ff=d_ff,
      dropout_rate=dropout_rate,
      **_STACK,
      **dataclasses.asdict(variant),
    )
    if encoder == 'cnn':
      check_cnn(image_shape, cnn_channels)
    if decoder == 'gru':
      rnn_attention.check_score(score)

    self.pad_id = pad_id
    self.image_shape = image_shape
    self.decoder_kind = decoder
    self.dropout_rate = dropout_rate
    self.image_encoder = _image_encoder(
      encoder, image_shape, cnn_channels, patch_size, encoder_layers, positions, stack, rngs
    )
    self.grid = self.image_encoder.grid
    self.dropout = nnx.Dropout(dropout_rate)
    # Built after the encoder, so that the parameters draw their keys in the order they always did.
    features = self._build_decoder(stack, vocab_size, embed_dim, decoder_layers, score, rngs)
    self.output = dense(features, vocab_size, rngs=rngs)

  def _build_decoder(
    self,
    stack: StackConfig,
    vocab_size: int,
    embed_dim: int,
    layers: int,
    score: str,
    rngs: nnx.Rngs,
  ) -> int:
    """Builds the `decoder_kind` decoder's layers; returns the width of the output's features."""
    d_model = stack.d_model
    if self.decoder_kind == 'gru':
      self.embed = nnx.Embed(vocab_size, embed_dim, rngs=rngs)
      self.attn = rnn_attention.make_attention(score, query_dim=d_model, key_dim=d_model, rngs=rngs)
      self.bridge = nnx.Linear(d_model, d_model, rngs=rngs)  # h_0 = tanh(W mean_r a_r)
      self.cells = nnx.List([nnx.GRUCell(embed_dim + d_model, d_model, rngs=rngs)])
      return 2 * d_model + embed_dim  # [h_t; c_t; E y_{t-1}]
    self.embed = TokenEmbedding(vocab_size, d_model, rngs=rngs)
    self.token_positions = SinusoidalPositions(d_model)
    self.decoder_layers = nnx.List([DecoderLayer(stack, rngs=rngs) for _ in range(layers)])
    self.decoder_norm = nnx.LayerNorm(d_model, epsilon=EPS, rngs=rngs)
    return d_model

  def _encode(
    self, images: Array, *, deterministic: bool = True, rngs: nnx.Rngs | None = None
  ) -> Array:
    """Checked images -> regions `[B, R, D]`."""
    if isinstance(self.image_encoder, ConvEncoder):
      return self.image_encoder(images)
    return self.image_encoder(images, deterministic=deterministic, rngs=rngs)

  def encode_image(self, images: Any) -> Array:
    """Region features `[B, R, D]` (R = gh*gw, row-major) of images float `[B, H, W, C]`."""
    return self._encode(check_images(images, self.image_shape))

  def _embed_tokens(self, ids: Array, start: Array | int) -> Array:
    """Transformer decoder: scaled embeddings plus positions `start ..`, `[B, T] -> [B, T, D]`."""
    y = self.embed(ids)  # [B, T, D]
    return y + self.token_positions(start + jnp.arange(ids.shape[1])).astype(y.dtype)

  def _gru_state(self, regions: Array) -> Array:
    """The GRU decoder's initial state `[B, 1, D]` (one layer) from the mean region."""
    return jnp.tanh(self.bridge(jnp.mean(regions, axis=1)))[:, None]

  def caption_logits(
    self,
    images: Any,
    decoder_inputs: Any,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Teacher-forced logits for every caption position.

    Args:
      images: float `[B, H, W, C]` in the model's `image_shape`.
      decoder_inputs: int ids `[B, T]`, `[BOS] + caption[:-1]`.
      deterministic: False turns dropout on.
      rngs: an `nnx.Rngs` with a 'dropout' stream, needed when dropout is on.

    Returns:
      logits float32 `[B, T, V]`. The attention weights are the taps `attention_names` lists
      (`interventions.attention(model, 'cross', ..., method='caption_logits')`).
    """
    images = check_images(images, self.image_shape)
    ids = jnp.asarray(decoder_inputs)
    batch = images.shape[0]
    if ids.ndim != 2 or ids.shape[0] != batch or not jnp.issubdtype(ids.dtype, jnp.integer):
      raise ValueError(
        f"decoder_inputs must be integer ids [B, T] with B={batch} (the images'); "
        f'got {ids.dtype}{tuple(ids.shape)}.'
      )
    check_dropout(deterministic, rngs, (self.dropout_rate,))
    run = dict(deterministic=deterministic, rngs=rngs)
    regions = self._encode(images, **run)
    if self.decoder_kind == 'gru':
      keys, state = self.attn.prepare(regions), self._gru_state(regions)
      y = self.dropout(lookup(self.embed, ids), **run)  # [B, T, E]

      def step(state, y_t):
        state, features, _ = bahdanau_step(self.attn, self.cells, state, y_t, keys, regions, None)
        return state, features

      _, features = interventions.scan(step, state, jnp.swapaxes(y, 0, 1))  # [T, B, F]
      features = self.dropout(jnp.swapaxes(features, 0, 1), **run)  # [B, T, F]
    else:
      y = self.dropout(self._embed_tokens(ids, 0), **run)  # [B, T, D]
      features = run_decoder(self.decoder_layers, y, regions, None, **run)
      features = self.decoder_norm(features)  # [B, T, D]
    return self.output(features).astype(jnp.float32)  # [B, T, V]

  def init_decode_cache(self, images: Any, max_length: int) -> dict[str, Any]:
    """Encodes images `[B, H, W, C]` once; the cache of the class docstring."""
    check_positive_ints(max_length=max_length)
    regions = self.encode_image(images)  # [B, R, D]
    if self.decoder_kind == 'gru':
      return {
        'keys': self.attn.prepare(regions),
        'values': regions,
        'state': self._gru_state(regions),
      }
    return {'layers': init_decoder_cache(self.decoder_layers, regions, max_length)}

  def decode_step(
    self, ids: Array, step: Array, cache: dict[str, Any]
  ) -> tuple[Array, dict[str, Any]]:
    """Logits float32 `[B, V]` for the token after `ids [B]` at position `step`, and the cache.

    The `tokens_to_logits` callback of `models.decoding`; reads parameters only, so it can run
    inside `jax.jit` + `lax.while_loop`. For the Transformer, `step` must stay below the cache's
    max_length.
    """
    if self.decoder_kind == 'gru':
      state, features, _ = bahdanau_step(
        self.attn,
        self.cells,
        cache['state'],
        lookup(self.embed, ids),
        cache['keys'],
        cache['values'],
        None,
      )
      return self.output(features).astype(jnp.float32), {**cache, 'state': state}
    y = self._embed_tokens(ids[:, None], step)  # [B, 1, D]
    y, layers = decoder_step(self.decoder_layers, y, cache['layers'], step, None)
    logits = self.output(self.decoder_norm(y[:, 0])).astype(jnp.float32)  # [B, V]
    return logits, {'layers': layers}
