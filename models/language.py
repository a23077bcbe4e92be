"""Language models: a GPT-style decoder-only Transformer and a BERT-style masked-LM encoder.

Shapes: token ids `[B, T]`, the model's `pad_id` marks padding; logits float32 `[B, T, V]`;
self-attention weights, read by name through `models.interventions`, `[B, L, N, T, T]` (L layers,
N heads). Both are a `TokenStack` (`models.token_stack`) of the Transformer's `EncoderLayer`s:
`DecoderLM` runs them causally, `EncoderMLM` bidirectionally with a key mask.
`positions='rope'`, `'alibi'` and `'t5'` add nothing to the embeddings and act in every
self-attention instead (rotated queries and keys, or a bias on the scores), so scores see relative
positions only.
Both implement `models.interfaces.LanguageModel`; `EncoderMLM` also `Classifier`.

Besides each layer's taps (`models.blocks`: `layers/<i>/resid_pre`, ..., `layers/<i>/residual`),
a teacher-forced pass taps `embeddings` `[B, T, D]`, the token embeddings after the sqrt(D)
scaling of `scale_embeddings` (Gemma's; TransformerLens's `hook_embed`), and, where a table adds
positions to them (learned or sinusoidal), `position_embeddings` `[T, D]`, the same rows for
every sequence (`hook_pos_embed`). Their sum (with BERT's token types and embedding norm, then
dropout) is `layers/0/resid_pre`.
"""

from typing import Any, ClassVar

from flax import nnx
import jax
import jax.numpy as jnp

from models import interventions
from models.layers import ACTIVATIONS, check_choice, check_positive_ints, dense, is_int
from models.stack_config import StackConfig
from models.token_stack import TokenStack

Array = jax.Array


class DecoderLM(TokenStack):
  """GPT-style decoder-only Transformer language model (Radford et al. 2018, 2019).

  Each layer is the Transformer's encoder layer with causal self-attention through
  `attention.scaled_dot_product_attention`, whose chunked kernel serves long contexts. Attention
  is causal only, with no padding mask: with right padding a real position never sees a padded
  one, and `decode_step`, which cannot know future padding, computes exactly `token_logits`.

  Decoding cache (every leaf leads with B, so beam search can repeat and gather it along axis 0):
  `{'offset': int32 [B], 'layers': [state] * L}`, where `offset` (all entries equal) is the
  absolute position P-1 of the token fed at step 0 and `state` the attention variant's: K/V
  buffers `{'k': [B, K, P-1+max_length, d_k], 'v': [..., d_v]}` (K key/value heads), a ring of
  `window` slots, or linear attention's running sums (`attention.variants`).

  `attention_names`: `self` `[B, N, T, T]` per layer.
  """

  attention_names: ClassVar[dict[str, str]] = {'self': 'layers/*/self_attn/weights'}
  causal = True

  def __init__(
    self,
    *,
    vocab_size: int,
    pad_id: int,
    stack: StackConfig = StackConfig(
      norm='pre', activation='gelu', positions='rope', max_length=1024
    ),
    tie_output: bool = True,
    output_bias: bool = True,
    scale_embeddings: bool = True,
    rngs: nnx.Rngs,
  ):
    """Builds the model; bad settings raise ValueError before any parameter is created.

    Args:
      vocab_size: vocabulary size V.
      pad_id: the tokenizer's padding id (right padding; causal attention never reads it).
      stack: the layers; defaults are GPT-2's choices (pre-norm, gelu) with rotary positions.
        `positions='none'` leaves only the causal mask to tell positions apart; `max_length`
        is what a learned table covers.
      tie_output: the output projection is the transposed token embedding.
      output_bias: an untied output projection has a bias (pretrained GPT-2 and Llama: none).
      scale_embeddings: multiply token embeddings by sqrt(D) (False: GPT-2, Llama).
      rngs: `params` stream for initialisation.
    """
    check_choice('tie_output', tie_output, (True, False))
    check_choice('output_bias', output_bias, (True, False))
    super().__init__(
      vocab_size=vocab_size,
      pad_id=pad_id,
      stack=stack,
      scale_embeddings=scale_embeddings,
      rngs=rngs,
    )
    self.output_proj = (
      None
      if tie_output
      else dense(
        stack.d_model, vocab_size, use_bias=output_bias, axes=('embed', 'vocab'), rngs=rngs
      )
    )

  def _logits(self, x: Array) -> Array:
    """Final states `[..., D]` -> next-token logits `[..., V]`, float32 or wider (float64 runs)."""
    logits = self.embed.attend(x) if self.output_proj is None else self.output_proj(x)
    return logits.astype(jnp.promote_types(logits.dtype, jnp.float32))

  def init_decode_cache(self, prompt: Array, max_length: int) -> dict[str, Any]:
    """Prefills the cache with the prompt but its last token, in one parallel pass.

    Args:
      prompt: int ids `[B, P]`, P >= 1; its last token is the first `decode_step`'s input.
      max_length: the number of `decode_step` calls the cache has room for.

    Returns:
      The cache of the class docstring, positions `0 .. P-2` written, offset P-1.
    """
    prompt = jnp.asarray(prompt)
    if prompt.ndim != 2 or prompt.shape[1] < 1 or not jnp.issubdtype(prompt.dtype, jnp.integer):
      raise ValueError(
        f'prompt must be integer ids [B, P] with P >= 1; got {prompt.dtype}{tuple(prompt.shape)}.'
      )
    check_positive_ints(max_length=max_length)
    batch, length = prompt.shape[0], prompt.shape[1] - 1 + max_length
    self._check_length(length, f'a prompt of {prompt.shape[1]} tokens and max_length={max_length}')
    x = self._embed(prompt[:, :-1], 0)  # [B, P-1, D]
    layers = []
    for layer in self.layers:
      cache = layer.self_attn.init_cache(batch, length)
      if x.shape[1]:  # P = 1: nothing to prefill
        x, cache = layer.decode_step(x, cache, 0)
      layers.append(cache)
    return {'offset': jnp.full((batch,), prompt.shape[1] - 1, jnp.int32), 'layers': layers}

  def decode_step(
    self, ids: Array, step: Array, cache: dict[str, Any]
  ) -> tuple[Array, dict[str, Any]]:
    """Logits for the token after `ids [B]`, the token at absolute position offset + step.

    The `tokens_to_logits` callback of `models.decoding`; at step 0 `ids` is the prompt's last
    token. `ids [B, T]` reads a block at positions offset + step .. + T-1 in one pass (a question
    after a compressed context) and returns the logits after its last token. Reads parameters
    only, so it can be closed over inside `jax.jit` + `lax.while_loop`. `step` (int32 scalar,
    may be traced) must stay below the cache's max_length: past the end the buffer write would
    clamp to the last slot.

    Returns:
      `(logits [B, V] float32, the cache with that position written)`.
    """
    position = cache['offset'][0] + step  # all rows share it
    y = self._embed(ids if ids.ndim == 2 else ids[:, None], position)  # [B, T, D]
    layers = []
    for layer, layer_cache in zip(self.layers, cache['layers']):
      y, layer_cache = layer.decode_step(y, layer_cache, position)
      layers.append(layer_cache)
    if self.final_norm is not None:
      y = self.final_norm(y)
    return self._logits(y[:, -1]), {'offset': cache['offset'], 'layers': layers}


class EncoderMLM(TokenStack):
  """BERT-style bidirectional encoder (Devlin et al. 2019): masked-LM head, optional classifier.

  Self-attention sees every real token; padding (`pad_id`) is masked out as a key. The MLM head is
  BERT's: dense D->D, the stack's activation, LayerNorm, then the transposed token embedding plus an
  output bias `[V]`. With BERT's embedding options (see `TokenStack`), post-norm, `norm_eps=1e-12`
  and `activation='gelu_exact'` it is BERT itself: `models.pretrained` loads Hugging Face BERT
  checkpoints into it. With `num_classes`, a classification head reads the mean of the final states
  of the real tokens (the pretraining windows hold no [CLS] token, so there is none to read) through
  a dense D->D tanh layer, dropout and a dense D->C layer. Both heads sit beside the encoder, whose
  parameter names do not depend on `num_classes`, so a pretrained checkpoint loads by name into a
  fine-tuning model.

  `attention_names`: `self` `[B, N, T, T]` per layer; `word` (of `classify`) in the shape of its
  inputs, the last layer's attention each token receives, averaged over heads and real queries.
  """

  attention_names: ClassVar[dict[str, str]] = {
    'self': 'layers/*/self_attn/weights',
    'word': 'word_weights',
  }
  causal = False

  def __init__(
    self,
    *,
    vocab_size: int,
    pad_id: int,
    num_classes: int | None = None,
    stack: StackConfig = StackConfig(norm='pre', activation='gelu', positions='learned'),
    scale_embeddings: bool = True,
    embed_norm: bool = False,
    type_vocab_size: int = 0,
    rngs: nnx.Rngs,
  ):
    """Builds the model; bad settings raise ValueError before any parameter is created.

    Args:
      vocab_size: vocabulary size V.
      pad_id: the tokenizer's padding id; padded positions are masked out as keys.
      num_classes: classes C (>= 2) of the classification head; None builds none.
      stack: the layers; BERT's learned positions and gelu by default (pre-norm; BERT is
        post-norm). `max_length` is what a learned table covers (S*W tokens for documents).
      scale_embeddings: multiply token embeddings by sqrt(D) (False: BERT).
      embed_norm: LayerNorm over the summed embeddings (True: BERT).
      type_vocab_size: token types (segments) of a learned table; 0 = none (BERT: 2).
      rngs: `params` stream for initialisation.
    """
    if num_classes is not None and (not is_int(num_classes) or num_classes < 2):
      raise ValueError(f'num_classes must be None or an integer >= 2; got {num_classes!r}.')
    super().__init__(
      vocab_size=vocab_size,
      pad_id=pad_id,
      stack=stack,
      scale_embeddings=scale_embeddings,
      embed_norm=embed_norm,
      type_vocab_size=type_vocab_size,
      rngs=rngs,
    )
    d_model = stack.d_model
    self.mlm_activation = stack.activation
    self.mlm_dense = dense(d_model, d_model, rngs=rngs)
    self.mlm_norm = nnx.LayerNorm(d_model, epsilon=stack.norm_eps, rngs=rngs)
    self.mlm_bias = nnx.Param(jnp.zeros((vocab_size,), jnp.float32))
    has_head = num_classes is not None
    self.pooler = dense(d_model, d_model, rngs=rngs) if has_head else None
    self.classifier = dense(d_model, num_classes, rngs=rngs) if has_head else None

  def _logits(self, x: Array) -> Array:
    """Final states `[..., D]` -> masked-LM logits `[..., V]` through BERT's MLM head, float32
    or wider (float64 runs)."""
    h = self.mlm_norm(ACTIVATIONS[self.mlm_activation](self.mlm_dense(x)))  # [..., D]
    logits = self.embed.attend(h) + self.mlm_bias[...].astype(h.dtype)
    return logits.astype(jnp.promote_types(logits.dtype, jnp.float32))

  def classify(
    self,
    inputs: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Logits float32 `[B, C]` for ids `[B, T]` or `[B, S, W]` (read as one sequence of S*W).

    The attention weights are the taps `attention_names` lists (`interventions.capture`); the
    word weights give padding 0, and real tokens' weights sum to 1.

    Args:
      inputs: int ids, sentences `[B, T]` or documents `[B, S, W]`; `pad_id` = padding.
      deterministic: False turns dropout on.
      rngs: an `nnx.Rngs` with a 'dropout' stream, needed when dropout is on.
    """
    if self.classifier is None:
      raise ValueError(
        'classify: this EncoderMLM was built without a classification head; '
        'build it with num_classes.'
      )
    inputs = self._check_ids(inputs, deterministic, rngs, documents=True)
    ids = inputs.reshape(inputs.shape[0], -1)  # [B, T]
    run = dict(deterministic=deterministic, rngs=rngs)
    states, mask = self.encode(ids, **run)
    m = mask[..., None].astype(states.dtype)  # [B, T, 1]
    pooled = jnp.sum(states * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)  # [B, D]
    pooled = jnp.tanh(self.pooler(pooled))  # [B, D]
    logits = self.classifier(self.dropout(pooled, **run)).astype(jnp.float32)  # [B, C]
    if interventions.active():  # a reading only: an edit of it changes nothing
      received = jnp.mean(
        interventions.recorded(self.layers[-1].self_attn, 'weights'), axis=1
      )  # [B, T, T]
      queries = mask.astype(received.dtype)  # [B, T]
      word = jnp.einsum('btk,bt->bk', received, queries) / jnp.maximum(
        jnp.sum(queries, axis=1, keepdims=True), 1.0
      )  # [B, T]
      interventions.tap(self, 'word_weights', word.reshape(inputs.shape))
    return logits
