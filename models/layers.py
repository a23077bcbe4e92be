"""Shared layers with parameters: projections to and from heads, feed-forward, attention pooling,
and the argument checks every model uses. Multi-head attention is `models.attention_layer`.

Shapes: inputs `[B, T, D]`; heads are a leading dim, `[B, N, T, H]`, the layout the `attention/`
kernels take.
"""

import functools
import numbers
from typing import Any, Callable, Iterable, Sequence

from flax import nnx
import jax
import jax.numpy as jnp

import attention
from models import interventions

Array = jax.Array

# 'gelu' is the tanh approximation (GPT-2); 'gelu_exact' the erf form (BERT's `hidden_act='gelu'`).
ACTIVATIONS = {
  'relu': jax.nn.relu,
  'gelu': jax.nn.gelu,
  'gelu_exact': functools.partial(jax.nn.gelu, approximate=False),
  'silu': jax.nn.silu,
}


def check_choice(field: str, value: Any, valid: Iterable[Any]) -> None:
  """Raises ValueError naming `field` and the valid values unless `value` is one of them."""
  valid = tuple(valid)
  if value not in valid:
    raise ValueError(f'{field} must be one of {", ".join(map(repr, valid))}; got {value!r}.')


def check_rate(field: str, rate: float) -> None:
  """Raises ValueError naming `field` unless the dropout rate is in [0, 1)."""
  if not 0.0 <= rate < 1.0:
    raise ValueError(f'{field} must be in [0, 1); got {rate}.')


def is_int(value: Any) -> bool:
  """Whether `value` is an integer (Python or NumPy, as tokenizers give them), not a bool."""
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_positive_ints(**fields: Any) -> None:
  """Raises ValueError naming the first field that is not a positive integer."""
  for field, value in fields.items():
    if not is_int(value) or value < 1:
      raise ValueError(f'{field} must be a positive integer; got {value!r}.')


def check_vocab(vocab_size: int, pad_id: int) -> None:
  """Raises ValueError unless `vocab_size` is positive and `pad_id` one of its ids."""
  check_positive_ints(vocab_size=vocab_size)
  if not is_int(pad_id) or not 0 <= pad_id < vocab_size:
    raise ValueError(f'pad_id must be an id in [0, vocab_size={vocab_size}); got {pad_id!r}.')


def sharding_metadata(*names: str | None) -> dict[str, Any]:
  """Variable metadata giving a parameter's dimensions logical axis names (None = unnamed).

  `training.sharding.LOGICAL_AXIS_RULES` maps the names ('embed', 'heads', 'mlp', 'vocab') to
  mesh axes. Sharding is applied by the training code, not when the variable is created
  (`eager_sharding=False`), so models build the same with or without a mesh.
  """
  return {'out_sharding': names, 'eager_sharding': False}


def on_rows(matmul: Callable[[Array], Array], x: Array) -> Array:
  """`matmul(x)` for x `[..., D]`, computed on its rows as one matrix `[R, D]` and shaped back.

  The result is the same; the backward pass is not. The weight gradient of `[B, T, D] @ [D, F]`
  contracts two dims (B and T), which XLA:CPU's fast matmul library (YNNPACK) does not take: it
  falls back to slower dots fed by transposed copies. On rows it contracts one. In a SmolLM2 train
  step (8 x 128 tokens, 2 cores) the feed-forward and output layers took 25% less time, the step
  15% less (6.2 -> 5.3 s).
  """
  y = matmul(x.reshape(-1, x.shape[-1]))
  return y.reshape(*x.shape[:-1], y.shape[-1])


class Dense(nnx.Linear):
  """`nnx.Linear` (same parameters, same results) applied `on_rows`."""

  def __call__(self, x: Array) -> Array:
    return on_rows(super().__call__, x)


def dense(
  in_features: int,
  out_features: int,
  *,
  use_bias: bool = True,
  axes: tuple[str | None, str | None] = (None, None),
  rngs: nnx.Rngs,
) -> nnx.Linear:
  """A Glorot-uniform `Dense` layer, the initialisation of the original Transformer code.

  `axes` names the kernel's input and output dimensions for sharding (the bias takes the
  output's); unnamed dimensions are never split.
  """
  metadata = sharding_metadata(*axes) if any(axes) else {}
  bias_metadata = sharding_metadata(axes[1]) if axes[1] else {}
  return Dense(
    in_features,
    out_features,
    use_bias=use_bias,
    kernel_init=nnx.initializers.xavier_uniform(),
    kernel_metadata=metadata,
    bias_metadata=bias_metadata,
    rngs=rngs,
  )


def project_heads(linear: nnx.Linear, x: Array, num_heads: int) -> Array:
  """`split_heads(linear(x))`, `[B, T, D] -> [B, N, T, H]`: `x @ W` on rows (`on_rows`), then
  the heads' transpose.

  Autodiff then gives the gradients a dense layer's orientations: the weight gradient contracts
  the rows, the input gradient multiplies by `Wᵀ` in place. Differentiated as one contraction
  with the `[D, N, H]` view of the kernel (this function's earlier form), XLA:CPU instead made
  a transposed copy of every projection kernel in the forward pass and kept it for the backward
  (SmolLM2's train step at 8 x 128 tokens: 101 MB of temporaries, and no faster).
  """
  (y,) = project_heads_together((linear,), x, (num_heads,))
  return y


def project_heads_together(
  linears: Sequence[nnx.Linear], x: Array, num_heads: Sequence[int]
) -> tuple[Array, ...]:
  """`project_heads(linear, x, n)` for each of `linears` and its head count n, as one matmul.

  The kernels are laid side by side, `[D, sum(n)*H]`, so self-attention's queries, keys and
  values take one product instead of three (small matmuls cost more per FLOP on CPU). The linears
  need one head size H and either all or none of them a bias.
  """
  kernel = jnp.concatenate([linear.kernel[...] for linear in linears], axis=1)  # [D, sum(n)*H]
  y = on_rows(lambda rows: rows @ kernel, x)  # [B, T, sum(n)*H]
  if linears[0].bias is not None:
    y = y + jnp.concatenate([linear.bias[...] for linear in linears])
  y = attention.split_heads(y, sum(num_heads))  # [B, sum(n), T, H]
  starts = [sum(num_heads[:i]) for i in range(1, len(num_heads))]
  return tuple(jnp.split(y, starts, axis=-3))  # each [B, n, T, H]


def merge_project_heads(linear: nnx.Linear, x: Array) -> Array:
  """`linear(merge_heads(x))`, `[B, N, T, H] -> [B, T, D]`, on rows as `project_heads` is."""
  y = on_rows(lambda rows: rows @ linear.kernel[...], attention.merge_heads(x))  # [B, T, D]
  if linear.bias is not None:
    y = y + linear.bias[...]
  return y


def score_param_attr(name: str) -> str:
  """The attribute holding score parameter `name`: `w_q` -> `score_wq`, the checkpoints' names."""
  return 'score_' + name.replace('_', '')


class RMSNorm(nnx.Module):
  """RMSNorm (Zhang and Sennrich 2019): `rms_normalize(x) * w` in float32, its learned `scale` w
  starting at 1 (Llama's; the output in the dtype of x and w together, as `nnx.RMSNorm` gives
  it), or with `plus_one` `rms_normalize(x) * (1 + w)`, w starting at 0, cast back to x's dtype
  (Gemma's, multiplying before the cast as Gemma does).

  The scale multiplies the normalised x, as transformers' Llama does, rather than first the
  `[..., 1]` root mean square as `nnx.RMSNorm` does: XLA kept that product, `[..., D]`, for the
  backward pass (SmolLM2's train step: 135 MB of its 2.2 GB of temporaries).
  """

  def __init__(self, features: int, *, epsilon: float = 1e-6, plus_one: bool = False):
    self.epsilon, self.plus_one = epsilon, plus_one
    self.scale = nnx.Param((jnp.zeros if plus_one else jnp.ones)((features,), jnp.float32))

  def __call__(self, x: Array) -> Array:
    """`[..., D] -> [..., D]`."""
    normed = attention.rms_normalize(x, self.epsilon)  # float32
    scale = self.scale[...]
    if self.plus_one:
      return (normed * (1.0 + scale.astype(jnp.float32))).astype(x.dtype)
    return (normed * scale).astype(jnp.result_type(x.dtype, scale.dtype))


class FeedForward(nnx.Module):
  """Position-wise feed-forward `act(x W_1 + b_1) W_2 + b_2` (section 3.3), or with `gated` the
  gated linear unit `(act(x W_gate) * x W_1) W_2` (Shazeer 2020: SwiGLU with `'silu'`, GeGLU
  with `'gelu'`).

  `activation` is `'relu'` (the paper), `'gelu'` (`jax.nn.gelu`, the tanh approximation GPT-2
  uses), `'gelu_exact'` (the erf form of pretrained BERT checkpoints) or `'silu'` (Llama's).
  """

  def __init__(
    self,
    d_model: int,
    d_ff: int,
    *,
    activation: str = 'relu',
    gated: bool = False,
    use_bias: bool = True,
    rngs: nnx.Rngs,
  ):
    check_choice('activation', activation, ACTIVATIONS)
    self.activation = activation
    self.w_1 = dense(d_model, d_ff, use_bias=use_bias, axes=('embed', 'mlp'), rngs=rngs)
    self.w_2 = dense(d_ff, d_model, use_bias=use_bias, axes=('mlp', 'embed'), rngs=rngs)
    self.w_gate = (
      dense(d_model, d_ff, use_bias=use_bias, axes=('embed', 'mlp'), rngs=rngs) if gated else None
    )

  def __call__(self, x: Array) -> Array:
    """`[..., D] -> [..., D]`."""
    # The activation is recomputed in the backward pass (jax.checkpoint) from the projections,
    # which are kept anyway, rather than its intermediates kept: SmolLM2's train step at 8 x 128
    # tokens needs 180 MB less and runs no slower.
    act = ACTIVATIONS[self.activation]
    if self.w_gate is None:
      return self.w_2(jax.checkpoint(act)(self.w_1(x)))
    return self.w_2(jax.checkpoint(lambda gate, up: act(gate) * up)(self.w_gate(x), self.w_1(x)))


class AttentionPooling(nnx.Module):
  """HAN attention pooling (Yang et al. 2016): `u_t = tanh(W h_t + b)`, `α = softmax(u_t · u_w)`.

  `u_w` is a learned context vector ("which words matter"); the output is `Σ_t α_t h_t`.
  `u_t · u_w` is the paper's score, `'dot'`; any other name in `attention.SCORES` scores the
  context vector (the one query) against the `u_t` (the keys) instead, with the parameters that
  score declares sized Dq = Dk = A and stored as `score_<name without underscores>`, as in
  `MultiHeadAttention`.
  """

  def __init__(
    self, features: int, attention_size: int | None = None, *, score: str = 'dot', rngs: nnx.Rngs
  ):
    """Builds `W [D, A]`, `b [A]`, `u_w [A]` and the score's parameters.

    Args:
      features: size D of the states to pool.
      attention_size: size A of `u_t` and `u_w`; default D.
      score: a name in `attention.SCORES`.
      rngs: `params` stream.
    """
    check_choice('score', score, sorted(attention.SCORES))
    attention_size = features if attention_size is None else attention_size
    self.score = score
    self.registered_score = attention.get_score(score)
    self.proj = dense(features, attention_size, rngs=rngs)
    self.context = nnx.Param(
      nnx.initializers.normal(attention_size**-0.5)(rngs.params(), (attention_size,))
    )
    sizes = attention.ScoreSizes(q=attention_size, k=attention_size, a=attention_size)
    for param in self.registered_score.params:
      setattr(self, score_param_attr(param.name), nnx.Param(param.initialize(rngs.params(), sizes)))

  def __call__(self, h: Array, mask: Array | None = None) -> tuple[Array, Array]:
    """Pools `h [..., T, D]`; `mask [..., T]`, True = real step.

    Returns:
      `(pooled [..., D], weights [..., T])`; masked steps get weight 0, and a fully masked row
      all-zero weights and a zero output.
    """
    keys = jnp.tanh(self.proj(h))  # [..., T, A]
    if self.score == 'dot':
      # The paper's score, through the kernel that has always computed it.
      pooled, weights = attention.attention_pooling(h, self.context[...], mask, keys=keys)
      return self._tapped(h, pooled, weights)
    params = {
      param.name: getattr(self, score_param_attr(param.name))[...]
      for param in self.registered_score.params
    }
    prepared = self.registered_score.prepare_keys(keys, params)  # [..., T, K]
    query = self.context[...][None, :]  # [1, A]: one query
    scores = self.registered_score.scores_prepared(query, prepared, params)[..., 0, :]  # [..., T]
    weights = attention.masked_softmax(scores, mask)  # [..., T]
    return self._tapped(h, jnp.einsum('...t,...td->...d', weights, h), weights)  # [..., D]

  def _tapped(self, h: Array, pooled: Array, weights: Array) -> tuple[Array, Array]:
    """`(pooled, weights)` through their taps (no-ops outside `interventions.capture`); edited
    weights make the output `Σ_t α_t h_t`."""
    edited = interventions.tap(self, 'weights', weights)
    if edited is not weights:
      pooled = jnp.einsum('...t,...td->...d', edited, h)  # [..., D]
    return interventions.tap(self, 'pooled', pooled), edited
