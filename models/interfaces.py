"""The interfaces a task may rely on, as typing Protocols that model classes are checked against.

A task names the Protocol its models must satisfy (`tasks.Task.interface`); `models.fitting`
lists the registered models that do, and a task rejects any other before it is built.

The methods return what the model computes and nothing else. The attention a task draws is read
by capture (`models.interventions.attention`): every model class lists it as `attention_names`,
`{role: name pattern}`, with the roles its interface's docstring names below (a model may have
fewer, e.g. an LSTM none).
"""

from typing import Any, Protocol, runtime_checkable

from flax import nnx
import jax

Array = jax.Array


@runtime_checkable
class EncoderDecoder(Protocol):
  """Source ids in, target logits out, teacher-forced or one token at a time (translation).

  Both `Transformer` and `Seq2Seq` implement it; `models.generation.generate` needs nothing more.
  """

  def __call__(
    self,
    inputs: Array,
    decoder_inputs: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Logits `[B, T, V]` for source ids `[B, S]` and decoder inputs `[B, T]`.

    Attention roles: `'cross'` per layer `[B, N, T, S]`; `'encoder_self'`, `'decoder_self'`.
    """

  def init_decode_cache(self, inputs: Array, max_length: int) -> Any:
    """Encodes the source once; every leaf of the returned cache leads with B."""

  def decode_step(self, ids: Array, step: Array, cache: Any) -> tuple[Array, Any]:
    """Logits `[B, V]` for the token after `ids [B]` at position `step`, and the new cache."""


@runtime_checkable
class Classifier(Protocol):
  """Token ids in, one class distribution per example out (text classification).

  `HAN` and `TransformerClassifier` implement it. The method has its own name, not `__call__`:
  a runtime Protocol checks method names only, and every module has a `__call__`.
  """

  def classify(
    self,
    inputs: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Logits float32 `[B, C]` for ids int32 `[B, T]` (sentences) or `[B, S, W]` (documents).

    The model's `pad_id` marks padding words, padding sentences and all-padding examples.
    Attention roles: `'word'` pooling weights in the shape of `inputs`, `'sentence'` `[B, S]`
    (documents), `'self'` per layer `[B, N, T, T]`.
    """


@runtime_checkable
class LanguageModel(Protocol):
  """Token ids in, a distribution over the vocabulary at every position out (language modelling).

  `DecoderLM` (next-token logits, causal) and `EncoderMLM` (masked-token logits, bidirectional)
  implement it; their class attribute `causal` tells which objective fits. The method has its own
  name, not `__call__`: a runtime Protocol checks method names only, and every module has a
  `__call__`.
  """

  def token_logits(
    self,
    ids: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Logits float32 `[B, T, V]` for ids int32 `[B, T]`, one row per position.

    Attention role: `'self'` per layer `[B, N, T, T]`.

    The model's `pad_id` marks padding.
    """


@runtime_checkable
class ImageClassifier(Protocol):
  """Images in, one class distribution per image out (image classification).

  `ViT` implements it. The method has its own name, not `__call__`, as for `Classifier`.
  """

  def classify_image(
    self,
    images: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Logits float32 `[B, C]` for images float `[B, H, W, C]` in the model's `image_shape`.

    Attention role: `'self'` per layer `[B, N, T, T]` over the model's tokens (e.g. a class
    token and the patches).
    """


@runtime_checkable
class ImageCaptioner(Protocol):
  """Images in, caption logits out, teacher-forced or one token at a time (captioning).

  `Captioner` implements it; `models.generation.generate` takes images as its inputs. The model's
  `grid`, `(gh, gw)`, says where its R = gh*gw regions lie in the image (row-major).
  """

  def caption_logits(
    self,
    images: Array,
    decoder_inputs: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Logits float32 `[B, T, V]` for images `[B, H, W, C]` and decoder inputs int ids `[B, T]`.

    Attention role: `'cross'`, the words' attention over the R image regions.
    """

  def init_decode_cache(self, images: Array, max_length: int) -> Any:
    """Encodes the images once; every leaf of the returned cache leads with B."""

  def decode_step(self, ids: Array, step: Array, cache: Any) -> tuple[Array, Any]:
    """Logits `[B, V]` for the token after `ids [B]` at position `step`, and the new cache."""


@runtime_checkable
class QuestionAnswerer(Protocol):
  """A story and a question in, a distribution over answer words out (question answering).

  `MemN2N` implements it.
  """

  def answer(
    self,
    story: Array,
    query: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Logits float32 `[B, V]` for stories int ids `[B, M, J]` (M memory slots of J words, the
    oldest first, all-padding slots after the real ones) and questions `[B, J]`.

    Attention role: `'hops'`, each hop's weights over the memory slots.
    """


@runtime_checkable
class SequenceModel(Protocol):
  """A sequence of vectors in, one output vector per step out (algorithmic tasks such as copy).

  `NTM` and `LSTMBaseline` implement it.
  """

  def sequence_logits(
    self,
    inputs: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Logits float32 `[B, T, O]` for inputs float `[B, T, I]` (bits: a sigmoid per output).

    Attention roles, for a model with a memory: `'read'` and `'write'`, `[B, T, heads, N]`
    weightings over its N slots.
    """
