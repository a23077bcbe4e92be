"""The hyperparameters the Transformer family shares, as frozen dataclasses validated once.

`StackConfig` is a Transformer stack: the translation Transformer, the language models, the
classifier and the ViT take one `stack` argument instead of the same keyword arguments each.
`AttentionVariant` is its part that picks an attention variant; the captioner, whose other
fields are its own, takes that part alone. In an experiment config all of them are plain fields
of `config.model` (`--config.model.num_kv_heads=2`): `models.build` gathers them into the
dataclass, and `models.default_config` lists them at the model's defaults (the default instance
its constructor declares). A bad value is a ValueError naming the field, before any parameter
exists.
"""

import dataclasses
from typing import Any

import jax.numpy as jnp

import attention
from models.embeddings import ATTENTION_POSITIONS, POSITIONS
from models.layers import ACTIVATIONS, check_choice, check_positive_ints, check_rate, is_int

NORMS = ('post', 'pre')
CACHE_DTYPES = ('float32', 'bfloat16')


def check_attention_args(
  d_model: int,
  num_heads: int,
  d_k: int | None,
  d_v: int | None,
  score: str,
  implementation: str | None,
  *,
  implementation_field: str = 'implementation',
  rotary: bool = False,
) -> None:
  """Raises ValueError on `MultiHeadAttention` settings no call could run with."""
  check_choice('score', score, sorted(attention.SCORES))
  check_choice(implementation_field, implementation, (None, *attention.KERNELS))
  if implementation is not None and score != 'scaled_dot':
    raise ValueError(
      f"{implementation_field} applies only to score='scaled_dot'; got "
      f'{implementation_field}={implementation!r} with score={score!r}.'
    )
  if (
    not is_int(num_heads) or num_heads < 1 or ((d_k is None or d_v is None) and d_model % num_heads)
  ):
    raise ValueError(
      f'd_model={d_model} must be divisible by num_heads={num_heads} (>= 1) '
      'unless d_k and d_v are given.'
    )
  head_size = d_model // num_heads if d_k is None else d_k
  if rotary and head_size % 2:
    raise ValueError(
      f'd_k (the per-head query/key size, d_model // num_heads by default) must be '
      f'even for rotary position embeddings, which rotate feature pairs; got '
      f'{head_size}.'
    )


@dataclasses.dataclass(frozen=True)
class AttentionVariant:
  """Which attention variant each multi-head attention runs (all off by default).

  Attributes:
    num_kv_heads: key/value heads K (grouped-query attention; 1 = multi-query); None = one per
      query head. The decoding cache shrinks by num_heads / K.
    window: self-attention sees keys less than `window` positions away (sliding window; causal
      models: the last `window` positions); 0 = every key. Decoding keeps only the window.
    sink_tokens: with a window, the first `sink_tokens` positions stay visible to every later
      query, at the offset they would have right before the window (StreamingLLM's attention
      sinks); needs relative position biases or none (`positions` 'alibi', 't5' or 'none').
    qk_norm: RMS-normalise each head's queries and keys (learned scales) before the score.
    softcap: logit soft-capping `softcap · tanh(s / softcap)` (Gemma 2); 0 = off.
    sink: a learned per-head sink logit, a null key every query may attend to instead.
    attention: a name in `attention.VARIANTS`, `'softmax'` or `'linear'` (self-attention).
    cache_dtype: dtype of the decoding K/V cache, `'float32'` or `'bfloat16'`.
  """

  num_kv_heads: int | None = None
  window: int = 0
  sink_tokens: int = 0
  qk_norm: bool = False
  softcap: float = 0.0
  sink: bool = False
  attention: str = 'softmax'
  cache_dtype: str = 'float32'

  def __post_init__(self):
    if self.num_kv_heads is not None:
      check_positive_ints(num_kv_heads=self.num_kv_heads)
    if not is_int(self.window) or self.window < 0:
      raise ValueError(
        f'window must be a non-negative integer (0 = full attention); got {self.window!r}.'
      )
    if not is_int(self.sink_tokens) or self.sink_tokens < 0:
      raise ValueError(
        f'sink_tokens must be a non-negative integer (0 = none); got {self.sink_tokens!r}.'
      )
    if self.sink_tokens and not self.window:
      raise ValueError(
        f'sink_tokens={self.sink_tokens} keeps the first tokens visible past a '
        'sliding window; set window > 0 too.'
      )
    if (
      isinstance(self.softcap, bool)
      or not isinstance(self.softcap, (int, float))
      or self.softcap < 0
    ):
      raise ValueError(f'softcap must be a non-negative number (0 = off); got {self.softcap!r}.')
    check_choice('qk_norm', self.qk_norm, (False, True))
    check_choice('sink', self.sink, (False, True))
    check_choice('attention', self.attention, sorted(attention.VARIANTS))
    check_choice('cache_dtype', self.cache_dtype, CACHE_DTYPES)
    if self.attention == 'linear':
      # Linear attention forms no scores, so nothing that acts on scores applies to it.
      self.refuse_with_linear(window=self.window, softcap=self.softcap, sink=self.sink)

  def refuse_with_linear(self, **settings: Any) -> None:
    """With `attention='linear'`, raises ValueError naming the first of `settings` that is set."""
    if self.attention != 'linear':
      return
    for field, value in settings.items():
      if value:
        raise ValueError(
          f"attention='linear' forms no attention scores, so it cannot take "
          f"{field}={value!r}; use attention='softmax' or leave {field} at its "
          'default.'
        )

  def kv_heads(self, num_heads: int) -> int:
    """Key/value heads K for `num_heads` query heads; ValueError unless K divides them."""
    kv_heads = num_heads if self.num_kv_heads is None else self.num_kv_heads
    if num_heads % kv_heads:
      raise ValueError(f'num_kv_heads must divide num_heads={num_heads}; got {kv_heads}.')
    return kv_heads

  def variant_kwargs(self) -> dict[str, Any]:
    """`MultiHeadAttention`'s keyword arguments for these switches, for a self-attention."""
    return dict(
      num_kv_heads=self.num_kv_heads,
      window=self.window,
      sink_tokens=self.sink_tokens,
      qk_norm=self.qk_norm,
      softcap=float(self.softcap),
      sink=self.sink,
      variant=self.attention,
      cache_dtype=jnp.dtype(self.cache_dtype),
    )


@dataclasses.dataclass(frozen=True)
class StackConfig(AttentionVariant):
  """A Transformer stack: its attention variant (see `AttentionVariant`) and everything else.

  Attributes:
    num_layers: layers L per stack.
    d_model: model width D.
    num_heads: attention heads N.
    d_ff: inner width of the feed-forward sublayers.
    d_k: per-head query/key size; None = d_model // num_heads.
    d_v: per-head value size; None = d_model // num_heads.
    dropout_rate: dropout on sublayer outputs and on the embeddings.
    attention_dropout_rate: dropout on the attention weights.
    norm: `'post'` (LayerNorm after each residual sum, the original Transformer) or `'pre'`
      (inside the residual branch, plus a final LayerNorm).
    norm_eps: the epsilon of every LayerNorm of the stack (pretrained BERT checkpoints: 1e-12).
    activation: feed-forward activation, `'relu'`, `'gelu'` (tanh approximation) or
      `'gelu_exact'` (erf).
    score: attention score kind, a name in `attention.SCORES`.
    attention_impl: kernel for `score='scaled_dot'`, a name in `attention.KERNELS` or None.
    positions: `'sinusoidal'`, `'learned'`, `'none'` (added to the embeddings), or `'rope'`,
      `'alibi'`, `'t5'` (applied in every self-attention); a model may support fewer.
    max_length: positions a learned table covers.
  """

  num_layers: int = 6
  d_model: int = 512
  num_heads: int = 8
  d_ff: int = 2048
  d_k: int | None = None
  d_v: int | None = None
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.0
  norm: str = 'post'
  norm_eps: float = 1e-6
  activation: str = 'relu'
  score: str = 'scaled_dot'
  attention_impl: str | None = None
  positions: str = 'sinusoidal'
  max_length: int = 512

  def __post_init__(self):
    check_positive_ints(
      num_layers=self.num_layers, d_model=self.d_model, d_ff=self.d_ff, max_length=self.max_length
    )
    check_choice('positions', self.positions, POSITIONS + ATTENTION_POSITIONS)
    check_attention_args(
      self.d_model,
      self.num_heads,
      self.d_k,
      self.d_v,
      self.score,
      self.attention_impl,
      implementation_field='attention_impl',
      rotary=self.positions == 'rope',
    )
    check_rate('dropout_rate', self.dropout_rate)
    check_rate('attention_dropout_rate', self.attention_dropout_rate)
    check_choice('norm', self.norm, NORMS)
    if (
      isinstance(self.norm_eps, bool)
      or not isinstance(self.norm_eps, (int, float))
      or not 0 < self.norm_eps < 1
    ):
      raise ValueError(f'norm_eps must be a number in (0, 1); got {self.norm_eps!r}.')
    check_choice('activation', self.activation, ACTIVATIONS)
    if self.positions == 'sinusoidal' and self.d_model % 2:
      raise ValueError(f"d_model must be even for positions='sinusoidal'; got {self.d_model}.")
    if self.sink_tokens and self.positions in ('sinusoidal', 'learned'):
      raise ValueError(
        f'sink_tokens={self.sink_tokens} moves the kept first tokens next to the '
        f'window, which positions={self.positions!r} fixes in the embeddings; use '
        "positions 'alibi', 't5' or 'none'."
      )
    super().__post_init__()
    self.kv_heads(self.num_heads)
    self.refuse_with_linear(
      score=None if self.score == 'scaled_dot' else self.score,
      attention_impl=self.attention_impl,
      attention_dropout_rate=self.attention_dropout_rate,
      positions=self.positions if self.positions in ('alibi', 't5') else None,
    )

  def check_positions(self, valid: tuple[str, ...]) -> None:
    """Raises ValueError unless `positions` is one the model supports (`valid`)."""
    check_choice('positions', self.positions, valid)

  def attention_kwargs(self, *, cross: bool = False) -> dict[str, Any]:
    """`MultiHeadAttention`'s keyword arguments for a self- (or `cross`-) attention layer.

    Position mechanisms, windows and the linear variant act on self-attention only: a query and
    the memory it reads in cross-attention share no positions.
    """
    kwargs = dict(
      num_heads=self.num_heads,
      d_k=self.d_k,
      d_v=self.d_v,
      score=self.score,
      implementation=self.attention_impl,
      dropout_rate=self.attention_dropout_rate,
      **self.variant_kwargs(),
    )
    if cross:
      return dict(kwargs, window=0, sink_tokens=0, variant='softmax')
    return dict(
      kwargs,
      rotary=self.positions == 'rope',
      position_bias=self.positions if self.positions in ('alibi', 't5') else None,
    )
