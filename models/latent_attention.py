"""Multi-head latent attention (DeepSeek-V2, section 2.1) as a layer, with DeepSeek-V3.2's sparse
attention (DSA) as an option: `LatentAttention`, the self-attention of an `AttentionConfig` with
`kv_lora_rank > 0` (`models.blocks.self_attention`).

Shapes: inputs `[B, T, D]`; per head, queries `[B, N, T, Dn + Dr]` (`Dn = d_k`, the no-position
part, then `Dr = rope_head_dim` rotary features), values `[B, N, S, Dv]` (`Dv = d_v`); the
latent `[B, S, r]` (`r = kv_lora_rank`) and the shared rotary key `[B, S, Dr]`. Masks broadcast
to `[B, N, T, S]` with True = may attend.
"""

from flax import nnx
import jax
import jax.numpy as jnp

import attention
from models import interventions
from models.layers import RMSNorm, dense, merge_project_heads, project_heads
from models.stack_config import AttentionConfig

Array = jax.Array
# DeepSeek's epsilon of the query and key/value latents' RMSNorms and of the indexer's key
# LayerNorm: fixed in its code, whatever the stack's `norm_eps`.
LATENT_EPS = 1e-6


def _positions(t: int, positions: Array | None) -> Array:
  """`[T]` or `[B, T]` positions, default `0 .. T-1`."""
  return jnp.arange(t) if positions is None else jnp.asarray(positions)


class LightningIndexer(nnx.Module):
  """DeepSeek-V3.2's lightning indexer: `index_heads` heads of `index_head_dim` features that
  score every key for each query (`attention.index_scores`) so that the query keeps its
  `index_topk` best (`attention.top_k_mask`).

  Its queries come from the query latent (DeepSeek's `wq_b` of `q_a_layernorm(q_a_proj(x))`) or,
  where the layer has no query latent (`q_lora_rank=0`, which DeepSeek never builds), from the
  layer's input itself; its key, one per position, is `LayerNorm(x W_k)`, and its per-query head
  weights `x W_weights / sqrt(index_heads)`. Rotary positions turn the first `rope_head_dim`
  features of its queries and keys in the halves layout, whatever the layer's `rope_layout`
  (DeepSeek's indexer rotates halves while its attention rotates pairs).
  """

  def __init__(self, config: AttentionConfig, *, rngs: nnx.Rngs):
    self.config = config
    heads, size, d = config.index_heads, config.index_head_dim, config.d_model
    self.w_q = dense(config.q_lora_rank or d, heads * size, use_bias=False, rngs=rngs)
    self.w_k = dense(d, size, use_bias=False, rngs=rngs)
    self.k_norm = nnx.LayerNorm(size, epsilon=LATENT_EPS, rngs=rngs)
    self.w_weights = dense(d, heads, use_bias=False, rngs=rngs)

  def _rotate(self, x: Array, positions: Array) -> Array:
    """x `[B, T, ..., Di]` with its first `rope_head_dim` features rotated at `positions`
    (`[T]` or `[B, T]`, broadcast over the axes after T)."""
    dr = self.config.rope_head_dim
    if not dr:
      return x
    extra = (None,) * (x.ndim - 3)  # the axes between T and Di
    positions = positions[(..., *extra)]
    return attention.rotary_embedding(
      x, positions, base=self.config.rope_base, layout='halves', dims=dr
    )

  def keys(self, x: Array, positions: Array) -> Array:
    """The indexer keys `[B, S, Di]` of `x [B, S, D]`."""
    return self._rotate(self.k_norm(self.w_k(x)), positions)

  def scores(self, x: Array, source: Array, keys: Array, positions: Array) -> Array:
    """Index scores `[B, T, S]` of the queries of `x [B, T, D]` (and their `source`, the query
    latent or x) over `keys [B, S, Di]`."""
    b, t, _ = x.shape
    q = self.w_q(source).reshape(b, t, self.config.index_heads, -1)  # [B, T, Hi, Di]
    q = self._rotate(q, positions)
    weights = self.w_weights(x) * self.config.index_heads**-0.5  # [B, T, Hi]
    return attention.index_scores(q, keys.astype(q.dtype), weights)


class LatentAttention(nnx.Module):
  """Multi-head latent attention: keys and values from one latent per position.

  Queries are `x W_Q` or, with `q_lora_rank`, `RMSNorm(x W_QA) W_QB`, `[B, N, T, Dn + Dr]`.
  `x W_KVA` gives the latent (its first `kv_lora_rank` features, RMS-normalised) and the rotary
  key (its last `rope_head_dim`, one key shared by the heads); `W_KVB [r, N (Dn + Dv)]` holds each
  head's key up-projection `W_UK` and value up-projection `W_UV`. Rotary positions turn the
  queries' last `rope_head_dim` features and the shared key in `rope_layout` (DeepSeek's
  `rope_interleave=True` rotates adjacent pairs and writes the result in halves; it permutes
  queries and keys alike, so its scores are those of `rope_layout='pairs'` on the unpermuted
  features). Scores are scaled by `query_scale` or `(d_k + rope_head_dim)^-1/2`; `W_O` maps the
  heads back. `qkv_bias` puts biases on `W_QA` and `W_KVA` (DeepSeek's `attention_bias`, with
  `out_bias` on `W_O`); `W_Q`, `W_QB` and `W_KVB` have none.

  A whole sequence runs the plain path: keys and values expanded per head
  (`attention.expand_latent`), then `attention.VARIANTS['softmax']`. The decoding cache holds the
  latent and the rotary key only, `(r + Dr)` numbers per position, and a step runs the absorbed
  kernel (`attention.latent_attention`), which computes the same function over the latents.

  With `index_topk > 0` (DeepSeek Sparse Attention) a `LightningIndexer` chooses the keys each
  query attends to; its keys are cached too, so a decoding step chooses as the whole sequence
  does.

  Taps (`models.interventions`): `queries` `[B, N, T, Dn + Dr]` (no-position part first),
  `keys` `[B, N, S, Dn + Dr]`, `values` `[B, N, S, Dv]`, `weights` `[B, N, T, S]` (inside a
  capture, the weights the output is formed from) and `heads` `[B, N, T, Dv]`; with the indexer
  `index_scores` `[B, T, S]` and `selected` `[B, T, S]` (bool, the keys each query may read; an
  edit of it drives the attention). Decoding steps tap nothing.
  """

  def __init__(self, config: AttentionConfig, *, rngs: nnx.Rngs):
    """Builds the projections; `config.kv_lora_rank` must be > 0."""
    if not config.kv_lora_rank:
      raise ValueError('LatentAttention needs kv_lora_rank > 0 (its latent size).')
    self.config = config
    self.variant = attention.get_variant('softmax')
    n, d, r, q_rank = config.num_heads, config.d_model, config.kv_lora_rank, config.q_lora_rank
    dq, bias = config.head_size + config.rope_head_dim, config.qkv_bias
    heads = dict(axes=(None, 'heads'), rngs=rngs)
    if q_rank:
      self.w_q = None
      self.w_qa = dense(d, q_rank, use_bias=bias, axes=('embed', None), rngs=rngs)
      self.q_norm = RMSNorm(q_rank, epsilon=LATENT_EPS)
      self.w_qb = dense(q_rank, n * dq, use_bias=False, **heads)
    else:
      self.w_q = dense(d, n * dq, use_bias=False, axes=('embed', 'heads'), rngs=rngs)
      self.w_qa = self.q_norm = self.w_qb = None
    self.w_kva = dense(d, r + config.rope_head_dim, use_bias=bias, axes=('embed', None), rngs=rngs)
    self.kv_norm = RMSNorm(r, epsilon=LATENT_EPS)
    self.w_kvb = dense(r, n * (config.head_size + config.value_size), use_bias=False, **heads)
    self.w_o = dense(
      n * config.value_size, d, use_bias=config.out_bias, axes=('heads', 'embed'), rngs=rngs
    )
    self.indexer = LightningIndexer(config, rngs=rngs) if config.index_topk else None

  @property
  def num_heads(self) -> int:
    return self.config.num_heads

  @property
  def scale(self) -> float:
    """The scores' multiplier."""
    config = self.config
    return config.query_scale or (config.head_size + config.rope_head_dim) ** -0.5

  def _rope(self, x: Array, positions: Array) -> Array:
    """Rotary features `[B, (N,) L, Dr]` turned at `positions` (`[L]` or `[B, L]`)."""
    if not self.config.rope_head_dim:
      return x
    if positions.ndim == 2 and x.ndim == 4:
      positions = positions[:, None, :]  # [B, 1, L]: every head
    return attention.rotary_embedding(
      x, positions, base=self.config.rope_base, layout=self.config.rope_layout
    )

  def _queries(self, x: Array, positions: Array) -> tuple[Array, Array, Array]:
    """`(q_nope [B, N, T, Dn], rotated q_rope [B, N, T, Dr], the indexer's query source)`."""
    if self.w_q is None:
      source = self.q_norm(self.w_qa(x))  # [B, T, q_lora_rank]
      q = project_heads(self.w_qb, source, self.num_heads)
    else:
      source = x
      q = project_heads(self.w_q, x, self.num_heads)  # [B, N, T, Dn + Dr]
    dn = self.config.head_size
    return q[..., :dn], self._rope(q[..., dn:], positions), source

  def _latent(self, x: Array, positions: Array) -> tuple[Array, Array]:
    """`(latent [B, S, r], rotated rope key [B, S, Dr])` of `x [B, S, D]`."""
    joint = self.w_kva(x)  # [B, S, r + Dr]
    r = self.config.kv_lora_rank
    return self.kv_norm(joint[..., :r]), self._rope(joint[..., r:], positions)

  def _up(self) -> tuple[Array, Array]:
    """`(W_UK [r, N, Dn], W_UV [r, N, Dv])`, the views of `W_KVB`'s kernel."""
    kernel = self.w_kvb.kernel[...]
    kernel = kernel.reshape(self.config.kv_lora_rank, self.num_heads, -1)  # [r, N, Dn + Dv]
    return kernel[..., : self.config.head_size], kernel[..., self.config.head_size :]

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
    """Self-attention of `x [B, T, D]` through the plain path; returns `[B, T, D]`.

    Args:
      x: the inputs.
      context: must be None: latent attention is self-attention.
      positions: `[T]` or `[B, T]`, default `0 .. T-1`, for rotary positions.
      mask: boolean, broadcastable to `[B, N, T, S]`, True = may attend; with the indexer its
        head axis must have size 1 (the indexer chooses per query, not per head).
      is_causal: also apply the causal mask.
      deterministic: disables attention dropout.
      rngs: an `nnx.Rngs` with a `dropout` stream where dropout is active.
    """
    if context is not None:
      raise ValueError('LatentAttention is self-attention: context must be None.')
    positions = _positions(x.shape[1], positions)
    q_nope, q_rope, source = self._queries(x, positions)
    latent, rope_key = self._latent(x, positions)
    k, v = attention.expand_latent(latent, rope_key, *self._up())  # [B, N, S, Dn + Dr | Dv]
    q = interventions.tap(self, 'queries', jnp.concatenate([q_nope, q_rope], axis=-1))
    k, v = interventions.tap(self, 'keys', k), interventions.tap(self, 'values', v)
    if self.indexer is not None:
      mask = self._selected(x, source, positions, mask, is_causal)  # [B, 1, T, S]
    options = dict(scale=self.scale)
    if self.config.attention_impl is not None:
      options['implementation'] = self.config.attention_impl
    if not deterministic and self.config.attention_dropout_rate > 0.0:
      if rngs is None:
        raise ValueError(
          "LatentAttention: attention dropout needs rngs, an nnx.Rngs with a 'dropout' stream."
        )
      options.update(dropout_rate=self.config.attention_dropout_rate, dropout_rng=rngs.dropout())
    if interventions.active():
      out = self._attend_tapped(q, k, v, mask, is_causal, options)
    else:
      out = self.variant.attend(q, k, v, mask=mask, is_causal=is_causal, **options)
    return merge_project_heads(self.w_o, out)  # [B, T, D]

  def _selected(
    self, x: Array, source: Array, positions: Array, mask: Array | None, is_causal: bool
  ) -> Array:
    """The indexer's choice over a whole sequence as an attention mask `[B, 1, T, S]`: each
    query's `index_topk` best keys among those `mask` and causality let it see."""
    t = x.shape[1]
    if mask is not None and mask.ndim >= 3 and mask.shape[-3] != 1:
      raise ValueError(
        f'LatentAttention with index_topk: the mask {tuple(mask.shape)} must not vary over '
        'heads (axis -3 of size 1): the indexer chooses keys per query.'
      )
    visible = attention.combine_masks(
      None if mask is None else jnp.broadcast_to(mask, (*mask.shape[:-2], t, t)),
      attention.causal_mask(t) if is_causal else None,
    )
    if visible is not None and visible.ndim >= 3:
      visible = visible[..., 0, :, :]  # [B, T, S]: the heads axis dropped
    keys = self.indexer.keys(x, positions)  # [B, S, Di]
    scores = interventions.tap(
      self, 'index_scores', self.indexer.scores(x, source, keys, positions)
    )
    selected = attention.top_k_mask(scores, self.config.index_topk, visible)
    return interventions.tap(self, 'selected', selected)[:, None]  # [B, 1, T, S]

  def _attend_tapped(self, q, k, v, mask, is_causal, options) -> Array:
    """Per-head outputs `[B, N, T, Dv]` as `weights @ values`, the weights and outputs through
    their taps, so that an edit of the weights drives the output."""
    weights = self.variant.weights(q, k, mask=mask, is_causal=is_causal, scale=options['scale'])
    weights = interventions.tap(self, 'weights', weights)  # [B, N, T, S]
    dropped = attention.drop_weights(
      weights, options.get('dropout_rate', 0.0), options.get('dropout_rng')
    )
    out = attention.attend(dropped, v.astype(weights.dtype)).astype(q.dtype)
    return interventions.tap(self, 'heads', out)

  def init_cache(self, batch_size: int, max_length: int) -> dict[str, Array]:
    """The empty decoding cache of `max_length` positions, in `cache_dtype`:
    `{'latent': [B, L, r], 'rope_key': [B, L, Dr]}` and, with the indexer,
    `'index_key': [B, L, Di]`."""
    config, dtype = self.config, jnp.dtype(self.config.cache_dtype)
    sizes = dict(latent=config.kv_lora_rank, rope_key=config.rope_head_dim)
    if self.indexer is not None:
      sizes['index_key'] = config.index_head_dim
    return {name: jnp.zeros((batch_size, max_length, size), dtype) for name, size in sizes.items()}

  def decode_step(
    self, x: Array, cache: dict[str, Array], step: Array
  ) -> tuple[Array, dict[str, Array]]:
    """Causal self-attention for positions `step .. step+T-1` of `x [B, T, D]` over the cache
    (`init_cache`, positions `0 .. step-1` written), through the absorbed kernel.

    Returns:
      `(output [B, T, D], the cache with these positions written)`; no dropout.
    """
    t = x.shape[1]
    positions = step + jnp.arange(t)  # [T]
    q_nope, q_rope, source = self._queries(x, positions)
    latent, rope_key = self._latent(x, positions)
    new = dict(latent=latent, rope_key=rope_key)
    if self.indexer is not None:
      new['index_key'] = self.indexer.keys(x, positions)
    cache = {
      name: jax.lax.dynamic_update_slice_in_dim(
        cache[name], new[name].astype(cache[name].dtype), step, axis=1
      )
      for name in cache
    }
    slots = cache['latent'].shape[1]
    mask = jnp.arange(slots) <= positions[:, None]  # [T, L]: written and not in the future
    if self.indexer is not None:
      scores = self.indexer.scores(x, source, cache['index_key'], positions)  # [B, T, L]
      mask = attention.top_k_mask(scores, self.config.index_topk, mask)
    out = attention.latent_attention(
      q_nope,
      q_rope,
      cache['latent'].astype(q_nope.dtype),
      cache['rope_key'].astype(q_nope.dtype),
      *self._up(),
      mask=mask[..., None, :, :],  # [B|1, 1, T, L]: every head
      scale=self.scale,
    )
    return merge_project_heads(self.w_o, out.astype(x.dtype)), cache
