"""Which attention variant a multi-head attention runs: `VariantConfig`, a frozen dataclass
validated once, the base of `models.stack_config`'s `AttentionConfig` and `StackConfig`.

The captioner, whose other fields are its own, takes it alone (its `variant` argument); every
other model of the Transformer family takes it as part of its `stack`. A set field that the chosen
variant (`attention.VARIANTS`) declares no option for is a ValueError naming the field and the
variants that take it.
"""

import dataclasses
from typing import Any

import attention
from models.layers import check_choice, check_positive_ints, is_int

CACHE_DTYPES = ('float32', 'bfloat16')
FEATURE_MAPS = ('elu', 'hedgehog')  # linear attention's; the first is the default


def _check_number(name: str, value: Any) -> None:
  """Raises ValueError unless `value` is a non-negative number (not a bool)."""
  if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
    raise ValueError(f'{name} must be a non-negative number (0 = off); got {value!r}.')


@dataclasses.dataclass(frozen=True)
class VariantConfig:
  """Which attention variant each multi-head attention runs (all off by default).

  Attributes:
    num_kv_heads: key/value heads K (grouped-query attention; 1 = multi-query); None = one per
      query head. The decoding cache shrinks by num_heads / K.
    window: self-attention sees keys less than `window` positions away (sliding window; causal
      models: the last `window` positions); 0 = every key. Decoding keeps only the window.
    sink_tokens: with a window, the first `sink_tokens` positions stay visible to every later
      query, at the offset they would have right before the window (StreamingLLM's attention
      sinks); needs positions that act in the attention (`positions` 'rope', 'alibi', 't5')
      or none.
    qk_norm: RMS-normalise each head's queries and keys (learned scales) before the score.
    softcap: logit soft-capping `softcap · tanh(s / softcap)` (Gemma 2); 0 = off.
    sink: a learned per-head sink logit, a null key every query may attend to instead.
    attention: the variant, a name in `attention.VARIANTS` (self-attention; cross-attention is
      softmax).
    feature_map: linear attention's feature map, a name in `FEATURE_MAPS`: `'elu'` (elu + 1,
      fixed) or `'hedgehog'` (learned per head, `[softmax(x W), softmax(-x W)]` with `W [H, H]`
      starting at the identity: LoLCATs' map, which attention transfer trains).
    cache_dtype: dtype of the decoding K/V cache, `'float32'` or `'bfloat16'`.
  """

  num_kv_heads: int | None = None
  window: int = 0
  sink_tokens: int = 0
  qk_norm: bool = False
  softcap: float = 0.0
  sink: bool = False
  attention: str = 'softmax'
  feature_map: str = 'elu'
  cache_dtype: str = 'float32'

  def __post_init__(self):
    self._check_variant_fields()
    self._check_variant_options()

  def _check_variant_fields(self) -> None:
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
    _check_number('softcap', self.softcap)
    check_choice('qk_norm', self.qk_norm, (False, True))
    check_choice('sink', self.sink, (False, True))
    check_choice('attention', self.attention, sorted(attention.VARIANTS))
    check_choice('feature_map', self.feature_map, FEATURE_MAPS)
    check_choice('cache_dtype', self.cache_dtype, CACHE_DTYPES)

  def _check_variant_options(self) -> None:
    """Refuses a set field whose variant option the variant does not declare; called last, when
    every field is known to be valid."""
    options = attention.get_variant(self.attention).options
    for field, option in self.variant_options().items():
      if option not in options:
        takes = ', '.join(sorted(options)) or 'none'
        takers = [name for name, variant in attention.VARIANTS.items() if option in variant.options]
        raise ValueError(
          f'attention={self.attention!r} cannot take {field}={getattr(self, field)!r}, which '
          f'needs the variant option {option!r} (the options it takes: {takes}); use '
          f'attention={" or ".join(map(repr, takers))} or leave {field} at its default.'
        )

  def variant_options(self) -> dict[str, str]:
    """`{field: the option of attention.variants.OPTIONS it needs}` for each field that is set."""
    needs = dict(window='window', sink_tokens='window', softcap='softcap', sink='sink')
    options = {field: option for field, option in needs.items() if getattr(self, field)}
    if self.feature_map != FEATURE_MAPS[0]:
      options['feature_map'] = 'feature_weights'
    return options
