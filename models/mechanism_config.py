"""The 2025 attention mechanisms' fields of an attention layer's configuration: `MechanismConfig`,
a base of `models.stack_config.AttentionConfig` (all off by default).

Each mechanism is one switch away from the same model:

- gated attention (Qiu et al. 2025): `output_gate`, a head-specific sigmoid gate on the attention's
  output before `W_O`, computed from the layer's (normed) input, as Qwen3-Next's attention has it;
- multi-head latent attention (DeepSeek-V2 2.1): `kv_lora_rank` > 0, with `q_lora_rank` and the
  decoupled rotary key's `rope_head_dim` (`d_k` is then the no-position part, `d_v` the value's);
- DeepSeek Sparse Attention (DeepSeek-V3.2): `index_topk` > 0, a lightning indexer of
  `index_heads` heads of `index_head_dim` choosing each query's keys (on a latent layer);
- differential attention (Ye et al. 2025) and (gated) DeltaNet (Yang et al. 2025): variants of
  `attention.VARIANTS` (`attention='differential'`, `'deltanet'`, `'gated_deltanet'`), the latter
  with its own head sizes (`delta_*`) and short convolution (`conv_size`).

`check_mechanisms` refuses a wrong field in one sentence before any parameter exists.
"""

import dataclasses

from models.layers import check_choice, check_positive_ints, is_int

DELTA_RULE = ('deltanet', 'gated_deltanet')  # the variants whose layer is a delta-rule layer


def _non_negative_int(name: str, value) -> None:
  if not is_int(value) or value < 0:
    raise ValueError(f'{name} must be a non-negative integer (0 = off); got {value!r}.')


@dataclasses.dataclass(frozen=True)
class MechanismConfig:
  """The fields of the 2025 mechanisms (see the module docstring).

  Attributes:
    output_gate: gate each head's output elementwise by `sigmoid(x W_gate)` before `W_O`.
    rope_dims: rotary positions on the first `rope_dims` features of each head only (Qwen3-Next's
      `partial_rotary_factor`); None = all of them.
    kv_lora_rank: multi-head latent attention's joint key/value latent size; 0 = off.
    q_lora_rank: with a latent, the queries' low-rank compression; 0 = a full-rank `W_Q`.
    rope_head_dim: with a latent, the decoupled rotary key's size, one key shared by the heads.
    index_topk: DeepSeek Sparse Attention: each query attends to the `index_topk` keys its
      lightning indexer scores highest; 0 = off.
    index_heads: the lightning indexer's heads (with index_topk).
    index_head_dim: the lightning indexer's per-head size.
    delta_heads: a delta-rule layer's value heads; None = num_heads.
    delta_key_heads: a delta-rule layer's query/key heads, dividing delta_heads; None =
      delta_heads.
    delta_key_dim: a delta-rule layer's per-head query/key size; None = the head size.
    delta_value_dim: a delta-rule layer's per-head value size; None = the value size.
    conv_size: a delta-rule layer's short causal convolution's width over its queries, keys and
      values (Qwen3-Next: 4).
    layer_index: the layer's 0-based depth, set by the stack (differential attention's initial
      lambda depends on it).
  """

  output_gate: bool = False
  rope_dims: int | None = None
  kv_lora_rank: int = 0
  q_lora_rank: int = 0
  rope_head_dim: int = 0
  index_topk: int = 0
  index_heads: int = 4
  index_head_dim: int = 32
  delta_heads: int | None = None
  delta_key_heads: int | None = None
  delta_key_dim: int | None = None
  delta_value_dim: int | None = None
  conv_size: int = 4
  layer_index: int = 0

  def check_mechanisms(self) -> None:
    """Refuses a wrong mechanism field in one sentence; called by `AttentionConfig` once its own
    fields are valid (so `d_model`, `num_heads`, `attention` and `positions` are)."""
    check_choice('output_gate', self.output_gate, (False, True))
    for name in ('kv_lora_rank', 'q_lora_rank', 'rope_head_dim', 'index_topk', 'layer_index'):
      _non_negative_int(name, getattr(self, name))
    check_positive_ints(
      index_heads=self.index_heads, index_head_dim=self.index_head_dim, conv_size=self.conv_size
    )
    for name in ('delta_heads', 'delta_key_heads', 'delta_key_dim', 'delta_value_dim'):
      if getattr(self, name) is not None:
        check_positive_ints(**{name: getattr(self, name)})
    self._check_rope_dims()
    self._check_differential()
    self._check_latent()
    self._check_delta_rule()

  def _check_rope_dims(self) -> None:
    if self.rope_dims is None:
      return
    check_positive_ints(rope_dims=self.rope_dims)
    if self.positions != 'rope' or self.rope_dims % 2 or self.rope_dims > self.head_size:
      raise ValueError(
        f'rope_dims={self.rope_dims} rotates the first features of each head; it needs '
        f"positions='rope' and an even number at most the head size {self.head_size}."
      )
    if self.sink_tokens:  # kept first tokens are re-rotated over every feature of the head
      raise ValueError(f'rope_dims={self.rope_dims} cannot be combined with sink_tokens.')

  def _check_differential(self) -> None:
    if self.attention != 'differential':
      return
    kv_heads = self.num_heads if self.num_kv_heads is None else self.num_kv_heads
    if self.num_heads % 2 or kv_heads % 2:
      raise ValueError(
        "attention='differential' pairs heads n and n + N/2 and their values: num_heads and "
        f'num_kv_heads must be even; got {self.num_heads} and {kv_heads}.'
      )
    if self.output_gate:
      raise ValueError("output_gate gates single heads; attention='differential' outputs pairs.")

  def _check_latent(self) -> None:
    latent = ('q_lora_rank', 'rope_head_dim', 'index_topk')
    if not self.kv_lora_rank:
      for name in latent:
        if getattr(self, name):
          raise ValueError(
            f'{name}={getattr(self, name)} is a field of multi-head latent attention; set '
            'kv_lora_rank > 0 too.'
          )
      return
    if self.kv_lora_rank >= self.d_model:
      raise ValueError(
        f'kv_lora_rank={self.kv_lora_rank} must be smaller than the width '
        f'd_model={self.d_model}: the latent compresses keys and values.'
      )
    if self.q_lora_rank >= self.d_model:
      raise ValueError(
        f'q_lora_rank={self.q_lora_rank} must be smaller than the width d_model={self.d_model}.'
      )
    if self.rope_head_dim % 2 or (self.positions == 'rope') != bool(self.rope_head_dim):
      raise ValueError(
        f'rope_head_dim={self.rope_head_dim} is the decoupled rotary key of latent attention: '
        "an even number > 0 with positions='rope', 0 with any other positions."
      )
    if self.attention not in ('softmax',) or self.num_kv_heads is not None:
      raise ValueError(
        f'kv_lora_rank={self.kv_lora_rank} (latent attention) runs softmax attention over '
        f'every head; got attention={self.attention!r}, num_kv_heads={self.num_kv_heads!r}.'
      )
    if self.index_topk and self.index_topk > self.max_context:
      raise ValueError(
        f'index_topk={self.index_topk} must be at most the context, {self.max_context} positions.'
      )
    # What models.latent_attention.LatentAttention does not compute (its cache keeps every
    # position, its scores are the scaled dot product of the latent and the rotary key).
    defaults = dict(window=0, sink_tokens=0, qk_norm=False, softcap=0.0, sink=False)
    defaults.update(score='scaled_dot', rope_dims=None, output_gate=False)
    if self.position_bias is not None:
      defaults['positions'] = 'rope'
    for name, off in defaults.items():
      if getattr(self, name) != off:
        raise ValueError(
          f'{name}={getattr(self, name)!r} is not available with kv_lora_rank > 0 (latent '
          'attention); leave it at its default.'
        )
    if self.index_topk and self.index_head_dim < self.rope_head_dim:
      raise ValueError(
        f'index_head_dim={self.index_head_dim} must be at least rope_head_dim='
        f'{self.rope_head_dim}: the indexer rotates its first rope_head_dim features.'
      )

  def _check_delta_rule(self) -> None:
    if self.attention not in DELTA_RULE:
      return
    heads = self.num_heads if self.delta_heads is None else self.delta_heads
    key_heads = heads if self.delta_key_heads is None else self.delta_key_heads
    if heads % key_heads:
      raise ValueError(
        f'delta_key_heads={key_heads} must divide the delta-rule value heads {heads}.'
      )
    # A window is refused as a variant option, a latent by _check_latent. output_gate and
    # qk_norm stay allowed: a hybrid stack's layers (Qwen3-Next's) share them, and they are its
    # softmax layers'; a delta-rule layer has its own output gate and L2-normalises q and k.

  @property
  def max_context(self) -> int:
    """The longest context a layer of this configuration sees (`max_length` where the stack has
    one, else unbounded)."""
    return getattr(self, 'max_length', 2**31 - 1)
