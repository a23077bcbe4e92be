"""The hyperparameters the Transformer family shares, as frozen dataclasses validated once.

`AttentionConfig` is one multi-head attention layer's configuration, `VariantConfig`
(`models.variant_config`) its part that picks an attention variant. `StackConfig` is a Transformer
stack, an `AttentionConfig` with the stack's other fields: the translation Transformer, the language
models, the classifier and the ViT take one `stack` argument instead of the same keyword arguments
each; the captioner, whose other fields are its own, takes the `VariantConfig` part alone. In an
experiment config all of them are plain fields of `config.model` (`--config.model.num_kv_heads=2`):
`models.build` gathers them into the dataclass, and `models.default_config` lists them at the
model's defaults (the default instance its constructor declares). A bad value is a ValueError naming
the field, before any parameter exists.
"""

import dataclasses
from typing import Any

import attention
from attention.positions import ROPE_LAYOUTS
from models.embeddings import ATTENTION_POSITIONS, POSITIONS
from models.layers import ACTIVATIONS, check_choice, check_positive_ints, check_rate, is_int
from models.mechanism_config import MechanismConfig
from models.variant_config import VariantConfig

NORMS = ('post', 'pre')
NORM_TYPES = ('layernorm', 'rmsnorm')
POSITION_BIASES = ('alibi', 't5')  # the positions that add a bias to the attention scores


def _check_optional(name: str, value: Any, *, above: float) -> None:
  """Raises ValueError unless `value` is None or a number (not a bool) greater than `above`."""
  if value is None:
    return
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > above:
    raise ValueError(f'{name} must be None or a number > {above:g}; got {value!r}.')


@dataclasses.dataclass(frozen=True)
class AttentionConfig(MechanismConfig, VariantConfig):
  """A multi-head attention layer's configuration: its sizes, score, kernel and positions, its
  variant (see `VariantConfig`) and the 2025 mechanisms' fields (see `MechanismConfig`). Frozen
  and validated once, when it is made; the layer keeps it as it is, and a cross-attention
  layer's is `cross_attention()` of its self-attention's.

  Attributes:
    d_model: model width D, the layer's input and output size.
    num_heads: attention heads N.
    d_k: per-head query/key size; None = d_model // num_heads.
    d_v: per-head value size; None = d_model // num_heads.
    qkv_bias: biases on the query, key and value projections (Llama: none; Qwen2: these only).
    out_bias: a bias on the output projection.
    score: attention score kind, a name in `attention.SCORES`.
    attention_impl: kernel for `score='scaled_dot'`, a name in `attention.KERNELS` or None.
    attention_dropout_rate: dropout on the attention weights.
    positions: how positions enter: `'rope'`, `'alibi'` and `'t5'` act in the attention layer;
      `'sinusoidal'`, `'learned'` and `'none'` add nothing there.
    rope_base: the rotary wavelength base (`positions='rope'`; Llama 3: 500000).
    rope_layout: which features rotary positions rotate together: `'pairs'` (2i, 2i+1) or
      `'halves'` (i, i + H/2, Hugging Face's Llama-family layout).
    query_scale: the multiplier of the dot-product scores; None = `1/sqrt(d_k)` (Gemma 3:
      `query_pre_attn_scalar^-1/2`).
    norm_plus_one: every RMSNorm scales by `1 + w`, its learned w starting at 0 (Gemma):
      qk-norm's and, with `norm_type='rmsnorm'`, a stack's.
  """

  d_model: int = 512
  num_heads: int = 8
  d_k: int | None = None
  d_v: int | None = None
  qkv_bias: bool = True
  out_bias: bool = True
  score: str = 'scaled_dot'
  attention_impl: str | None = None
  attention_dropout_rate: float = 0.0
  positions: str = 'none'
  rope_base: float = 10000.0
  rope_layout: str = 'pairs'
  query_scale: float | None = None
  norm_plus_one: bool = False

  def __post_init__(self):
    self._check_variant_fields()
    check_choice('score', self.score, sorted(attention.SCORES))
    check_choice('attention_impl', self.attention_impl, (None, *attention.KERNELS))
    if self.attention_impl is not None and self.score != 'scaled_dot':
      raise ValueError(
        "attention_impl applies only to score='scaled_dot'; got "
        f'attention_impl={self.attention_impl!r} with score={self.score!r}.'
      )
    check_positive_ints(d_model=self.d_model)
    if (
      not is_int(self.num_heads)
      or self.num_heads < 1
      or ((self.d_k is None or self.d_v is None) and self.d_model % self.num_heads)
    ):
      raise ValueError(
        f'd_model={self.d_model} must be divisible by num_heads={self.num_heads} (>= 1) '
        'unless d_k and d_v are given.'
      )
    for name in ('d_k', 'd_v'):
      if getattr(self, name) is not None:
        check_positive_ints(**{name: getattr(self, name)})
    check_choice('qkv_bias', self.qkv_bias, (False, True))
    check_choice('out_bias', self.out_bias, (False, True))
    if isinstance(self.rope_base, bool) or not isinstance(self.rope_base, (int, float)):
      raise ValueError(f'rope_base must be a number > 1; got {self.rope_base!r}.')
    if not self.rope_base > 1:
      raise ValueError(f'rope_base must be a number > 1; got {self.rope_base!r}.')
    _check_optional('query_scale', self.query_scale, above=0)
    if self.query_scale is not None and self.score != 'scaled_dot':
      raise ValueError(
        f"query_scale scales the scaled dot product; it needs score='scaled_dot', got "
        f'score={self.score!r}.'
      )
    check_choice('norm_plus_one', self.norm_plus_one, (False, True))
    check_choice('rope_layout', self.rope_layout, ROPE_LAYOUTS)
    check_rate('attention_dropout_rate', self.attention_dropout_rate)
    check_choice('positions', self.positions, POSITIONS + ATTENTION_POSITIONS)
    if self.positions == 'rope' and self.head_size % 2:
      raise ValueError(
        f'd_k (the per-head query/key size, d_model // num_heads by default) must be '
        f'even for rotary position embeddings, which rotate feature pairs; got '
        f'{self.head_size}.'
      )
    if self.sink_tokens and self.positions not in ('rope', 'alibi', 't5', 'none'):
      raise ValueError(
        f'sink_tokens={self.sink_tokens} moves the kept first tokens next to the '
        f'window, which positions={self.positions!r} fixes in the embeddings; use '
        "positions 'rope', 'alibi', 't5' or 'none'."
      )
    self.kv_heads(self.num_heads)
    self._check_variant_options()
    self.check_mechanisms()

  @property
  def head_size(self) -> int:
    """The per-head query/key size H."""
    return self.d_model // self.num_heads if self.d_k is None else self.d_k

  @property
  def value_size(self) -> int:
    """The per-head value size."""
    return self.d_model // self.num_heads if self.d_v is None else self.d_v

  @property
  def position_bias(self) -> str | None:
    """The bias the positions add to the scores, `'alibi'` or `'t5'`, or None."""
    return self.positions if self.positions in POSITION_BIASES else None

  def variant_options(self) -> dict[str, str]:
    needs = dict(
      score='scores' if self.score != 'scaled_dot' else None,
      attention_impl='implementation' if self.attention_impl is not None else None,
      attention_dropout_rate='dropout_rate' if self.attention_dropout_rate else None,
      positions='bias' if self.position_bias else None,
      query_scale='scale' if self.query_scale is not None else None,
      # With rope the kept tokens are scored apart (and a variant with scores has a window).
      sink_tokens='scores' if self.sink_tokens and self.positions == 'rope' else None,
    )
    return {
      **super().variant_options(),
      **{field: option for field, option in needs.items() if option},
    }

  def kv_heads(self, num_heads: int) -> int:
    """Key/value heads K for `num_heads` query heads; ValueError unless K divides them."""
    kv_heads = num_heads if self.num_kv_heads is None else self.num_kv_heads
    if num_heads % kv_heads:
      raise ValueError(f'num_kv_heads must divide num_heads={num_heads}; got {kv_heads}.')
    return kv_heads

  def cross_attention(self) -> 'AttentionConfig':
    """This configuration for a layer attending to a memory: a query and the memory it reads
    share no positions, so positions, windows and the variant (softmax) are self-attention's."""
    return dataclasses.replace(
      self,
      positions='none',
      attention='softmax',
      rope_dims=None,
      kv_lora_rank=0,
      q_lora_rank=0,
      rope_head_dim=0,
      index_topk=0,
      **self._no_window(),
    )

  def _no_window(self) -> dict[str, Any]:
    """The fields that turn every window off."""
    return dict(window=0, sink_tokens=0)


@dataclasses.dataclass(frozen=True)
class StackConfig(AttentionConfig):
  """A Transformer stack: its attention layers' configuration (see `AttentionConfig`, whose
  fields it has under the same names) and everything else. Its layers take it as their
  self-attention's configuration as it is.

  Attributes:
    num_layers: layers L per stack.
    d_ff: inner width of the feed-forward sublayers.
    dropout_rate: dropout on sublayer outputs and on the embeddings.
    norm: `'post'` (LayerNorm after each residual sum, the original Transformer) or `'pre'`
      (inside the residual branch, plus a final LayerNorm).
    norm_eps: the epsilon of every LayerNorm of the stack (pretrained BERT checkpoints: 1e-12).
    norm_type: `'layernorm'` (scale and bias) or `'rmsnorm'` (scale only, no centring: Llama).
    activation: feed-forward activation, `'relu'`, `'gelu'` (tanh approximation, GPT-2's),
      `'gelu_exact'` (erf) or `'silu'`.
    gated_mlp: the feed-forward is gated, `w_2(act(x w_gate) * x w_1)`: SwiGLU with `'silu'`
      (Llama), GeGLU with `'gelu'`.
    mlp_bias: biases in the feed-forward's projections.
    positions: `'sinusoidal'`, `'learned'`, `'none'` (added to the embeddings), or `'rope'`,
      `'alibi'`, `'t5'` (applied in every self-attention); a model may support fewer.
    max_length: positions a learned table covers.
    sandwich_norm: pre-norm with a second norm on each sublayer's output before the residual
      sum, `x + norm(f(norm(x)))` (Gemma 2 and 3); its norms are `post_norms`.
    global_every: with a `window`, every `global_every`-th layer (layers k-1, 2k-1, ...) attends
      to every key, the others to the window (Gemma 3: 6); 0 = every layer the window.
    rope_base_global: the rotary base of `global_every`'s global layers (Gemma 3: 1,000,000);
      None = `rope_base` in every layer.
    layer_pattern: a hybrid stack: comma-separated `attention.VARIANTS` names that the layers
      take in turn, e.g. `'gated_deltanet,gated_deltanet,gated_deltanet,softmax'` (Qwen3-Next's
      three delta-rule layers to one softmax layer); '' = every layer `attention`.
  """

  num_layers: int = 6
  d_ff: int = 2048
  dropout_rate: float = 0.1
  norm: str = 'post'
  norm_eps: float = 1e-6
  norm_type: str = 'layernorm'
  activation: str = 'relu'
  gated_mlp: bool = False
  mlp_bias: bool = True
  positions: str = 'sinusoidal'
  max_length: int = 512
  sandwich_norm: bool = False
  global_every: int = 0
  rope_base_global: float | None = None
  layer_pattern: str = ''

  def __post_init__(self):
    check_positive_ints(num_layers=self.num_layers, d_ff=self.d_ff, max_length=self.max_length)
    check_rate('dropout_rate', self.dropout_rate)
    check_choice('norm', self.norm, NORMS)
    if (
      isinstance(self.norm_eps, bool)
      or not isinstance(self.norm_eps, (int, float))
      or not 0 < self.norm_eps < 1
    ):
      raise ValueError(f'norm_eps must be a number in (0, 1); got {self.norm_eps!r}.')
    check_choice('norm_type', self.norm_type, NORM_TYPES)
    check_choice('activation', self.activation, ACTIVATIONS)
    check_choice('gated_mlp', self.gated_mlp, (False, True))
    check_choice('mlp_bias', self.mlp_bias, (False, True))
    super().__post_init__()
    if self.positions == 'sinusoidal' and self.d_model % 2:
      raise ValueError(f"d_model must be even for positions='sinusoidal'; got {self.d_model}.")
    self._check_layer_fields()

  def _check_layer_fields(self) -> None:
    """The norm and per-layer fields, once the attention fields are known to be valid."""
    if self.norm_plus_one and self.norm_type != 'rmsnorm':
      raise ValueError(
        f"norm_plus_one scales RMSNorms by 1 + w; it needs norm_type='rmsnorm', got "
        f'norm_type={self.norm_type!r}.'
      )
    check_choice('sandwich_norm', self.sandwich_norm, (False, True))
    if self.sandwich_norm and self.norm != 'pre':
      raise ValueError(
        f"sandwich_norm adds a norm to pre-norm sublayers' outputs; it needs norm='pre', got "
        f'norm={self.norm!r}.'
      )
    if not is_int(self.global_every) or self.global_every < 0:
      raise ValueError(
        f'global_every must be a non-negative integer (0 = no global layers); '
        f'got {self.global_every!r}.'
      )
    if self.global_every and not self.window:
      raise ValueError(
        f'global_every={self.global_every} makes layers global among windowed ones; set '
        'window > 0 too.'
      )
    _check_optional('rope_base_global', self.rope_base_global, above=1)
    self._check_layer_pattern()
    if self.rope_base_global is not None and not (self.global_every and self.positions == 'rope'):
      raise ValueError(
        f'rope_base_global={self.rope_base_global!r} is the rotary base of global layers; it '
        "needs global_every > 0 and positions='rope'."
      )

  @property
  def pattern(self) -> tuple[str, ...]:
    """`layer_pattern`'s variant names in order; `(attention,)` without one."""
    if not self.layer_pattern:
      return (self.attention,)
    return tuple(name.strip() for name in self.layer_pattern.split(','))

  def _check_layer_pattern(self) -> None:
    """Refuses a pattern that names an unknown variant, or sets `attention` too, and builds each
    kind of layer's configuration once, so that a field one of them cannot take is refused now."""
    if not self.layer_pattern:
      return
    if not isinstance(self.layer_pattern, str):
      raise ValueError(f'layer_pattern must be a string; got {self.layer_pattern!r}.')
    unknown = [name for name in self.pattern if name not in attention.VARIANTS]
    if unknown:
      raise ValueError(
        f'layer_pattern={self.layer_pattern!r} names {unknown[0]!r}, which is not an attention '
        f'variant; valid: {", ".join(sorted(attention.VARIANTS))}.'
      )
    if self.attention != 'softmax':
      raise ValueError(
        f"layer_pattern={self.layer_pattern!r} sets every layer's attention; leave "
        f'attention at its default instead of {self.attention!r}.'
      )
    for i in range(min(len(self.pattern), self.num_layers)):
      self.layer_config(i)

  def layer_config(self, i: int) -> 'StackConfig':
    """Layer i's configuration: its variant from `layer_pattern`, its depth for the mechanisms
    that read it; with `global_every`, a global layer's has no window and the base
    `rope_base_global`; every other layer's is this one."""
    config = self
    variant = self.pattern[i % len(self.pattern)]
    if self.layer_pattern or variant == 'differential':
      config = dataclasses.replace(self, layer_pattern='', attention=variant, layer_index=i)
    if not self.global_every or (i + 1) % self.global_every:
      return config
    base = self.rope_base if self.rope_base_global is None else self.rope_base_global
    return dataclasses.replace(config, rope_base=base, **self._no_window())

  def _no_window(self) -> dict[str, Any]:
    return dict(super()._no_window(), global_every=0, rope_base_global=None)

  def check_positions(self, valid: tuple[str, ...]) -> None:
    """Raises ValueError unless `positions` is one the model supports (`valid`)."""
    check_choice('positions', self.positions, valid)
