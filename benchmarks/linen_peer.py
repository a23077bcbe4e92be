"""The peer of Attend's Transformer in `flax.linen`, in the style of flax's examples/wmt.

It computes the same function as `models.transformer.Transformer` with `norm='post'`,
`score='scaled_dot'`, `positions='sinusoidal'`, ReLU and no attention dropout (the settings of
configs/default.py): token embeddings of standard deviation `1/sqrt(D)` scaled by `sqrt(D)`,
interleaved sin/cos positions, dropout on the embedding sums and on every sublayer output,
`LayerNorm(x + Dropout(sublayer(x)))`, a causal-only decoder self-attention, a source-padding mask
on the encoder self-attention and the cross-attention, and a tied output projection. Only the
attention comes from flax (`nn.MultiHeadDotProductAttention`); the train step is the usual
Linen + optax one: AdamW with global-norm clipping, label-smoothed cross-entropy over the non-pad
tokens, and the metrics wmt's step reports (loss, accuracy, token count).

Shapes: source ids `[B, S]`, decoder input ids `[B, T]`, logits `[B, T, V_out]`; id 0 = padding.
"""

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

from data import BOS_ID, PAD_ID  # the special ids of Attend's tokenizers

_EPS = 1e-6
_GLOROT = nn.initializers.xavier_uniform()  # Attend's `models.layers.dense` initialiser


def sinusoidal_table(length: int, features: int) -> np.ndarray:
  """`[length, features]` float32: sin on even features, cos on odd ones (Attend's layout)."""
  inv_freq = 10000.0 ** (-np.arange(0, features, 2, dtype=np.float32) / features)
  angles = np.arange(length, dtype=np.float32)[:, None] * inv_freq       # [L, F/2]
  return np.stack([np.sin(angles), np.cos(angles)], -1).reshape(length, features)


class FeedForward(nn.Module):
  """`relu(x W_1 + b_1) W_2 + b_2`; unlike wmt's MlpBlock, no dropout after the ReLU."""
  d_ff: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x):
    h = nn.relu(nn.Dense(self.d_ff, dtype=self.dtype, kernel_init=_GLOROT)(x))  # [B, T, F]
    return nn.Dense(x.shape[-1], dtype=self.dtype, kernel_init=_GLOROT)(h)      # [B, T, D]


class _PostNorm(nn.Module):
  """`LayerNorm(x + Dropout(y))`, the post-norm residual of every sublayer."""
  dropout_rate: float
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, y, deterministic: bool):
    y = nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
    return nn.LayerNorm(epsilon=_EPS, dtype=self.dtype)(x + y)


def _attention(config: dict[str, Any], dtype: Any) -> nn.MultiHeadDotProductAttention:
  return nn.MultiHeadDotProductAttention(
      num_heads=config["num_heads"], dtype=dtype, dropout_rate=config["attention_dropout_rate"],
      broadcast_dropout=False, kernel_init=_GLOROT)


class EncoderLayer(nn.Module):
  """Self-attention, then feed-forward."""
  config: dict[str, Any]
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, mask, deterministic: bool):
    """`x [B, S, D]`, `mask [B, 1, 1, S]` (True = real key) -> `[B, S, D]`."""
    rate = self.config["dropout_rate"]
    y = _attention(self.config, self.dtype)(x, mask=mask, deterministic=deterministic)
    x = _PostNorm(rate, self.dtype)(x, y, deterministic)
    y = FeedForward(self.config["d_ff"], self.dtype)(x)
    return _PostNorm(rate, self.dtype)(x, y, deterministic)


class DecoderLayer(nn.Module):
  """Causal self-attention, cross-attention to the memory, feed-forward."""
  config: dict[str, Any]
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, y, memory, causal_mask, source_mask, deterministic: bool):
    """`y [B, T, D]`, `memory [B, S, D]`, masks `[1, 1, T, T]`, `[B, 1, 1, S]` -> `[B, T, D]`."""
    rate = self.config["dropout_rate"]
    z = _attention(self.config, self.dtype)(y, mask=causal_mask, deterministic=deterministic)
    y = _PostNorm(rate, self.dtype)(y, z, deterministic)
    z = _attention(self.config, self.dtype)(y, memory, mask=source_mask,
                                            deterministic=deterministic)
    y = _PostNorm(rate, self.dtype)(y, z, deterministic)
    z = FeedForward(self.config["d_ff"], self.dtype)(y)
    return _PostNorm(rate, self.dtype)(y, z, deterministic)


class Transformer(nn.Module):
  """Encoder-decoder Transformer, post-norm; `config` holds Attend's `config.model` fields.

  `config` keys: input_vocab_size, output_vocab_size, num_encoder_layers, num_decoder_layers,
  d_model, num_heads, d_ff, dropout_rate, attention_dropout_rate, share_embeddings, tie_output.
  """
  config: dict[str, Any]
  dtype: Any = jnp.float32

  def setup(self):
    c, init = self.config, nn.initializers.normal(self.config["d_model"] ** -0.5)
    self.target_embed = nn.Embed(c["output_vocab_size"], c["d_model"], embedding_init=init,
                                 dtype=self.dtype)
    self.source_embed = (self.target_embed if c["share_embeddings"] else
                         nn.Embed(c["input_vocab_size"], c["d_model"], embedding_init=init,
                                  dtype=self.dtype))
    self.dropout = nn.Dropout(c["dropout_rate"])
    self.encoder_layers = [EncoderLayer(c, self.dtype) for _ in range(c["num_encoder_layers"])]
    self.decoder_layers = [DecoderLayer(c, self.dtype) for _ in range(c["num_decoder_layers"])]
    self.output_proj = (None if c["tie_output"] else
                        nn.Dense(c["output_vocab_size"], dtype=self.dtype, kernel_init=_GLOROT))

  def _embed(self, table: nn.Embed, ids, deterministic: bool):
    d = self.config["d_model"]
    x = table(ids) * jnp.sqrt(jnp.float32(d)).astype(self.dtype)         # [B, L, D]
    x = x + jnp.asarray(sinusoidal_table(ids.shape[1], d), self.dtype)
    return self.dropout(x, deterministic=deterministic)

  def __call__(self, inputs, decoder_inputs, deterministic: bool = True):
    """Float32 logits `[B, T, V_out]` for source `[B, S]` and decoder inputs `[B, T]`."""
    source_mask = (inputs != PAD_ID)[:, None, None, :]                   # [B, 1, 1, S]
    x = self._embed(self.source_embed, inputs, deterministic)
    for layer in self.encoder_layers:
      x = layer(x, source_mask, deterministic)
    # Causal only, as in Attend: with right padding no real position sees a padded one.
    causal = nn.make_causal_mask(decoder_inputs[:1])                     # [1, 1, T, T]
    y = self._embed(self.target_embed, decoder_inputs, deterministic)
    for layer in self.decoder_layers:
      y = layer(y, x, causal, source_mask, deterministic)
    logits = self.target_embed.attend(y) if self.output_proj is None else self.output_proj(y)
    return logits.astype(jnp.float32)


def shift_right(targets):
  """`[BOS, y_1, ..., y_{T-1}]` from `targets [B, T]`."""
  return jnp.pad(targets, ((0, 0), (1, 0)), constant_values=BOS_ID)[:, :-1]


def cross_entropy_loss(logits, targets, label_smoothing: float = 0.0):
  """Mean label-smoothed cross-entropy over the non-pad tokens, wmt's weighted loss.

  The smoothed targets put `1 - label_smoothing` on the label and spread the rest over the
  other `V - 1` tokens; the loss of a perfect prediction (their entropy) is subtracted.

  Args:
    logits: float `[B, T, V]`.
    targets: int `[B, T]`, 0 = padding.
    label_smoothing: mass moved off the label.

  Returns:
    float32 scalar.
  """
  vocab = logits.shape[-1]
  confidence = 1.0 - label_smoothing
  low = label_smoothing / (vocab - 1)
  floor = -(confidence * jnp.log(confidence) + (vocab - 1) * low * jnp.log(low + 1e-20))
  soft = jnp.where(jax.nn.one_hot(targets, vocab) > 0, confidence, low)  # [B, T, V]
  per_token = optax.softmax_cross_entropy(logits.astype(jnp.float32), soft) - floor  # [B, T]
  weights = (targets != PAD_ID).astype(jnp.float32)
  return jnp.sum(per_token * weights) / jnp.maximum(weights.sum(), 1.0)


def make_optimizer(learning_rate: Callable[[Any], Any], *, b1: float, b2: float, eps: float,
                   weight_decay: float, grad_clip: float) -> optax.GradientTransformation:
  """AdamW on the schedule `learning_rate(count)`, after global-norm clipping when > 0."""
  adamw = optax.adamw(learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
  return optax.chain(optax.clip_by_global_norm(grad_clip), adamw) if grad_clip > 0 else adamw


def create_state(model: Transformer, batch: dict, tx: optax.GradientTransformation,
                 seed: int = 0) -> train_state.TrainState:
  """Initialises the parameters on `batch`'s shapes and wraps them with `tx`."""
  def init():
    variables = model.init(jax.random.key(seed), batch["inputs"], shift_right(batch["targets"]))
    return train_state.TrainState.create(apply_fn=model.apply, params=variables["params"], tx=tx)
  return jax.jit(init)()


def train_step(state: train_state.TrainState, batch: dict, dropout_key: jax.Array, *,
               label_smoothing: float = 0.0):
  """One update; the dropout key is folded with the step inside the step, as in wmt."""
  inputs, targets = batch["inputs"], batch["targets"]
  rng = jax.random.fold_in(dropout_key, state.step)

  def loss_fn(params):
    logits = state.apply_fn({"params": params}, inputs, shift_right(targets),
                            deterministic=False, rngs={"dropout": rng})
    return cross_entropy_loss(logits, targets, label_smoothing), logits

  (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  state = state.apply_gradients(grads=grads)
  weights = targets != PAD_ID
  correct = (jnp.argmax(logits, -1) == targets) & weights
  return state, dict(loss=loss, accuracy=correct.sum() / jnp.maximum(weights.sum(), 1),
                     tokens=weights.sum())
