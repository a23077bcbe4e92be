"""Multi-head attention with parameters, dispatching every variant through `attention.VARIANTS`.

Shapes: inputs `[B, T, D]`, context (the keys/values source) `[B, S, D]`. Inside, heads are a
leading dim: queries `[B, N, T, H]`, keys and values `[B, K, S, H]` with K key/value heads
(K = N unless grouped); masks broadcast to `[B, N, T, S]` with True = may attend.
"""

from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp

import attention
from models import interventions
from models.attention_decoding import AttentionDecoding
from models.layers import (
  dense,
  merge_project_heads,
  project_heads,
  project_heads_together,
  score_param_attr,
)
from models.stack_config import AttentionConfig

Array = jax.Array
KV = dict[str, Array]


class MultiHeadAttention(AttentionDecoding):
  """Multi-head attention `concat_n(attend(x W_Q^n, c W_K^n, c W_V^n)) W_O` (Vaswani et al. 3.2.2).

  Configured by one frozen `AttentionConfig`, kept as `config`. How heads attend is its attention
  variant (`attention.VARIANTS`, `config.attention`), called in one place for whole sequences
  (`attend_kv`) and one for decoding steps (`decode_step`); the variant receives only the options
  the configuration sets, each one it declares (`Variant.options`):

  - `'softmax'`: with `score='scaled_dot'` `attention.scaled_dot_product_attention` runs with the
    chosen kernel; every other name in `attention.SCORES` forms its scores with one set of the
    parameters it declares per head, stored as `score_<name without underscores>` with a leading
    N axis (`'general'`: `score_w [N, H, H]`; `'additive'`: `score_wq`, `score_wk [N, H, H]`,
    `score_v [N, H]`; `'cosine'`: a learned `score_scale [N]` starting at `sqrt(H)`, the size of
    scaled dot-product scores of unit-variance queries and keys). `'dot'` and `'general'` are
    unscaled, as in Luong et al.; their softmax saturates as H grows.
  - any other variant of `attention.VARIANTS` (`attention/variants.py` describes each). With
    `attention='linear'` and `feature_map='hedgehog'` the feature maps are learned:
    `query_features [N, H, H]` and `key_features [K, H, H]`, starting at the identity.

  Around the variant, each optional and off by default:

  - `num_kv_heads` K < N: grouped-query attention (K = 1: multi-query); `w_k`, `w_v` project to K
    heads and the decoding cache shrinks by N / K.
  - `positions='rope'`: queries and keys rotated by their positions, before any score; decoding
    caches rotated keys. `'alibi'` (fixed slopes per head) or `'t5'` (a learned `relative_bias
    [32, N]` of bucketed offsets): a bias added to the scores. Queries and keys of `__call__` sit
    at `0 .. T-1` unless `positions` says otherwise.
  - `window`: keys less than `window` positions away only; a decoder keeps a ring buffer of them.
    `sink_tokens`: the first positions stay visible past the window, at the offset they would
    have right before it (StreamingLLM); position biases read that offset, and with rope the
    kept keys are scored against queries rotated to it (`attention.kept_rotary_scores`).
  - `qk_norm`: queries and keys RMS-normalised per head with learned scales `q_norm`, `k_norm [H]`
    (with `norm_plus_one`, scaled by `1 + q_norm`, the parameters starting at 0).
  - `query_scale`: the dot product's multiplier instead of `1/sqrt(d_k)`.
  - `softcap`: scores soft-capped `softcap · tanh(s / softcap)`. `sink`: a learned `sink [N]`
    logit, a null key of value zero that every query may attend to instead.
  - `rope_dims`: RoPE on the first `rope_dims` features of each query and key head only.
  - `output_gate` (gated attention, Qiu et al. 2025): per-head outputs times `sigmoid(x W_gate)`
    (`w_gate`, `[D, N d_v]`, biased with `qkv_bias`) before `W_O`; the gate `[B, N, T, d_v]` is
    the tap `gate`.
  - `attention='differential'` (`attention.differential`): the scalars `lambda_q1`, `lambda_k1`,
    `lambda_q2`, `lambda_k2 [H]` make λ; the pairs' RMS norm takes the stack's `norm_eps`
    (DiffLlama's `rms_norm_eps`; 1e-5, DiffLlama's default, for a config without one). Its
    weights and per-head outputs are per pair of heads, `[B, N/2, T, S]` and `[B, N/2, T, 2 d_v]`.

  Inside `interventions.capture` the layer also forms the weights (`variant.weights`) and taps
  them with its queries, keys, values and per-head outputs; outside, none of that is traced.
  """

  def __init__(self, config: AttentionConfig = AttentionConfig(), *, rngs: nnx.Rngs):
    """Builds the projections and the parameters the configuration needs."""
    self.config = config
    self.variant = attention.get_variant(config.attention)
    d_model, n, kv, h = config.d_model, config.num_heads, self.num_kv_heads, config.head_size
    bias, out_bias = config.qkv_bias, config.out_bias
    # Heads split over the 'heads' axis (tensor parallel), the model width over 'embed' (FSDP).
    self.w_q = dense(d_model, n * h, use_bias=bias, axes=('embed', 'heads'), rngs=rngs)
    self.w_k = dense(d_model, kv * h, use_bias=bias, axes=('embed', 'heads'), rngs=rngs)
    self.w_v = dense(d_model, kv * self.d_v, use_bias=bias, axes=('embed', 'heads'), rngs=rngs)
    self.w_o = dense(n * self.d_v, d_model, use_bias=out_bias, axes=('heads', 'embed'), rngs=rngs)
    self.w_gate = (
      dense(d_model, n * self.d_v, use_bias=bias, axes=('embed', 'heads'), rngs=rngs)
      if config.output_gate
      else None
    )
    # Differential attention's λ; small, as DiffLlama starts them (normal, std 0.1).
    differential = config.attention == 'differential'
    for name in ('lambda_q1', 'lambda_k1', 'lambda_q2', 'lambda_k2'):
      value = nnx.initializers.normal(0.1)(rngs.params(), (h,)) if differential else None
      setattr(self, name, None if value is None else nnx.Param(value))
    sizes = attention.ScoreSizes(q=h, k=h, a=h)
    for param in self.registered_score.params:
      # Each head on its own: on the whole [N, ...] a variance-scaling initialiser would count N
      # into its fans.
      heads = jax.random.split(rngs.params(), n)
      value = jax.vmap(lambda key, param=param: param.initialize(key, sizes))(heads)  # [N, ...]
      setattr(self, score_param_attr(param.name), nnx.Param(value))
    # With norm_plus_one the scale is 1 + the parameter, which then starts at 0.
    start = jnp.zeros if config.norm_plus_one else jnp.ones
    self.q_norm = nnx.Param(start((h,), jnp.float32)) if config.qk_norm else None
    self.k_norm = nnx.Param(start((h,), jnp.float32)) if config.qk_norm else None
    # Hedgehog's feature maps: one W [H, H] per query head and per key head, from the identity.
    hedgehog = config.feature_map == 'hedgehog'
    eye = jnp.eye(h, dtype=jnp.float32)
    self.query_features = nnx.Param(jnp.tile(eye, (n, 1, 1))) if hedgehog else None
    self.key_features = nnx.Param(jnp.tile(eye, (kv, 1, 1))) if hedgehog else None
    # A zero sink starts as "softmax off by one": one extra exp(0) in every denominator.
    self.sink = nnx.Param(jnp.zeros((n,), jnp.float32)) if config.sink else None
    # Small, so training starts close to no position bias.
    self.relative_bias = (
      nnx.Param(nnx.initializers.normal(0.1)(rngs.params(), (attention.T5_NUM_BUCKETS, n)))
      if config.positions == 't5'
      else None
    )

  @property
  def num_heads(self) -> int:
    return self.config.num_heads

  @property
  def num_kv_heads(self) -> int:
    return self.config.kv_heads(self.config.num_heads)

  @property
  def d_k(self) -> int:
    return self.config.head_size

  @property
  def d_v(self) -> int:
    return self.config.value_size

  def _heads(self, x: Array, positions: Array | None, norm: nnx.Param | None) -> Array:
    """Per-head queries or keys `[B, N|K, L, H]`: qk-norm, then RoPE at `positions` (on the
    first `rope_dims` features only, where set)."""
    if norm is not None:
      scale = 1.0 + norm[...] if self.config.norm_plus_one else norm[...]
      x = (attention.rms_normalize(x) * scale).astype(x.dtype)
    if self.config.positions != 'rope':
      return x
    positions = jnp.arange(x.shape[-2]) if positions is None else jnp.asarray(positions)
    if positions.ndim == 2:
      positions = positions[:, None, :]  # [B, 1, L]: every head
    config = self.config
    return attention.rotary_embedding(
      x, positions, base=config.rope_base, layout=config.rope_layout, dims=config.rope_dims
    )

  def _options(self) -> dict[str, Any]:
    """The variant's options (`AttentionOptions._options`), with differential attention's λ."""
    options = super()._options()
    if self.lambda_q1 is not None:
      init = attention.lambda_init(self.config.layer_index)
      lambdas = (self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2)
      lam = attention.differential_lambda(*(p[...] for p in lambdas), init)
      eps = getattr(self.config, 'norm_eps', 1e-5)  # a stack's; see the class docstring
      options['differential'] = attention.Differential(lam, init, eps)
    return options

  def _gate(self, x: Array, out: Array) -> Array:
    """Per-head outputs `out [B, N, T, d_v]` gated by `sigmoid(x W_gate)` of the layer's input
    `x [B, T, D]` (tapped as `gate`), where `output_gate` is set; else `out`."""
    if self.w_gate is None:
      return out
    gates = attention.head_gates(project_heads(self.w_gate, x, self.num_heads))  # [B, N, T, d_v]
    gates = interventions.tap(self, 'gate', gates)
    return attention.gate_heads(out, gates).astype(out.dtype)

  def project_kv(self, context: Array, positions: Array | None = None) -> KV:
    """Keys and values of `context [B, S, D]`: `{'k': [B, K, S, d_k], 'v': [B, K, S, d_v]}`.

    With `rotary`, keys are rotated at `positions` (`[S]` or `[B, S]`, default `0 .. S-1`).
    """
    k = project_heads(self.w_k, context, self.num_kv_heads)  # [B, K, S, d_k]
    return {
      'k': self._heads(k, positions, self.k_norm),
      'v': project_heads(self.w_v, context, self.num_kv_heads),
    }

  def _query(self, x: Array, positions: Array | None) -> Array:
    """Queries `[B, N, T, d_k]` of `x [B, T, D]`, normalised and rotated as the options say."""
    return self._heads(project_heads(self.w_q, x, self.num_heads), positions, self.q_norm)

  def _project_self(self, x: Array, positions: Array | None) -> tuple[Array, KV]:
    """Self-attention's queries and keys/values of `x [B, T, D]`, in one matmul when all three
    have one head size (d_k == d_v).

    Decoding only: a cached step's three `[B, D] x [D, D]` products cost more per FLOP than one
    `[B, D] x [D, 3D]` (decode bench, medium model, same process: 1.74x -> 1.83x the Linen cache),
    and XLA hoists the kernels' concatenation out of the decoding loop. A train step ran 5-7%
    slower with it (the concatenation and the split gradient), so `__call__` keeps three.
    """
    if self.d_k != self.d_v:
      return self._query(x, positions), self.project_kv(x, positions)
    heads = (self.num_heads, self.num_kv_heads, self.num_kv_heads)
    q, k, v = project_heads_together((self.w_q, self.w_k, self.w_v), x, heads)
    return (
      self._heads(q, positions, self.q_norm),
      {'k': self._heads(k, positions, self.k_norm), 'v': v},
    )

  def __call__(
    self,
    x: Array,
    context: Array | None = None,
    *,
    positions: Array | None = None,
    mask: Array | None = None,
    is_causal: bool = False,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Attends from `x` to `context` (self-attention when `context` is None).

    Args:
      x: queries' source `[B, T, D]`.
      context: keys' and values' source `[B, S, D]`; default `x`.
      positions: the positions of x's rows, `[T]` or `[B, T]`, default `0 .. T-1`, for RoPE and
        position biases; in self-attention the keys' too (cross-attention keys sit at `0 .. S-1`).
      mask: boolean, broadcastable to `[B, N, T, S]`; True = may attend.
      is_causal: also apply the causal mask (query i sees keys 0..i).
      deterministic: disables attention dropout.
      rngs: an `nnx.Rngs` with a `dropout` stream; needed when dropout is active.

    Returns:
      The output `[B, T, D]`. Its weights `[B, N, T, S]` are the tap `weights` (before dropout).
    """
    kv = self.project_kv(x, positions) if context is None else self.project_kv(context)
    return self.attend_kv(
      x,
      kv,
      positions=positions,
      mask=mask,
      is_causal=is_causal,
      deterministic=deterministic,
      rngs=rngs,
    )

  def attend_kv(
    self,
    x: Array,
    kv: KV,
    *,
    positions: Array | None = None,
    mask: Array | None = None,
    is_causal: bool = False,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Like `__call__`, with keys and values already projected by `project_kv` (or a cache)."""
    dropout = {}
    if not deterministic and self.config.attention_dropout_rate > 0.0:
      if rngs is None:
        raise ValueError(
          'MultiHeadAttention: deterministic=False with attention dropout needs '
          "rngs, an nnx.Rngs with a 'dropout' stream."
        )
      dropout = dict(dropout_rate=self.config.attention_dropout_rate, dropout_rng=rngs.dropout())
    # A running `interventions.capture` reads and edits these; otherwise each tap is a no-op.
    q = interventions.tap(self, 'queries', self._query(x, positions))  # [B, N, T, d_k]
    k = interventions.tap(self, 'keys', kv['k'])
    v = interventions.tap(self, 'values', kv['v'])
    options = self._options()
    if self.config.sink_tokens:  # visibility and offsets by position, as a streaming cache has them
      q_positions, k_positions = self._whole_positions(q.shape[-2], k.shape[-2], positions)
      window = attention.window_mask(
        q_positions, k_positions, self.config.window, self.config.sink_tokens
      )
      mask = attention.combine_masks(mask, window)
      options.pop('window')
      self._kept_rotary(options, q_positions, k_positions)
    options.update(self._position_options(q.shape[-2], k.shape[-2], positions, is_causal))
    if interventions.active():
      out = self._attend_tapped(q, k, v, mask, is_causal, options, dropout)
    else:
      out = self.variant.attend(q, k, v, mask=mask, is_causal=is_causal, **options, **dropout)
    return merge_project_heads(self.w_o, self._gate(x, out))  # [B, T, D]

  def _attend_tapped(self, q, k, v, mask, is_causal, options, dropout) -> Array:
    """Per-head outputs `[B, N, T, d_v]` as `weights @ values`, the weights (before dropout) and
    the outputs through their taps, so that an edit of the weights drives the output."""
    scoring = {key: value for key, value in options.items() if key not in attention.RUN_OPTIONS}
    weights = self.variant.weights(q, k, mask=mask, is_causal=is_causal, **scoring)
    weights = interventions.tap(self, 'weights', weights)  # [B, N, T, S]
    dropped = attention.drop_weights(
      weights, dropout.get('dropout_rate', 0.0), dropout.get('dropout_rng')
    )
    if 'differential' in scoring:  # pairs of heads: `[B, N/2, T, S]` maps, `2 d_v` values
      out = attention.differential_from_weights(dropped, v, scoring['differential'])
    else:
      values = attention.repeat_kv(v, self.num_heads).astype(weights.dtype)  # [B, N, S, d_v]
      out = attention.attend(dropped, values)
    return interventions.tap(self, 'heads', out.astype(q.dtype))
