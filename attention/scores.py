"""Score functions: how much each query should look at each key.

Every function maps queries `q: [..., T, D]` and keys `k: [..., S, D]` (leading dims broadcast, e.g.
batch and heads) to unnormalised scores `[..., T, S]`. Turn them into weights with
`attention.masked_softmax`.

`SCORES` registers each function as a `Score` that also declares the parameters it learns, so the
layers in `models/` can build any registered score without knowing it by name.
"""

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array
ScoreFn = Callable[..., Array]
Initializer = Callable[[Array, tuple[int, ...], Any], Array]  # jax.nn.initializers' signature


def check_qk(q: Array, k: Array, name: str = 'scores') -> None:
  """Raises ValueError unless q `[..., T, D]` and k `[..., S, D]` share a feature size."""
  if q.ndim < 2 or k.ndim < 2:
    raise ValueError(
      f'{name}: queries and keys need at least 2 dims [..., length, features], '
      f'got q{tuple(q.shape)} and k{tuple(k.shape)}.'
    )
  if q.shape[-1] != k.shape[-1]:
    raise ValueError(
      f'{name}: query features D={q.shape[-1]} differ from key features D={k.shape[-1]} '
      f'(q{tuple(q.shape)}, k{tuple(k.shape)}).'
    )


def dot_scores(q: Array, k: Array) -> Array:
  """Luong "dot" score `q · k`.

  Args:
    q: queries `[..., T, D]`.
    k: keys `[..., S, D]`.

  Returns:
    Scores `[..., T, S]`.
  """
  check_qk(q, k, 'dot_scores')
  return jnp.einsum('...td,...sd->...ts', q, k)


def scaled_dot_scores(
  q: Array, k: Array, scale: float | None = None, temperature: float | None = None
) -> Array:
  """Scaled dot-product score `q · k * scale` ("Attention Is All You Need", eq. 1).

  With unit-variance q and k, `q · k` has variance D; the default scale 1/sqrt(D) brings it back to
  1 so the softmax does not saturate as D grows.

  Args:
    q: queries `[..., T, D]`.
    k: keys `[..., S, D]`.
    scale: multiplier for `q · k`; default `1/sqrt(D)`.
    temperature: divisor for `q · k`, the alternative spelling of `scale = 1/temperature`.

  Returns:
    Scores `[..., T, S]`.
  """
  check_qk(q, k, 'scaled_dot_scores')
  if scale is not None and temperature is not None:
    raise ValueError('scaled_dot_scores: give scale or temperature, not both.')
  if temperature is not None:
    scale = 1.0 / temperature
  if scale is None:
    scale = q.shape[-1] ** -0.5
  return jnp.einsum('...td,...sd->...ts', q * jnp.asarray(scale, q.dtype), k)


def general_scores(q: Array, k: Array, w: Array) -> Array:
  """Luong "general" (bilinear) score `q W kᵀ`.

  Args:
    q: queries `[..., T, Dq]`.
    k: keys `[..., S, Dk]`.
    w: bilinear weights `[Dq, Dk]`.

  Returns:
    Scores `[..., T, S]`.
  """
  if w.ndim != 2 or w.shape[0] != q.shape[-1] or w.shape[1] != k.shape[-1]:
    raise ValueError(
      f'general_scores: w must be [Dq, Dk] = [{q.shape[-1]}, {k.shape[-1]}], got w{tuple(w.shape)}.'
    )
  qw = jnp.einsum('...td,de->...te', q, w)  # [..., T, Dk]
  return jnp.einsum('...te,...se->...ts', qw, k)


def project_keys(k: Array, w_k: Array) -> Array:
  """Projects keys `[..., S, Dk]` with `w_k: [Dk, A]` to `[..., S, A]` for `additive_scores`.

  A decoder that scores many queries against the same encoder states computes this once and passes
  it as `k_proj` to every `additive_scores` call.
  """
  if w_k.ndim != 2 or w_k.shape[0] != k.shape[-1]:
    raise ValueError(f'project_keys: w_k must be [Dk={k.shape[-1]}, A], got w_k{tuple(w_k.shape)}.')
  return jnp.einsum('...sd,da->...sa', k, w_k)


def additive_scores(
  q: Array, k: Array | None, w_q: Array, w_k: Array | None, v: Array, *, k_proj: Array | None = None
) -> Array:
  """Bahdanau (additive) score `vᵀ tanh(W_q q + W_k k)`.

  Args:
    q: queries `[..., T, Dq]`.
    k: keys `[..., S, Dk]`; may be None when `k_proj` is given.
    w_q: query projection `[Dq, A]`.
    w_k: key projection `[Dk, A]`; may be None when `k_proj` is given.
    v: score vector `[A]`.
    k_proj: precomputed `project_keys(k, w_k)`, `[..., S, A]`.

  Returns:
    Scores `[..., T, S]`.
  """
  if k_proj is None:
    if k is None or w_k is None:
      raise ValueError('additive_scores: pass k and w_k, or the precomputed k_proj.')
    k_proj = project_keys(k, w_k)
  if w_q.ndim != 2 or w_q.shape[0] != q.shape[-1] or w_q.shape[1] != k_proj.shape[-1]:
    raise ValueError(
      f'additive_scores: w_q must be [Dq={q.shape[-1]}, A={k_proj.shape[-1]}], '
      f'got w_q{tuple(w_q.shape)}.'
    )
  if v.shape != (k_proj.shape[-1],):
    raise ValueError(f'additive_scores: v must be [A={k_proj.shape[-1]}], got v{tuple(v.shape)}.')
  q_proj = jnp.einsum('...td,da->...ta', q, w_q)  # [..., T, A]
  hidden = jnp.tanh(q_proj[..., :, None, :] + k_proj[..., None, :, :])  # [..., T, S, A]
  return jnp.einsum('...tsa,a->...ts', hidden, v)


def cosine_scores(q: Array, k: Array, scale: float | Array = 1.0, eps: float = 1e-6) -> Array:
  """Cosine-similarity score `scale * q·k / (|q| |k|)`, bounded in [-scale, scale].

  The scale (a temperature, often learned) matters: cosines alone lie in [-1, 1], too flat for a
  sharp softmax.

  Args:
    q: queries `[..., T, D]`.
    k: keys `[..., S, D]`.
    scale: multiplier of the cosine.
    eps: guards the norm of all-zero vectors.

  Returns:
    Scores `[..., T, S]`.
  """
  check_qk(q, k, 'cosine_scores')
  q_unit = q * jax.lax.rsqrt(jnp.sum(q * q, axis=-1, keepdims=True) + eps)
  k_unit = k * jax.lax.rsqrt(jnp.sum(k * k, axis=-1, keepdims=True) + eps)
  return scale * jnp.einsum('...td,...sd->...ts', q_unit, k_unit)


class ScoreSizes(NamedTuple):
  """The sizes a score parameter's shape can name."""

  q: int  # query features Dq
  k: int  # key features Dk
  a: int  # an attention size A, picked by the layer


@dataclasses.dataclass(frozen=True)
class ScoreParam:
  """A learned keyword argument of a score function, which the layers create.

  Attributes:
    name: the score function's keyword argument.
    shape: one of 'q', 'k', 'a' (see `ScoreSizes`) per dim; `()` for a scalar.
    init: `sizes -> initializer`, the initializer having the `jax.nn.initializers` signature
      `(key, shape, dtype) -> Array`. It gets the sizes because a value may depend on a size its
      shape does not show (the cosine scale, a scalar, starts at sqrt(Dq)).
  """

  name: str
  shape: tuple[str, ...]
  init: Callable[[ScoreSizes], Initializer]

  def __post_init__(self):
    if any(dim not in ScoreSizes._fields for dim in self.shape):
      raise ValueError(
        f'ScoreParam {self.name!r}: shape dims must be among '
        f'{", ".join(ScoreSizes._fields)}; got {self.shape!r}.'
      )

  def initialize(self, key: Array, sizes: ScoreSizes, dtype: Any = jnp.float32) -> Array:
    """A fresh value of this parameter for the given sizes."""
    shape = tuple(getattr(sizes, dim) for dim in self.shape)
    return self.init(sizes)(key, shape, dtype)


@dataclasses.dataclass(frozen=True)
class KeyPrep:
  """Work on the keys alone, which a decoder does once per source rather than at every step.

  Attributes:
    fn: `(k, *params) -> prepared keys [..., S, K]`.
    uses: the names of the score parameters `fn` takes after `k`, in order.
    into: the score function's keyword argument for the prepared keys (its `k` is then None).
  """

  fn: Callable[..., Array]
  uses: tuple[str, ...]
  into: str


@dataclasses.dataclass(frozen=True)
class Score:
  """A registered score: its function, the parameters it learns, and key work it can hoist.

  Calling a `Score` calls its function: `SCORES["general"](q, k, w=w)`.

  Attributes:
    fn: `(q [..., T, Dq], k [..., S, Dk], **params) -> [..., T, S]`.
    params: the learned keyword arguments of `fn`.
    prepare: optional per-source key work, e.g. Bahdanau's `project_keys`.
    same_features: whether `fn` needs Dq == Dk; a layer whose key size differs then projects its
      keys to Dq first.
  """

  fn: ScoreFn
  params: tuple[ScoreParam, ...] = ()
  prepare: KeyPrep | None = None
  same_features: bool = True

  def __call__(self, q: Array, k: Array, **params: Array) -> Array:
    return self.fn(q, k, **params)

  def prepare_keys(self, k: Array, params: Mapping[str, Array]) -> Array:
    """Keys `[..., S, Dk]` as `scores_prepared` takes them: `k` itself unless `prepare` is set."""
    if self.prepare is None:
      return k
    return self.prepare.fn(k, *(params[name] for name in self.prepare.uses))

  def scores_prepared(self, q: Array, prepared: Array, params: Mapping[str, Array]) -> Array:
    """Scores `[..., T, S]` of queries against keys already passed through `prepare_keys`."""
    if self.prepare is None:
      return self.fn(q, prepared, **params)
    return self.fn(q, None, **params, **{self.prepare.into: prepared})


def _lecun_normal(sizes: ScoreSizes) -> Initializer:
  del sizes  # the fan-in is the parameter's first dim
  return jax.nn.initializers.lecun_normal()


def _additive_v_init(sizes: ScoreSizes) -> Initializer:
  # vᵀ tanh(.) sums A terms bounded by |v_a|; v of variance 1/A keeps that sum's variance <= 1.
  return jax.nn.initializers.normal(sizes.a**-0.5)


def _cosine_scale_init(sizes: ScoreSizes) -> Initializer:
  # Unit-variance q and k of size D have |q| |k| ~ D, so the scaled dot score q·k/sqrt(D) is about
  # sqrt(D) cos(q, k): starting the scale at sqrt(D) makes both scores start equally sharp.
  return jax.nn.initializers.constant(sizes.q**0.5)


SCORES: dict[str, Score] = {
  'dot': Score(dot_scores),
  'scaled_dot': Score(scaled_dot_scores),
  'general': Score(
    general_scores, params=(ScoreParam('w', ('q', 'k'), _lecun_normal),), same_features=False
  ),
  'additive': Score(
    additive_scores,
    params=(
      ScoreParam('w_q', ('q', 'a'), _lecun_normal),
      ScoreParam('w_k', ('k', 'a'), _lecun_normal),
      ScoreParam('v', ('a',), _additive_v_init),
    ),
    prepare=KeyPrep(project_keys, uses=('w_k',), into='k_proj'),
    same_features=False,
  ),
  'cosine': Score(cosine_scores, params=(ScoreParam('scale', (), _cosine_scale_init),)),
}


def get_score(name: str) -> Score:
  """Returns `SCORES[name]`; an unknown name raises ValueError listing the valid ones.

  A plain function registered in `SCORES` counts as a score without parameters that compares
  queries and keys of one size.
  """
  try:
    score = SCORES[name]
  except KeyError:
    raise ValueError(
      f'Unknown score kind {name!r}; valid kinds: {", ".join(sorted(SCORES))}.'
    ) from None
  return score if isinstance(score, Score) else Score(score)


def get_score_fn(name: str) -> ScoreFn:
  """Returns the function of `SCORES[name]`; an unknown name raises ValueError listing the valid
  ones."""
  return get_score(name).fn
