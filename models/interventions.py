"""Capture and intervention: read or replace the named intermediates of any Attend model.

Every attention seam of the models calls `tap(module, name, value)` with what it computed: the
multi-head layer its `queries`, `keys`, `values` `[B, N|K, T|S, H]`, `weights` `[B, N, T, S]` and
per-head outputs `heads` `[B, N, T, H]` (before the output projection), each Transformer block its
residual stream `[B, T, D]` under TransformerLens's names (`resid_pre`, `attn_out`, `resid_mid`,
`mlp_out` and `residual`, the stream after it; `models.blocks`), a language model its
`embeddings`, the RNN attention its `weights` and `context`, the attention pooling its `weights`
and `pooled` vector, MemN2N `hop_<k>/weights` and the NTM its `read_weights` and
`write_weights`. A name is the module's path in the model (the path of its parameters in a
checkpoint, e.g. `decoder_layers/1/self_attn/weights`), so names are as stable as checkpoints.

Outside `capture`, `tap` returns its value untouched and adds nothing to the traced program: the
compiled train step is the one without the seams (`tests/test_interventions.py` checks the HLO).
Inside, it records every value and applies the edits asked for, each either an array that
replaces the value (activation patching: pass what `capture` returned on another input) or a
function of it (`zero_head`, `mean_head`, `set_head`). Attention weights that are edited also
drive the output: the layer recomputes `weights @ values`. `capture` can be called inside
`jax.jit` (open it there, not around a jitted function: jit would reuse the trace without it).

Each model lists the attention its pictures read as `attention_names`, `{role: pattern}` (a
class attribute, or a property where the names depend on the instance's settings; e.g. a
Transformer's `'cross': 'decoder_layers/*/cross_attn/weights'`), and `stack` gathers a pattern's
values from a capture, layer by layer: a picture asks for names, never for a flag.
A capture that records nothing raises: the model has no seams, or the call ran a function
compiled before the capture opened.

Steps of a recurrence run through `scan` (Seq2Seq's decoder, the NTM): their values come back
stacked per step after the batch axis, `[B, T, ...]`, and an array edit of such a name is given
in that shape too; a function edit gets one step's value, and `scan_step()` tells it which step.
Teacher-forced forward passes are covered; the decoding loops are not.
"""

from collections.abc import Callable, Iterator, Mapping
import contextlib
import contextvars
import dataclasses
import re
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp

Array = jax.Array
Edit = Array | Callable[[Array], Array]


@dataclasses.dataclass
class _Run:
  """One capture: module paths by identity, the edits asked for, what the seams saw."""

  paths: dict[int, str]
  edits: Mapping[str, Edit]
  captured: dict[str, Array] = dataclasses.field(default_factory=dict)
  used: set[str] = dataclasses.field(default_factory=set)
  step: Array | None = None  # inside `scan`: the index of the step being traced

  def name(self, module: nnx.Module, name: str) -> str:
    path = self.paths.get(id(module))
    if path is None:
      raise ValueError(
        f'capture: a {type(module).__name__} that is not part of the captured '
        'model ran inside it; capture the model that owns it.'
      )
    return f'{path}/{name}' if path else name


_ACTIVE: contextvars.ContextVar[_Run | None] = contextvars.ContextVar('interventions', default=None)


def active() -> bool:
  """Whether a `capture` is running (the seams then also form what they would skip)."""
  return _ACTIVE.get() is not None


def tap(module: nnx.Module, name: str, value: Array) -> Array:
  """`value` as the model should go on with it: recorded under `<module path>/<name>` and edited
  as the running `capture` asks; outside `capture`, `value` itself."""
  run = _ACTIVE.get()
  if run is None:
    return value
  full = run.name(module, name)
  if full in run.captured:
    raise ValueError(
      f'capture: {full!r} was computed twice in one run; a module that runs '
      'several times must tap a name per call.'
    )
  edit = run.edits.get(full)
  if edit is not None:
    run.used.add(full)
    value = _apply(full, edit, value)
  run.captured[full] = value
  return value


def recorded(module: nnx.Module, name: str) -> Array:
  """What the running capture recorded as `module`'s `name` (after its edits), for a model that
  taps a reading derived from a seam that ran before (e.g. a classifier's word weights from its
  last layer's `weights`). Call it only inside a capture (`active()`), after `module` ran."""
  run = _ACTIVE.get()
  if run is None:
    raise ValueError('interventions.recorded() is only defined inside a capture.')
  return run.captured[run.name(module, name)]


def _apply(name: str, edit: Edit, value: Array) -> Array:
  """The edited value; raises ValueError if an array edit has another shape."""
  new = edit(value) if callable(edit) else jnp.asarray(edit)
  if new.shape != value.shape:
    raise ValueError(
      f'capture: the edit of {name!r} has shape {tuple(new.shape)}; the value it '
      f'replaces has {tuple(value.shape)}.'
    )
  return new.astype(value.dtype)


def module_paths(model: nnx.Module) -> dict[int, str]:
  """`id(module) -> 'a/0/b'` for the model and every module inside it ('' for the model)."""
  return {
    id(module): '/'.join(str(part) for part in path) for path, module in nnx.iter_modules(model)
  }


def modules_by_path(model: nnx.Module) -> dict[str, nnx.Module]:
  """`{'a/0/b': module}` for the model and every module inside it, by the paths taps are named
  with (`module_paths` the other way round)."""
  return {'/'.join(str(part) for part in path): module for path, module in nnx.iter_modules(model)}


def _natural_order(name: str) -> list:
  """Numbers compare as numbers: layers/10 after layers/2, hop_10 after hop_2."""
  return [int(part) if part.isdigit() else part for part in re.split(r'(\d+)', name)]


@contextlib.contextmanager
def editing(model: nnx.Module, edits: Mapping[str, Edit] | None = None) -> Iterator[_Run]:
  """Within the block, `model`'s seams record into the yielded run's `captured` and apply
  `edits` (see `capture`), whatever code calls the model, e.g. a task's loss or counts.

  Raises:
    ValueError: on leaving, one sentence if nothing was recorded, or listing the valid names if
      an edit names none of them.
  """
  edits = dict(edits or {})
  paths, outer = module_paths(model), _ACTIVE.get()
  # A capture opened inside another of the same model (a task's picture or metric read while
  # head ablation edits the model) applies the outer edits too and reports back to it.
  nested = outer is not None and outer.paths == paths
  inherited = dict(outer.edits) if nested else {}
  run = _Run(paths, {**inherited, **edits})
  token = _ACTIVE.set(run)
  try:
    yield run
  finally:
    _ACTIVE.reset(token)
  if nested:
    outer.captured.update(run.captured)
    outer.used.update(run.used & set(inherited))
  if not run.captured:
    raise ValueError(
      f'capture: {type(model).__name__} recorded nothing: the call ran a function compiled '
      'before the capture opened (jax.jit and nnx.jit replay their trace without the seams; '
      'open the capture inside the jitted function), or the model has no seams.'
    )
  unknown = sorted(set(edits) - run.used)
  if unknown:
    raise ValueError(
      f'capture: no intermediate named {", ".join(map(repr, unknown))}; this '
      f"model's names for this call are {', '.join(sorted(run.captured))}."
    )


def capture(
  model: nnx.Module,
  *args: Any,
  edits: Mapping[str, Edit] | None = None,
  method: str = '__call__',
  **kwargs: Any,
) -> tuple[Any, dict[str, Array]]:
  """Runs `model.<method>(*args, **kwargs)` with its intermediates recorded and edited.

  Args:
    model: any Attend model.
    *args: the method's arguments.
    edits: intermediate name -> an array of the value's shape that replaces it, or a function
      of the value that returns one.
    method: the model's method to run, e.g. `'sequence_logits'` or `'answer'`.
    **kwargs: the method's keyword arguments.

  Returns:
    `(the method's output, {name: value})`, values after their edits.

  Raises:
    ValueError: one sentence listing the valid names, if an edit names none of them.
  """
  with editing(model, edits) as run:
    out = getattr(model, method)(*args, **kwargs)
  return out, run.captured


def stack(captured: Mapping[str, Array], pattern: str) -> Array:
  """The captured values whose names match `pattern`, stacked after the batch axis in layer
  order: `[B, L, ...]` (`*` in the pattern stands for one path segment, e.g. the layer index of
  `'layers/*/self_attn/weights'`; a pattern without one gives L = 1).

  Raises:
    KeyError: no captured name matches; the message lists the names there are.
  """
  regex = re.compile('^' + '[^/]+'.join(map(re.escape, pattern.split('*'))) + '$')
  matched = [name for name in captured if regex.match(name)]
  if not matched:
    raise KeyError(
      f'capture: no intermediate matches {pattern!r}; the names are {", ".join(sorted(captured))}.'
    )
  return jnp.stack([captured[name] for name in sorted(matched, key=_natural_order)], axis=1)


def attention(
  model: nnx.Module, role: str, *args: Any, method: str = '__call__', **kwargs: Any
) -> Array:
  """The weights the model lists under `role` in its `attention_names` (see `stack`), of the
  call `model.<method>(*args, **kwargs)`, `[B, L, ...]`.

  Raises:
    KeyError: the model lists no such role (e.g. a Seq2Seq has cross-attention only).
  """
  pattern = model.attention_names[role]
  return stack(capture(model, *args, method=method, **kwargs)[1], pattern)


def names(
  model: nnx.Module, *args: Any, method: str = '__call__', **kwargs: Any
) -> dict[str, tuple[int, ...]]:
  """Every intermediate name of this call and its shape, found without computing anything."""
  shapes = jax.eval_shape(lambda: capture(model, *args, method=method, **kwargs)[1])
  return {name: tuple(value.shape) for name, value in sorted(shapes.items())}


def scan(step: Callable[[Any, Any], tuple[Any, Any]], carry: Any, xs: Any) -> tuple[Any, Any]:
  """`jax.lax.scan(step, carry, xs)` (xs time-major) whose steps' taps come out `[B, T, ...]`.

  Outside `capture` it is `jax.lax.scan`. Inside, the names tapped in a step are found first
  (abstractly), array edits of them are fed to the steps time by time, function edits see one
  step's value (`scan_step()` says which), and each step's values are returned and recorded
  stacked after the batch axis.
  """
  run = _ACTIVE.get()
  if run is None:
    return jax.lax.scan(step, carry, xs)

  def body(c, inputs):
    x, step_edits, index = inputs
    inner = _Run(run.paths, {**functions, **step_edits}, step=index)
    token = _ACTIVE.set(inner)
    try:
      c, y = step(c, x)
    finally:
      _ACTIVE.reset(token)
    return c, (y, inner.captured)

  functions: dict[str, Edit] = {}
  first = jax.tree.map(lambda leaf: leaf[0], xs)
  tapped = jax.eval_shape(lambda: body(carry, (first, {}, jnp.int32(0)))[1][1])
  inside = {name: run.edits[name] for name in tapped if name in run.edits}
  functions.update({name: edit for name, edit in inside.items() if callable(edit)})
  arrays = {
    name: jnp.swapaxes(jnp.asarray(edit), 0, 1)  # [T, B, ...]
    for name, edit in inside.items()
    if not callable(edit)
  }
  steps = jnp.arange(jax.tree.leaves(xs)[0].shape[0])
  carry, (ys, captured) = jax.lax.scan(body, carry, (xs, arrays, steps))
  for name, value in captured.items():
    if name in run.captured:
      raise ValueError(f'capture: {name!r} was computed twice in one run.')
    run.captured[name] = jnp.swapaxes(value, 0, 1)  # [B, T, ...]
  run.used.update(inside)
  return carry, ys


def scan_step() -> Array:
  """The index of the recurrence step running now, for a function edit of a per-step name that
  depends on the step (e.g. force some output steps' attention only)."""
  run = _ACTIVE.get()
  if run is None or run.step is None:
    raise ValueError(
      'interventions.scan_step() is only defined in an edit of a per-step name, inside a capture.'
    )
  return run.step


def zero_head(head: int) -> Callable[[Array], Array]:
  """An edit that zeroes head `head` of a per-head value `[B, N, ...]` (zero ablation)."""
  return lambda value: value.at[:, head].set(0)


def mean_head(head: int, reference: Array) -> Callable[[Array], Array]:
  """An edit that sets head `head` of a `[B, N, ...]` value to its mean over the batch of a
  reference capture `[B', N, ...]` (mean ablation)."""
  mean = jnp.mean(jnp.asarray(reference)[:, head], axis=0)  # [...]
  return lambda value: value.at[:, head].set(jnp.broadcast_to(mean, value[:, head].shape))


def set_head(head: int, pattern: Array) -> Callable[[Array], Array]:
  """An edit that sets head `head` of a `[B, N, ...]` value to `pattern` (broadcast to `[B, ...]`):
  a fixed attention pattern for `weights`, or a head's output from another run for `heads`."""
  pattern = jnp.asarray(pattern)
  return lambda value: value.at[:, head].set(jnp.broadcast_to(pattern, value[:, head].shape))
