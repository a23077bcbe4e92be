"""Text classifiers: a hierarchical attention network and a Transformer encoder with pooling.

Inputs are token ids, `[B, T]` (one sentence per example) or `[B, S, W]` (a document of S
sentences of W words); the model's `pad_id` marks padding words, padding sentences (all words
padding) and all-padding examples, which get finite logits. Outputs are float32 logits `[B, C]`.
Both models implement `models.interfaces.Classifier`; `__call__` is `classify`. Their attention
is read by name through `models.interventions` (each class's `attention_names`).
"""

from typing import Any, ClassVar

from flax import nnx
import jax
import jax.numpy as jnp

from models import interventions
from models.blocks import encoder_stack
from models.embeddings import LearnedPositions, TokenEmbedding, lookup, make_positions
from models.layers import (
  AttentionPooling,
  check_choice,
  check_positive_ints,
  check_rate,
  check_vocab,
  dense,
  is_int,
)
from models.rnn_attention import check_score
from models.seq2seq import GRUEncoder
from models.stack_config import StackConfig

Array = jax.Array
POOLINGS = ('cls', 'mean', 'attention')


def _check_data_args(vocab_size: int, num_classes: int, pad_id: int) -> None:
  """Raises ValueError on a vocabulary, class count or padding id no classifier can use."""
  check_vocab(vocab_size, pad_id)
  if not is_int(num_classes) or num_classes < 2:
    raise ValueError(f'num_classes must be an integer >= 2; got {num_classes!r}.')


def _check_call(
  inputs: Any, deterministic: bool, rngs: nnx.Rngs | None, rates: tuple[float, ...]
) -> Array:
  """`inputs` as a JAX array; raises ValueError on ids or a dropout setting no call can run."""
  inputs = jnp.asarray(inputs)
  if inputs.ndim not in (2, 3) or not jnp.issubdtype(inputs.dtype, jnp.integer):
    raise ValueError(
      f'inputs must be integer ids [B, T] or [B, S, W]; got {inputs.dtype}{tuple(inputs.shape)}.'
    )
  if not deterministic and rngs is None and max(rates) > 0.0:
    raise ValueError("deterministic=False needs rngs, an nnx.Rngs with a 'dropout' stream.")
  return inputs


class HAN(nnx.Module):
  """Hierarchical attention network (Yang et al. 2016).

  Words: embedding -> bidirectional GRU -> attention pooling into one vector per sentence.
  Sentences: bidirectional GRU over the sentence vectors -> attention pooling into the document
  vector -> dropout -> linear layer. A sentence is real if any of its words is; the GRUs skip
  padding and the poolings give it exactly zero weight. `[B, T]` inputs are one-sentence documents.

  `attention_names`: `word` pooling weights `[B*S, W]` (one row per sentence), `sentence` `[B, S]`.
  """

  attention_names: ClassVar[dict[str, str]] = {
    'word': 'word_pool/weights',
    'sentence': 'sentence_pool/weights',
  }

  def __init__(
    self,
    *,
    vocab_size: int,
    num_classes: int,
    pad_id: int,
    embed_dim: int = 64,
    hidden_dim: int = 32,
    attention_dim: int | None = None,
    score: str = 'dot',
    dropout_rate: float = 0.1,
    rngs: nnx.Rngs,
  ):
    """Builds the model; bad settings raise ValueError before any parameter is created.

    Args:
      vocab_size: vocabulary size V.
      num_classes: classes C (>= 2).
      pad_id: the tokenizer's padding id.
      embed_dim: word embedding size E.
      hidden_dim: GRU size H of each direction; sentence and document vectors have size 2H.
      attention_dim: size A of both poolings' `u_t` and context vectors; default 2H.
      score: the poolings' score `score(u_w, u_t)`, a name in `attention.SCORES`; `'dot'` is the
        paper's `u_t · u_w`.
      dropout_rate: dropout on the document vector before the linear layer.
      rngs: `params` stream for initialisation.
    """
    _check_data_args(vocab_size, num_classes, pad_id)
    check_positive_ints(embed_dim=embed_dim, hidden_dim=hidden_dim)
    if attention_dim is not None:
      check_positive_ints(attention_dim=attention_dim)
    check_score(score)
    check_rate('dropout_rate', dropout_rate)
    self.pad_id = pad_id
    self.dropout_rate = dropout_rate
    self.embed = nnx.Embed(vocab_size, embed_dim, rngs=rngs)
    # One layer each, so GRUEncoder's between-layer dropout never runs.
    gru = dict(num_layers=1, bidirectional=True, dropout_rate=0.0, rngs=rngs)
    self.word_encoder = GRUEncoder(embed_dim, hidden_dim, **gru)
    features = self.word_encoder.out_dim  # 2H
    self.word_pool = AttentionPooling(features, attention_dim, score=score, rngs=rngs)
    self.sentence_encoder = GRUEncoder(features, hidden_dim, **gru)
    self.sentence_pool = AttentionPooling(features, attention_dim, score=score, rngs=rngs)
    self.dropout = nnx.Dropout(dropout_rate)
    self.output = dense(features, num_classes, rngs=rngs)

  def classify(
    self,
    inputs: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Logits float32 `[B, C]` for ids `[B, T]` or `[B, S, W]` (`pad_id` = padding).

    The pooling weights are the taps `attention_names` lists; padding gets exactly 0.

    Args:
      inputs: int ids, sentences `[B, T]` or documents `[B, S, W]`.
      deterministic: False turns dropout on.
      rngs: an `nnx.Rngs` with a 'dropout' stream, needed when dropout is on.
    """
    inputs = _check_call(inputs, deterministic, rngs, (self.dropout_rate,))
    docs = inputs[:, None, :] if inputs.ndim == 2 else inputs  # [B, S, W]
    b, s, w = docs.shape
    word_mask = docs != self.pad_id  # [B, S, W]
    sentence_mask = jnp.any(word_mask, axis=-1)  # [B, S]
    words = lookup(self.embed, docs.reshape(b * s, w))  # [B*S, W, E]
    words = interventions.tap(self, 'embedded', words)  # e.g. for gradient x input
    run = dict(deterministic=deterministic, rngs=rngs)
    h = self.word_encoder(words, word_mask.reshape(b * s, w), **run)  # [B*S, W, 2H]
    sentences, _ = self.word_pool(h, word_mask.reshape(b * s, w))  # [B*S, 2H]
    sentences = sentences.reshape(b, s, -1)  # [B, S, 2H]
    h = self.sentence_encoder(sentences, sentence_mask, **run)  # [B, S, 2H]
    doc, _ = self.sentence_pool(h, sentence_mask)  # [B, 2H]
    return self.output(self.dropout(doc, **run)).astype(jnp.float32)  # [B, C]

  __call__ = classify


class TransformerClassifier(nnx.Module):
  """A Transformer encoder (Vaswani et al. 2017) whose states are pooled into one vector.

  Documents `[B, S, W]` are read as one sequence of S*W tokens at positions 0 .. S*W-1, padding
  masked out. `pooling` picks how the final states become the vector the linear layer classifies:

  - `'cls'`: a learned [CLS] vector (a parameter, not a vocabulary id, without a position) is put
    before the tokens, as in BERT, and its final state is the vector.
  - `'mean'`: the mean of the final states of the real tokens.
  - `'attention'`: HAN's `AttentionPooling` with `pooling_score`.

  `attention_names`: `self` `[B, N, T', T']` per layer; `word` in the shape of the inputs (the
  pooling weights, or for `'cls'` the last layer's head-averaged [CLS] row; none for `'mean'`)
  and, for documents, `sentence` `[B, S]` (the word weights summed per sentence).
  """

  attention_names: ClassVar[dict[str, str]] = {
    'self': 'layers/*/self_attn/weights',
    'word': 'word_weights',
    'sentence': 'sentence_weights',
  }

  def __init__(
    self,
    *,
    vocab_size: int,
    num_classes: int,
    pad_id: int,
    stack: StackConfig = StackConfig(num_layers=2, d_model=128, num_heads=4, d_ff=256, norm='pre'),
    pooling: str = 'attention',
    pooling_score: str = 'dot',
    rngs: nnx.Rngs,
  ):
    """Builds the model; bad settings raise ValueError before any parameter is created.

    Args:
      vocab_size: vocabulary size V.
      num_classes: classes C (>= 2).
      pad_id: the tokenizer's padding id; padded positions are masked out.
      stack: the encoder; `dropout_rate` also acts on the pooled vector, `max_length` is the
        most tokens (S*W for documents) learned positions cover.
      pooling: `'cls'`, `'mean'` or `'attention'`.
      pooling_score: the attention pooling's score, a name in `attention.SCORES`.
      rngs: `params` stream for initialisation.
    """
    _check_data_args(vocab_size, num_classes, pad_id)
    check_choice('pooling', pooling, POOLINGS)
    check_score(pooling_score, 'pooling_score')

    d_model = stack.d_model
    self.pad_id = pad_id
    self.pooling = pooling
    self.dropout_rates = (stack.dropout_rate, stack.attention_dropout_rate)
    self.embed = TokenEmbedding(vocab_size, d_model, rngs=rngs)
    self.positions = make_positions(stack.positions, d_model, stack.max_length, rngs=rngs)
    self.dropout = nnx.Dropout(stack.dropout_rate)
    self.layers, self.final_norm = encoder_stack(stack, rngs=rngs)
    # Unit variance, like the sqrt(D)-scaled token embeddings it sits among.
    self.cls = (
      nnx.Param(nnx.initializers.normal(1.0)(rngs.params(), (d_model,)))
      if pooling == 'cls'
      else None
    )
    self.pool = (
      AttentionPooling(d_model, score=pooling_score, rngs=rngs) if pooling == 'attention' else None
    )
    self.output = dense(d_model, num_classes, rngs=rngs)

  def encode(
    self,
    ids: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> tuple[Array, Array]:
    """Encodes token ids `[B, T]` (`pad_id` = padding).

    Returns:
      `(states [B, T', D], mask [B, T'] True = real)`, where T' = T + 1 with [CLS] first for
      `pooling='cls'`, else T. States are after the final LayerNorm for pre-norm.
    """
    if isinstance(self.positions, LearnedPositions) and ids.shape[1] > self.positions.max_length:
      raise ValueError(
        f'inputs have {ids.shape[1]} tokens (S*W for documents) > max_length='
        f'{self.positions.max_length} of the learned positions.'
      )
    mask = ids != self.pad_id  # [B, T]
    x = self.embed(ids)  # [B, T, D]
    if self.positions is not None:  # float32 encodings
      x = x + self.positions(jnp.arange(ids.shape[1])).astype(x.dtype)
    if self.cls is not None:
      cls = jnp.broadcast_to(self.cls[...].astype(x.dtype), (x.shape[0], 1, x.shape[2]))
      x = jnp.concatenate([cls, x], axis=1)  # [B, T+1, D]
      mask = jnp.concatenate([jnp.ones_like(mask[:, :1]), mask], axis=1)  # [B, T+1]
    x = interventions.tap(self, 'embedded', x)  # the residual stream's start
    run = dict(deterministic=deterministic, rngs=rngs)
    x = self.dropout(x, **run)
    for layer in self.layers:
      x = layer(x, mask[:, None, None, :], **run)
    if self.final_norm is not None:
      x = self.final_norm(x)
    return x, mask

  def classify(
    self,
    inputs: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Logits float32 `[B, C]` for ids `[B, T]` or `[B, S, W]` (`pad_id` = padding).

    The attention weights are the taps `attention_names` lists (`interventions.capture`).

    Args:
      inputs: int ids, sentences `[B, T]` or documents `[B, S, W]`.
      deterministic: False turns dropout on.
      rngs: an `nnx.Rngs` with a 'dropout' stream, needed when dropout is on.
    """
    inputs = _check_call(inputs, deterministic, rngs, self.dropout_rates)
    ids = inputs.reshape(inputs.shape[0], -1)  # [B, T]
    run = dict(deterministic=deterministic, rngs=rngs)
    states, mask = self.encode(ids, **run)
    word_w = None
    if self.pooling == 'cls':
      pooled = states[:, 0]  # [B, D]
      if interventions.active():  # the last layer's attention from [CLS] to the tokens
        word_w = jnp.mean(
          interventions.recorded(self.layers[-1].self_attn, 'weights')[:, :, 0, 1:], axis=1
        )
    elif self.pooling == 'mean':
      m = mask[..., None].astype(states.dtype)  # [B, T, 1]
      pooled = jnp.sum(states * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)  # [B, D]
    else:
      pooled, word_w = self.pool(states, mask)  # [B, D], [B, T]
    if word_w is not None and interventions.active():  # readings only: edits change nothing
      word_w = interventions.tap(self, 'word_weights', word_w.reshape(inputs.shape))
      if inputs.ndim == 3:
        interventions.tap(self, 'sentence_weights', jnp.sum(word_w, axis=-1))  # [B, S]
    return self.output(self.dropout(pooled, **run)).astype(jnp.float32)  # [B, C]

  __call__ = classify
