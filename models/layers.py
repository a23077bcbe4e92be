"""Attention layers with parameters: multi-head attention, feed-forward, attention pooling.

Shapes: inputs `[B, T, D]`, context (the keys/values source) `[B, S, D]`. Inside multi-head
attention heads are a leading dim, `[B, N, T, H]`, the layout the `attention/` kernels take; masks
broadcast to `[B, N, T, S]` with True = may attend.
"""

import numbers
from typing import Any, Iterable, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

import attention

Array = jax.Array
KV = dict[str, Array]

ACTIVATIONS = {"relu": jax.nn.relu, "gelu": jax.nn.gelu}


def check_choice(field: str, value: Any, valid: Iterable[Any]) -> None:
  """Raises ValueError naming `field` and the valid values unless `value` is one of them."""
  valid = tuple(valid)
  if value not in valid:
    raise ValueError(f"{field} must be one of {', '.join(map(repr, valid))}; got {value!r}.")


def check_rate(field: str, rate: float) -> None:
  """Raises ValueError naming `field` unless the dropout rate is in [0, 1)."""
  if not 0.0 <= rate < 1.0:
    raise ValueError(f"{field} must be in [0, 1); got {rate}.")


def is_int(value: Any) -> bool:
  """Whether `value` is an integer (Python or NumPy, as tokenizers give them), not a bool."""
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_positive_ints(**fields: Any) -> None:
  """Raises ValueError naming the first field that is not a positive integer."""
  for field, value in fields.items():
    if not is_int(value) or value < 1:
      raise ValueError(f"{field} must be a positive integer; got {value!r}.")


def check_vocab(vocab_size: int, pad_id: int) -> None:
  """Raises ValueError unless `vocab_size` is positive and `pad_id` one of its ids."""
  check_positive_ints(vocab_size=vocab_size)
  if not is_int(pad_id) or not 0 <= pad_id < vocab_size:
    raise ValueError(f"pad_id must be an id in [0, vocab_size={vocab_size}); got {pad_id!r}.")


def check_attention_args(d_model: int, num_heads: int, d_k: int | None, d_v: int | None,
                         score: str, implementation: str | None, *,
                         implementation_field: str = "implementation",
                         rotary: bool = False) -> None:
  """Raises ValueError on `MultiHeadAttention` settings no call could run with."""
  check_choice("score", score, sorted(attention.SCORES))
  check_choice(implementation_field, implementation, (None, *attention.KERNELS))
  if implementation is not None and score != "scaled_dot":
    raise ValueError(f"{implementation_field} applies only to score='scaled_dot'; got "
                     f"{implementation_field}={implementation!r} with score={score!r}.")
  if num_heads < 1 or ((d_k is None or d_v is None) and d_model % num_heads):
    raise ValueError(f"d_model={d_model} must be divisible by num_heads={num_heads} (>= 1) "
                     "unless d_k and d_v are given.")
  head_size = d_model // num_heads if d_k is None else d_k
  if rotary and head_size % 2:
    raise ValueError(f"d_k (the per-head query/key size, d_model // num_heads by default) must be "
                     f"even for rotary position embeddings, which rotate feature pairs; got "
                     f"{head_size}.")


def sharding_metadata(*names: str | None) -> dict[str, Any]:
  """Variable metadata giving a parameter's dimensions logical axis names (None = unnamed).

  `training.sharding.LOGICAL_AXIS_RULES` maps the names ('embed', 'heads', 'mlp', 'vocab') to
  mesh axes. Sharding is applied by the training code, not when the variable is created
  (`eager_sharding=False`), so models build the same with or without a mesh.
  """
  return {"out_sharding": names, "eager_sharding": False}


def dense(in_features: int, out_features: int, *, use_bias: bool = True,
          axes: tuple[str | None, str | None] = (None, None), rngs: nnx.Rngs) -> nnx.Linear:
  """A Glorot-uniform `nnx.Linear`, the initialisation of the original Transformer code.

  `axes` names the kernel's input and output dimensions for sharding (the bias takes the
  output's); unnamed dimensions are never split.
  """
  metadata = sharding_metadata(*axes) if any(axes) else {}
  bias_metadata = sharding_metadata(axes[1]) if axes[1] else {}
  return nnx.Linear(in_features, out_features, use_bias=use_bias,
                    kernel_init=nnx.initializers.xavier_uniform(), kernel_metadata=metadata,
                    bias_metadata=bias_metadata, rngs=rngs)


@jax.custom_vjp
def _project(x: Array, kernel: Array) -> Array:
  """`[..., T, D] x [D, N, H] -> [..., N, T, H]`; see `project_heads`."""
  y = x @ kernel.reshape(kernel.shape[0], -1)                           # [..., T, N*H]
  return attention.split_heads(y, kernel.shape[1])


def _project_grads(x: Array, kernel: Array) -> Array:
  """`_project` as one `[D, N, H]` contraction, the form whose gradients compile well."""
  return jnp.einsum("...td,dnh->...nth", x, kernel)


@jax.custom_vjp
def _merge(x: Array, kernel: Array) -> Array:
  """`[..., N, T, H] x [N, H, D] -> [..., T, D]`; see `merge_project_heads`."""
  return attention.merge_heads(x) @ kernel.reshape(-1, kernel.shape[-1])


def _merge_grads(x: Array, kernel: Array) -> Array:
  """`_merge` as one contraction over N and H, the form whose gradients compile well."""
  return jnp.einsum("...nth,nhd->...td", x, kernel)


# Forward as plain matmuls, backward as autodiff of the [D, N, H] contractions (the residuals are
# the inputs, as autodiff would keep them): see `project_heads`.
_project.defvjp(lambda x, kernel: (_project(x, kernel), (x, kernel)),
                lambda res, dy: jax.vjp(_project_grads, *res)[1](dy))
_merge.defvjp(lambda x, kernel: (_merge(x, kernel), (x, kernel)),
              lambda res, dy: jax.vjp(_merge_grads, *res)[1](dy))


def project_heads(linear: nnx.Linear, x: Array, num_heads: int) -> Array:
  """`split_heads(linear(x))`, `[B, T, D] -> [B, N, T, H]`, with the `[D, N*H]` kernel viewed as
  `[D, N, H]` (the parameters are unchanged).

  Each direction runs in the orientation XLA:CPU computes fastest. Forward: `x @ W`, then the
  heads' transpose; contracting the `[D, N, H]` view straight into `[B, N, T, H]` compiles to
  `Wᵀ xᵀ`, which transposes the inputs and, for a decoding step's single row, the kernel at
  every step (decode bench, medium model: its encoder ran about 1.3x slower, a cached decoding
  step about 1.2x). Backward: the gradients of that one contraction, whose weight gradients take
  the fast matmul orientation, as Linen's `DenseGeneral` does, instead of dots with both operands
  transposed, about 2x slower.
  """
  (y,) = project_heads_together((linear,), x, num_heads)
  return y


def project_heads_together(linears: Sequence[nnx.Linear], x: Array,
                           num_heads: int) -> tuple[Array, ...]:
  """`project_heads(linear, x, num_heads)` for each of `linears`, as one matmul.

  The kernels are laid side by side, `[D, k*N*H]` viewed as `[D, k*N, H]`, so self-attention's
  queries, keys and values take one product instead of three (small matmuls cost more per FLOP on
  CPU). The linears need equal output sizes and either all or none of them a bias.
  """
  kernel = jnp.concatenate([linear.kernel[...] for linear in linears], axis=1)  # [D, k*N*H]
  heads = len(linears) * num_heads
  y = _project(x, kernel.reshape(kernel.shape[0], heads, -1))          # [B, k*N, T, H]
  if linears[0].bias is not None:
    bias = jnp.concatenate([linear.bias[...] for linear in linears])
    y = y + bias.reshape(heads, 1, -1)                                  # [k*N, 1, H]
  return tuple(jnp.split(y, len(linears), axis=-3))                    # each [B, N, T, H]


def merge_project_heads(linear: nnx.Linear, x: Array) -> Array:
  """`linear(merge_heads(x))`, `[B, N, T, H] -> [B, T, D]`, in the orientations `project_heads`
  describes (forward `merge_heads(x) @ W`, gradients of one contraction over N and H)."""
  kernel = linear.kernel[...]
  y = _merge(x, kernel.reshape(x.shape[-3], x.shape[-1], kernel.shape[-1]))  # [B, T, D]
  if linear.bias is not None:
    y = y + linear.bias[...]
  return y


def _score_param_attr(name: str) -> str:
  """The attribute holding score parameter `name`: `w_q` -> `score_wq`, the checkpoints' names."""
  return "score_" + name.replace("_", "")


class MultiHeadAttention(nnx.Module):
  """Multi-head attention `concat_n(attend(x W_Q^n, c W_K^n, c W_V^n)) W_O` (Vaswani et al. 3.2.2).

  The score kind picks how queries meet keys. `'scaled_dot'` runs
  `attention.scaled_dot_product_attention` with the chosen kernel; every other name in
  `attention.SCORES` runs score -> masked softmax -> weighted sum with the registered function and
  one set of the parameters it declares per head, sized with Dq = Dk = A = H and stored as
  `score_<name without underscores>` with a leading N axis:

  - `'general'`: `score_w [N, H, H]`, the bilinear form `q W kᵀ`.
  - `'additive'`: `score_wq`, `score_wk [N, H, H]` and `score_v [N, H]`, `vᵀ tanh(W_q q + W_k k)`.
  - `'cosine'`: a learned `score_scale [N]`, initialised to `sqrt(H)`: the typical size of scaled
    dot-product scores of unit-variance queries and keys, so both start equally sharp.

  `'dot'` and `'general'` are unscaled, as in Luong et al.; their softmax saturates as H grows,
  which is what the paper's 1/sqrt(H) fixes.

  Incremental decoding: `init_cache` allocates K/V buffers `[B, N, L, H]` and `decode_step` writes
  one position (or a block of them, to prefill a prompt) and attends to the positions written so
  far. For cross-attention, `project_kv` projects the memory once and `attend_kv` reuses it at
  every step.

  `rotary=True` rotates each head's queries and keys by their absolute positions
  (`attention.rotary_embedding`, RoPE) after the projections and before any score or kernel, so
  dot-product scores see relative positions only; values are not rotated. Queries and keys of
  `__call__` sit at `0 .. T-1` unless `positions` says otherwise, and `decode_step` stores
  rotated keys in the cache, so no key is rotated twice.
  """

  def __init__(self, d_model: int, num_heads: int, *, d_k: int | None = None,
               d_v: int | None = None, use_bias: bool = True, score: str = "scaled_dot",
               implementation: str | None = None, dropout_rate: float = 0.0,
               rotary: bool = False, rngs: nnx.Rngs):
    """Builds the projections and score parameters.

    Args:
      d_model: input and output features D.
      num_heads: heads N.
      d_k: per-head query/key size; default `d_model // num_heads`.
      d_v: per-head value size; default `d_model // num_heads`.
      use_bias: whether W_Q, W_K, W_V and W_O have biases.
      score: a name in `attention.SCORES`.
      implementation: kernel for `'scaled_dot'`, a name in `attention.KERNELS`, or None to pick
        the fastest valid one per call; must be None for the other scores.
      dropout_rate: dropout on the attention weights in training.
      rotary: rotate queries and keys by their positions (RoPE); needs an even d_k.
      rngs: `params` stream.
    """
    check_attention_args(d_model, num_heads, d_k, d_v, score, implementation, rotary=rotary)
    check_rate("dropout_rate", dropout_rate)
    self.num_heads = num_heads
    self.d_k = d_model // num_heads if d_k is None else d_k
    self.d_v = d_model // num_heads if d_v is None else d_v
    self.score = score
    self.registered_score = attention.get_score(score)
    self.implementation = implementation
    self.dropout_rate = dropout_rate
    self.rotary = rotary
    n, h = num_heads, self.d_k
    # Heads split over the 'heads' axis (tensor parallel), the model width over 'embed' (FSDP).
    self.w_q = dense(d_model, n * h, use_bias=use_bias, axes=("embed", "heads"), rngs=rngs)
    self.w_k = dense(d_model, n * h, use_bias=use_bias, axes=("embed", "heads"), rngs=rngs)
    self.w_v = dense(d_model, n * self.d_v, use_bias=use_bias, axes=("embed", "heads"), rngs=rngs)
    self.w_o = dense(n * self.d_v, d_model, use_bias=use_bias, axes=("heads", "embed"), rngs=rngs)
    sizes = attention.ScoreSizes(q=h, k=h, a=h)
    for param in self.registered_score.params:
      # Each head on its own: on the whole [N, ...] a variance-scaling initialiser would count N
      # into its fans.
      heads = jax.random.split(rngs.params(), n)
      value = jax.vmap(lambda key, param=param: param.initialize(key, sizes))(heads)  # [N, ...]
      setattr(self, _score_param_attr(param.name), nnx.Param(value))

  def _rotate(self, x: Array, positions: Array | None) -> Array:
    """RoPE on per-head queries or keys `[B, N, L, H]` at `positions` `[L]` or `[B, L]`.

    Positions default to `0 .. L-1`; without `rotary` this is the identity.
    """
    if not self.rotary:
      return x
    positions = jnp.arange(x.shape[-2]) if positions is None else jnp.asarray(positions)
    if positions.ndim == 2:
      positions = positions[:, None, :]                                 # [B, 1, L]: every head
    return attention.rotary_embedding(x, positions)

  def project_kv(self, context: Array, positions: Array | None = None) -> KV:
    """Keys and values of `context [B, S, D]`: `{'k': [B, N, S, d_k], 'v': [B, N, S, d_v]}`.

    With `rotary`, keys are rotated at `positions` (`[S]` or `[B, S]`, default `0 .. S-1`).
    """
    k = project_heads(self.w_k, context, self.num_heads)                # [B, N, S, d_k]
    return {"k": self._rotate(k, positions),
            "v": project_heads(self.w_v, context, self.num_heads)}

  def __call__(self, x: Array, context: Array | None = None, *, positions: Array | None = None,
               mask: Array | None = None, is_causal: bool = False, deterministic: bool = True,
               rngs: nnx.Rngs | None = None, return_weights: bool = False
               ) -> tuple[Array, Array | None]:
    """Attends from `x` to `context` (self-attention when `context` is None).

    Args:
      x: queries' source `[B, T, D]`.
      context: keys' and values' source `[B, S, D]`; default `x`.
      positions: with `rotary`, the positions of x's rows, `[T]` or `[B, T]`, default `0 .. T-1`;
        in self-attention the keys' too (cross-attention keys sit at `0 .. S-1`).
      mask: boolean, broadcastable to `[B, N, T, S]`; True = may attend.
      is_causal: also apply the causal mask (query i sees keys 0..i).
      deterministic: disables attention dropout.
      rngs: an `nnx.Rngs` with a `dropout` stream; needed when dropout is active.
      return_weights: also return the attention weights.

    Returns:
      `(output [B, T, D], weights [B, N, T, S] or None)`; weights are taken before dropout.
    """
    kv = self.project_kv(x, positions) if context is None else self.project_kv(context)
    return self.attend_kv(x, kv, positions=positions, mask=mask, is_causal=is_causal,
                          deterministic=deterministic, rngs=rngs, return_weights=return_weights)

  def attend_kv(self, x: Array, kv: KV, *, positions: Array | None = None,
                mask: Array | None = None, is_causal: bool = False, deterministic: bool = True,
                rngs: nnx.Rngs | None = None, return_weights: bool = False
                ) -> tuple[Array, Array | None]:
    """Like `__call__`, with keys and values already projected by `project_kv` (or a cache).

    With `rotary`, queries are rotated at `positions` (`[T]` or `[B, T]`, default `0 .. T-1`).
    """
    return self._attend(self._query(x, positions), kv, mask=mask, is_causal=is_causal,
                        deterministic=deterministic, rngs=rngs, return_weights=return_weights)

  def _query(self, x: Array, positions: Array | None) -> Array:
    """Queries `[B, N, T, d_k]` of `x [B, T, D]`, rotated at `positions` with `rotary`."""
    return self._rotate(project_heads(self.w_q, x, self.num_heads), positions)

  def _project_self(self, x: Array, positions: Array | None) -> tuple[Array, KV]:
    """Self-attention's queries and keys/values of `x [B, T, D]`, as `_query` and `project_kv`
    compute them, in one matmul when d_k == d_v.

    Decoding only: a cached step's three `[B, D] x [D, D]` products cost more per FLOP than one
    `[B, D] x [D, 3D]` (decode bench, medium model, same process: 1.74x -> 1.83x the Linen cache),
    and XLA hoists the kernels' concatenation out of the decoding loop. A train step ran 5-7%
    slower with it (the concatenation and the split gradient), so `__call__` keeps three.
    """
    if self.d_k != self.d_v:
      return self._query(x, positions), self.project_kv(x, positions)
    q, k, v = project_heads_together((self.w_q, self.w_k, self.w_v), x, self.num_heads)
    return self._rotate(q, positions), {"k": self._rotate(k, positions), "v": v}

  def _attend(self, q: Array, kv: KV, *, mask: Array | None, is_causal: bool = False,
              deterministic: bool = True, rngs: nnx.Rngs | None = None,
              return_weights: bool = False) -> tuple[Array, Array | None]:
    """Queries `q [B, N, T, d_k]` attend to `kv`; returns `(output [B, T, D], weights or None)`."""
    k, v = kv["k"], kv["v"]                                             # [B, N, S, d_k|d_v]
    dropout_rng = None
    if not deterministic and self.dropout_rate > 0.0:
      if rngs is None:
        raise ValueError("MultiHeadAttention: deterministic=False with attention dropout needs "
                         "rngs, an nnx.Rngs with a 'dropout' stream.")
      dropout_rng = rngs.dropout()
    rate = 0.0 if dropout_rng is None else self.dropout_rate
    if self.score == "scaled_dot":
      # Only the reference kernel forms the weights; the others compute the same function.
      impl = "reference" if return_weights else self.implementation
      out = attention.scaled_dot_product_attention(
          q, k, v, mask=mask, is_causal=is_causal, dropout_rate=rate, dropout_rng=dropout_rng,
          return_weights=return_weights, implementation=impl)
      out, weights = out if return_weights else (out, None)
    else:
      if is_causal:
        mask = attention.combine_masks(mask, attention.causal_mask(q.shape[-2], k.shape[-2]))
      # attention.attention's three steps, spelled out so dropout can sit between the softmax
      # and the weighted sum, where scaled_dot_product_attention applies it too.
      weights = attention.masked_softmax(self._scores(q, k), mask)      # [B, N, T, S]
      dropped = weights
      if rate > 0.0:
        keep = jax.random.bernoulli(dropout_rng, 1.0 - rate, weights.shape)
        dropped = jnp.where(keep, weights / (1.0 - rate), 0.0)
      out = attention.attend(dropped, v)                                # [B, N, T, d_v]
      weights = weights if return_weights else None
    return merge_project_heads(self.w_o, out), weights                  # [B, T, D]

  def _scores(self, q: Array, k: Array) -> Array:
    """The registered score of q `[B, N, T, H]` and k `[B, N, S, H]`, `[B, N, T, S]`."""
    params = {param.name: getattr(self, _score_param_attr(param.name))[...]
              for param in self.registered_score.params}                # each [N, ...]
    # Per-head parameters lead with N; vmap pairs them with the heads axis (-3) of q and k.
    per_head = lambda q, k, params: self.registered_score(q, k, **params)
    return jax.vmap(per_head, in_axes=(-3, -3, 0), out_axes=-3)(q, k, params)

  def init_cache(self, batch_size: int, max_length: int, dtype: Any = jnp.float32) -> KV:
    """Zeroed self-attention K/V buffers `{'k': [B, N, L, d_k], 'v': [B, N, L, d_v]}`."""
    shape = (batch_size, self.num_heads, max_length)
    return {"k": jnp.zeros((*shape, self.d_k), dtype), "v": jnp.zeros((*shape, self.d_v), dtype)}

  def decode_step(self, x: Array, cache: KV, step: Array) -> tuple[Array, KV]:
    """Causal self-attention for new positions, without recomputing the earlier ones.

    Args:
      x: the inputs at positions `step .. step+T-1`, `[B, T, D]`: T = 1 when decoding token by
        token, a whole prompt when prefilling the cache in one parallel pass.
      cache: K/V buffers from `init_cache` holding positions `0 .. step-1`.
      step: int32 scalar, the 0-based position of x's first row; may be traced.

    Returns:
      `(output [B, T, D], cache with positions step .. step+T-1 written)`; no dropout.
    """
    positions = step + jnp.arange(x.shape[1])                           # [T]
    q, new = self._project_self(x, positions)                           # [B, N, T, H] each
    cache = {name: jax.lax.dynamic_update_slice_in_dim(cache[name], new[name], step, axis=2)
             for name in ("k", "v")}
    mask = attention.causal_mask(x.shape[1], cache["k"].shape[2], offset=step)  # [T, L]
    out, _ = self._attend(q, cache, mask=mask)
    return out, cache


class FeedForward(nnx.Module):
  """Position-wise feed-forward `act(x W_1 + b_1) W_2 + b_2` (section 3.3).

  `activation` is `'relu'` (the paper) or `'gelu'` (`jax.nn.gelu`, the tanh approximation BERT and
  GPT-2 use).
  """

  def __init__(self, d_model: int, d_ff: int, *, activation: str = "relu", rngs: nnx.Rngs):
    check_choice("activation", activation, ACTIVATIONS)
    self.activation = activation
    self.w_1 = dense(d_model, d_ff, axes=("embed", "mlp"), rngs=rngs)
    self.w_2 = dense(d_ff, d_model, axes=("mlp", "embed"), rngs=rngs)

  def __call__(self, x: Array) -> Array:
    """`[..., D] -> [..., D]`."""
    return self.w_2(ACTIVATIONS[self.activation](self.w_1(x)))


class AttentionPooling(nnx.Module):
  """HAN attention pooling (Yang et al. 2016): `u_t = tanh(W h_t + b)`, `α = softmax(u_t · u_w)`.

  `u_w` is a learned context vector ("which words matter"); the output is `Σ_t α_t h_t`.
  `u_t · u_w` is the paper's score, `'dot'`; any other name in `attention.SCORES` scores the
  context vector (the one query) against the `u_t` (the keys) instead, with the parameters that
  score declares sized Dq = Dk = A and stored as `score_<name without underscores>`, as in
  `MultiHeadAttention`.
  """

  def __init__(self, features: int, attention_size: int | None = None, *, score: str = "dot",
               rngs: nnx.Rngs):
    """Builds `W [D, A]`, `b [A]`, `u_w [A]` and the score's parameters.

    Args:
      features: size D of the states to pool.
      attention_size: size A of `u_t` and `u_w`; default D.
      score: a name in `attention.SCORES`.
      rngs: `params` stream.
    """
    check_choice("score", score, sorted(attention.SCORES))
    attention_size = features if attention_size is None else attention_size
    self.score = score
    self.registered_score = attention.get_score(score)
    self.proj = dense(features, attention_size, rngs=rngs)
    self.context = nnx.Param(
        nnx.initializers.normal(attention_size ** -0.5)(rngs.params(), (attention_size,)))
    sizes = attention.ScoreSizes(q=attention_size, k=attention_size, a=attention_size)
    for param in self.registered_score.params:
      setattr(self, _score_param_attr(param.name),
              nnx.Param(param.initialize(rngs.params(), sizes)))

  def __call__(self, h: Array, mask: Array | None = None) -> tuple[Array, Array]:
    """Pools `h [..., T, D]`; `mask [..., T]`, True = real step.

    Returns:
      `(pooled [..., D], weights [..., T])`; masked steps get weight 0, and a fully masked row
      all-zero weights and a zero output.
    """
    keys = jnp.tanh(self.proj(h))                                       # [..., T, A]
    if self.score == "dot":
      # The paper's score, through the kernel that has always computed it.
      return attention.attention_pooling(h, self.context[...], mask, keys=keys)
    params = {param.name: getattr(self, _score_param_attr(param.name))[...]
              for param in self.registered_score.params}
    prepared = self.registered_score.prepare_keys(keys, params)        # [..., T, K]
    query = self.context[...][None, :]                                  # [1, A]: one query
    scores = self.registered_score.scores_prepared(query, prepared, params)[..., 0, :]  # [..., T]
    weights = attention.masked_softmax(scores, mask)                    # [..., T]
    return jnp.einsum("...t,...td->...d", weights, h), weights          # [..., D]
