"""The peer of Attend's Transformer in `flax.linen`, in the style of flax's examples/wmt.

It computes the same function as `models.transformer.Transformer` with `norm='post'`,
`score='scaled_dot'`, `positions='sinusoidal'`, ReLU and no attention dropout (the settings of
configs/default.py): token embeddings of standard deviation `1/sqrt(D)` scaled by `sqrt(D)`,
interleaved sin/cos positions, dropout on the embedding sums and on every sublayer output,
`LayerNorm(x + Dropout(sublayer(x)))`, a causal-only decoder self-attention, a source-padding mask
on the encoder self-attention and the cross-attention, and a tied output projection. Only the
attention comes from flax (`nn.MultiHeadDotProductAttention`); its train step is in
`benchmarks/linen_peer_train.py`.

Decoding is wmt's too: with `cached=True` the decoder's self-attention keeps its keys and values in
Linen's `'cache'` collection (`nn.MultiHeadDotProductAttention(decode=True)`: `[B, L, N, H]`
buffers written at a cache index and attended over all L positions with a mask), the target
positions come from a cache index as in wmt's `AddPositionEmbs`, and each step is one
`model.apply(..., mutable=['cache'], method=Transformer.decode)` (`decoder_callback`, wmt's
`tokens_ids_to_logits`). As in wmt's `EncoderDecoder1DBlock`, the cross-attention is an ordinary
`nn.MultiHeadDotProductAttention` that projects the encoder memory into keys and values again in
every step's code: that is the peer as published (Attend projects them once per source). Run in
one jitted while loop, XLA hoists that loop-invariant projection out of the loop, though not the
transposes of its result into the layout the attention contracts.

Shapes: source ids `[B, S]`, decoder input ids `[B, T]`, logits `[B, T, V_out]`; id 0 = padding.
"""

import functools
from typing import Any, Callable

from flax import nnx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.peers import peer_model_config
from data.tokenizers import BOS_ID, PAD_ID  # the special ids of Attend's tokenizers
from models import decoding
import models.transformer

_EPS = 1e-6
_GLOROT = nn.initializers.xavier_uniform()  # Attend's `models.layers.dense` initialiser


def sinusoidal_table(length: int, features: int) -> np.ndarray:
  """`[length, features]` float32: sin on even features, cos on odd ones (Attend's layout)."""
  inv_freq = 10000.0 ** (-np.arange(0, features, 2, dtype=np.float32) / features)
  angles = np.arange(length, dtype=np.float32)[:, None] * inv_freq  # [L, F/2]
  return np.stack([np.sin(angles), np.cos(angles)], -1).reshape(length, features)


class FeedForward(nn.Module):
  """`relu(x W_1 + b_1) W_2 + b_2`; unlike wmt's MlpBlock, no dropout after the ReLU."""

  d_ff: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x):
    h = nn.relu(nn.Dense(self.d_ff, dtype=self.dtype, kernel_init=_GLOROT)(x))  # [B, T, F]
    return nn.Dense(x.shape[-1], dtype=self.dtype, kernel_init=_GLOROT)(h)  # [B, T, D]


class _PostNorm(nn.Module):
  """`LayerNorm(x + Dropout(y))`, the post-norm residual of every sublayer."""

  dropout_rate: float
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, y, deterministic: bool):
    y = nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
    return nn.LayerNorm(epsilon=_EPS, dtype=self.dtype)(x + y)


class _Positions(nn.Module):
  """Adds the sinusoidal positions; with `decode`, those of the next cached step (wmt's
  `AddPositionEmbs`): the first call, `init` over the whole target, creates the cache index."""

  max_length: int = 0
  decode: bool = False

  @nn.compact
  def __call__(self, x):
    """`x [B, L, D]`, or `[B, 1, D]` at the cache index when decoding -> `[B, L, D]`."""
    length, features = x.shape[-2:]
    if not self.decode:
      return x + jnp.asarray(sinusoidal_table(length, features), x.dtype)
    initialized = self.has_variable('cache', 'cache_index')
    index = self.variable('cache', 'cache_index', lambda: jnp.array(0, jnp.int32))
    table = jnp.asarray(sinusoidal_table(max(self.max_length, length), features), x.dtype)
    if not initialized:
      return x + table[:length]
    i = index.value
    index.value = i + 1
    return x + jax.lax.dynamic_slice_in_dim(table, i, 1)  # [1, D]


def _attention(
  config: dict[str, Any], dtype: Any, decode: bool = False
) -> nn.MultiHeadDotProductAttention:
  return nn.MultiHeadDotProductAttention(
    num_heads=config['num_heads'],
    dtype=dtype,
    dropout_rate=config['attention_dropout_rate'],
    broadcast_dropout=False,
    kernel_init=_GLOROT,
    decode=decode,
  )


class EncoderLayer(nn.Module):
  """Self-attention, then feed-forward."""

  config: dict[str, Any]
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, mask, deterministic: bool):
    """`x [B, S, D]`, `mask [B, 1, 1, S]` (True = real key) -> `[B, S, D]`."""
    rate = self.config['dropout_rate']
    y = _attention(self.config, self.dtype)(x, mask=mask, deterministic=deterministic)
    x = _PostNorm(rate, self.dtype)(x, y, deterministic)
    y = FeedForward(self.config['d_ff'], self.dtype)(x)
    return _PostNorm(rate, self.dtype)(x, y, deterministic)


class DecoderLayer(nn.Module):
  """Causal self-attention (cached with `decode`), cross-attention to the memory, feed-forward."""

  config: dict[str, Any]
  dtype: Any = jnp.float32
  decode: bool = False

  @nn.compact
  def __call__(self, y, memory, causal_mask, source_mask, deterministic: bool):
    """`y [B, T, D]`, `memory [B, S, D]`, masks `[1, 1, T, T]` (None when decoding: the cache
    masks the positions not yet written), `[B, 1, 1, S]` -> `[B, T, D]`."""
    rate = self.config['dropout_rate']
    z = _attention(self.config, self.dtype, self.decode)(
      y, mask=causal_mask, deterministic=deterministic
    )
    y = _PostNorm(rate, self.dtype)(y, z, deterministic)
    z = _attention(self.config, self.dtype)(
      y, memory, mask=source_mask, deterministic=deterministic
    )
    y = _PostNorm(rate, self.dtype)(y, z, deterministic)
    z = FeedForward(self.config['d_ff'], self.dtype)(y)
    return _PostNorm(rate, self.dtype)(y, z, deterministic)


class Transformer(nn.Module):
  """Encoder-decoder Transformer, post-norm; `config` holds Attend's `config.model` fields.

  `config` keys: input_vocab_size, output_vocab_size, num_encoder_layers, num_decoder_layers,
  d_model, num_heads, d_ff, dropout_rate, attention_dropout_rate, share_embeddings, tie_output.
  `cached` builds the cached decoder (wmt's `config.decode`; see the module docstring);
  `max_length` bounds the steps it decodes (wmt's `max_len`).
  """

  config: dict[str, Any]
  dtype: Any = jnp.float32
  cached: bool = False
  max_length: int = 512

  def setup(self):
    c, init = self.config, nn.initializers.normal(self.config['d_model'] ** -0.5)
    self.target_embed = nn.Embed(
      c['output_vocab_size'], c['d_model'], embedding_init=init, dtype=self.dtype
    )
    self.source_embed = (
      self.target_embed
      if c['share_embeddings']
      else nn.Embed(c['input_vocab_size'], c['d_model'], embedding_init=init, dtype=self.dtype)
    )
    self.dropout = nn.Dropout(c['dropout_rate'])
    self.source_positions = _Positions()
    self.target_positions = _Positions(self.max_length, self.cached)
    self.encoder_layers = [EncoderLayer(c, self.dtype) for _ in range(c['num_encoder_layers'])]
    self.decoder_layers = [
      DecoderLayer(c, self.dtype, self.cached) for _ in range(c['num_decoder_layers'])
    ]
    self.output_proj = (
      None
      if c['tie_output']
      else nn.Dense(c['output_vocab_size'], dtype=self.dtype, kernel_init=_GLOROT)
    )

  def _embed(self, table: nn.Embed, positions: _Positions, ids, deterministic: bool):
    x = table(ids) * jnp.sqrt(jnp.float32(self.config['d_model'])).astype(self.dtype)  # [B, L, D]
    return self.dropout(positions(x), deterministic=deterministic)

  def encode(self, inputs, deterministic: bool = True):
    """Memory `[B, S, D]` of source ids `[B, S]`."""
    source_mask = (inputs != PAD_ID)[:, None, None, :]  # [B, 1, 1, S]
    x = self._embed(self.source_embed, self.source_positions, inputs, deterministic)
    for layer in self.encoder_layers:
      x = layer(x, source_mask, deterministic)
    return x

  def decode(self, memory, inputs, decoder_inputs, deterministic: bool = True):
    """Float32 logits `[B, T, V_out]` of decoder inputs `[B, T]` (`[B, 1]` per cached step)
    reading `memory [B, S, D]` of source ids `inputs [B, S]`."""
    source_mask = (inputs != PAD_ID)[:, None, None, :]  # [B, 1, 1, S]
    # Causal only, as in Attend: with right padding no real position sees a padded one.
    causal = None if self.cached else nn.make_causal_mask(decoder_inputs[:1])  # [1, 1, T, T]
    y = self._embed(self.target_embed, self.target_positions, decoder_inputs, deterministic)
    for layer in self.decoder_layers:
      y = layer(y, memory, causal, source_mask, deterministic)
    logits = self.target_embed.attend(y) if self.output_proj is None else self.output_proj(y)
    return logits.astype(jnp.float32)

  def __call__(self, inputs, decoder_inputs, deterministic: bool = True):
    """Float32 logits `[B, T, V_out]` for source `[B, S]` and decoder inputs `[B, T]`."""
    memory = self.encode(inputs, deterministic)
    return self.decode(memory, inputs, decoder_inputs, deterministic)


def init_cache(model: Transformer, inputs, max_length: int):
  """The zeroed `'cache'` collection of a `cached=True` model for `max_length` steps.

  wmt's `initialize_cache` runs `model.init` on ones of the source's and the target's shapes and
  keeps the cache, which Linen fills with zeros (index 0); only its shapes are traced here, so
  that no forward pass runs.
  """
  targets = jnp.ones((inputs.shape[0], max_length), jnp.int32)
  shapes = jax.eval_shape(model.init, jax.random.key(0), inputs, targets)['cache']
  return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def decoder_callback(model: Transformer, params, inputs, max_length: int):
  """`(tokens_to_logits, cache)` for `models.decoding`'s searches: wmt's `tokens_ids_to_logits`.

  Encodes `inputs [B, S]` once; each call decodes one token `ids [B]` through the cache of a
  `cached=True` model and returns `(logits [B, V_out], cache)`. The cache index counts the steps
  itself, so the search's `step` is unused.
  """
  if not model.cached:
    raise ValueError('decoder_callback needs a Transformer built with cached=True.')
  memory = model.apply({'params': params}, inputs, method=Transformer.encode)

  def tokens_to_logits(ids, step, cache):
    del step
    logits, variables = model.apply(
      {'params': params, 'cache': cache},
      memory,
      inputs,
      ids[:, None],
      mutable=['cache'],
      method=Transformer.decode,
    )
    return logits[:, 0], variables['cache']

  return tokens_to_logits, init_cache(model, inputs, max_length)


def params_from_attend(attend: dict, num_heads: int) -> dict:
  """Attend's Transformer parameters (`nnx.to_pure_dict` of its `nnx.Param` state) in this peer's
  layout, so that both compute the same function."""

  def attention(a):
    d = a['w_q']['kernel'].shape[0]
    # Attend splits [.., N*H] features head-major, as Linen's [D, N, H] kernels are laid out.
    split = lambda w: {
      'kernel': w['kernel'].reshape(d, num_heads, -1),
      'bias': w['bias'].reshape(num_heads, -1),
    }
    return {
      'query': split(a['w_q']),
      'key': split(a['w_k']),
      'value': split(a['w_v']),
      'out': {'kernel': a['w_o']['kernel'].reshape(num_heads, -1, d), 'bias': a['w_o']['bias']},
    }

  def layer(p, attention_names):
    out = {
      f'MultiHeadDotProductAttention_{i}': attention(p[name])
      for i, name in enumerate(attention_names)
    }
    out['FeedForward_0'] = {'Dense_0': p['ffn']['w_1'], 'Dense_1': p['ffn']['w_2']}
    out.update({f'_PostNorm_{i}': {'LayerNorm_0': norm} for i, norm in p['norms'].items()})
    return out

  params = {
    name: {'embedding': attend[name]['embed']['embedding']}
    for name in ('source_embed', 'target_embed')
    if attend.get(name) is not None
  }
  for i, p in attend['encoder_layers'].items():
    params[f'encoder_layers_{i}'] = layer(p, ['self_attn'])
  for i, p in attend['decoder_layers'].items():
    params[f'decoder_layers_{i}'] = layer(p, ['self_attn', 'cross_attn'])
  if attend.get('output_proj') is not None:
    params['output_proj'] = attend['output_proj']
  return params


def greedy_search(
  model: Transformer, params: Any, inputs: jax.Array, *, max_length: int, eos_id: int
) -> jax.Array:
  """Greedy search with this peer's KV cache (a `cached=True` model), run by Attend's
  `models.decoding.greedy_search`; ids int32 [B, max_length]. Jit it whole."""
  tokens_to_logits, cache = decoder_callback(model, params, inputs, max_length)
  return decoding.greedy_search(
    tokens_to_logits,
    cache,
    batch_size=inputs.shape[0],
    max_length=max_length,
    bos_id=BOS_ID,
    eos_id=eos_id,
    pad_id=PAD_ID,
  )


def greedy_runner(
  model_config: Any,
  vocabs: dict[str, int],
  attend: nnx.Module,
  inputs: jax.Array,
  *,
  max_length: int,
  eos_id: int,
) -> Callable[[], jax.Array] | None:
  """This peer's cached greedy search over `inputs` with the weights of Attend's model `attend`
  (built from `model_config` at `vocabs`), jitted; None where the peer cannot mirror `attend`
  (not a Transformer, or settings it does not implement)."""
  if not isinstance(attend, models.transformer.Transformer):
    return None
  size = dict(input_vocab=vocabs['input_vocab_size'], output_vocab=vocabs['output_vocab_size'])
  try:
    peer_config = peer_model_config(model_config, size)
  except ValueError:
    return None
  peer = Transformer(peer_config, cached=True, max_length=max_length)
  params = params_from_attend(
    nnx.to_pure_dict(nnx.state(attend, nnx.Param)), model_config.num_heads
  )
  run = jax.jit(functools.partial(greedy_search, peer, max_length=max_length, eos_id=eos_id))
  return functools.partial(run, params, inputs)
