"""A model's attention heads, and the one engine that replaces them.

`grid(model)` gives the rows of every layers x heads map (`[L, N]`, N the most heads of a
layer): the model's layers with per-head outputs in its order, as `models.attention_paths`
lists them (`head_layers`: multi-head, latent and delta-rule layers alike), numbered as
`--heads=LAYER.HEAD` numbers them. A layer's heads are those of its `heads` tap: a differential
layer's are its pairs of heads (`attention_paths.head_count`), so a layer may have fewer heads
than the map is wide; `check_model_heads` refuses a head a layer does not have.

`program(model, read)` compiles `read(model, inputs)` (a metric of the logits, a task's counts)
with heads replaced, once per row of masks `[P, L, N]` (vmapped: P edited passes in one call,
one compile per shape). A masked head's output (`PATH/heads`, before the output projection, as
TransformerLens's `hook_z`) becomes `replaced[layer]`: zeros, a mean output, or the head's
output on another input. Taps in `kept` are replaced by the given values (a block's clean
`residual`): what only they read is then computed by nobody, and XLA drops it, so a batch of
masks that touches layers i and later costs the layers from i on.

`measure_rows` is the one loop around a program: rows of heads replaced together (none: the
clean run), N rows a call, with progress lines (`Pace`). Every per-head map (ablation, patching,
path patching: `one_at_a_time`), a split's ablation sweep and the ablated sets of heads of a study
run through it.
"""

from collections.abc import Callable, Mapping, Sequence
import time
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from models import interventions
from models.attention_paths import describe, head_count, head_layers
from training.metrics import Progress, duration

Array = jax.Array
Head = tuple[int, int]  # (layer, head)


def heads_per_layer(model: nnx.Module) -> dict[str, int]:
  """`{path: heads}` of the model's layers with per-head outputs, in its order (`head_layers`;
  a differential layer's heads are its pairs)."""
  return {path: head_count(layer) for path, layer in head_layers(model).items()}


def grid(model: nnx.Module) -> tuple[list[str], int]:
  """`(the attention layers' paths, N)`: the rows of a layers x heads map and its width, the
  most heads a layer has."""
  layers = heads_per_layer(model)
  return list(layers), max(layers.values())


def check_heads(num_layers: int, num_heads: int, heads: Sequence[Head]) -> None:
  """ValueError naming the first (layer, head) a model of `num_layers` x `num_heads` does not
  have (checked from the config, before the model is read, or from the model)."""
  for layer, head in heads:
    if not (0 <= layer < num_layers and 0 <= head < num_heads):
      raise ValueError(
        f'--heads: layer {layer}, head {head} is not in the model ({num_layers} layers 0 .. '
        f'{num_layers - 1} of {num_heads} heads 0 .. {num_heads - 1}).'
      )


def check_model_heads(model: nnx.Module, heads: Sequence[Head]) -> None:
  """`check_heads` against the model's own layers, where they have different numbers of heads:
  ValueError naming the first (layer, head) that is not there, and what that layer's heads are
  (e.g. a differential layer's pairs)."""
  layers = head_layers(model)
  counts = [head_count(layer) for layer in layers.values()]
  if len(set(counts)) <= 1:
    check_heads(len(counts), max(counts, default=0), heads)
    return
  check_heads(len(counts), max(counts), heads)  # the layer first
  for layer, head in heads:
    if head >= counts[layer]:
      path = list(layers)[layer]
      raise ValueError(
        f'--heads: layer {layer}, head {head} is not in the model: layer {layer} ({path}) is '
        f'{describe(layers[path])}, numbered 0 .. {counts[layer] - 1}.'
      )


def masks(rows: Sequence[Sequence[Head]], num_layers: int, num_heads: int) -> np.ndarray:
  """`[P, L, N]` bool: row p replaces the heads `rows[p]` (an empty row: the clean pass)."""
  out = np.zeros((len(rows), num_layers, num_heads), bool)
  for p, heads in enumerate(rows):
    for layer, head in heads:
      out[p, layer, head] = True
  return out


def residuals_below(path: str, residuals: Mapping[str, Array]) -> dict[str, Array]:
  """The clean `residual` taps of the blocks before attention layer `path` in its stack
  ('layers/3/self_attn' -> 'layers/0/residual' .. 'layers/2/residual'); none where the model has
  no such taps (then the whole model runs)."""
  parts = path.split('/')
  if len(parts) < 3 or not parts[-2].isdigit():
    return {}
  stack = '/'.join(parts[:-2])
  names = [f'{stack}/{j}/residual' for j in range(int(parts[-2]))]
  return {name: residuals[name] for name in names} if all(n in residuals for n in names) else {}


def program(
  model: nnx.Module, read: Callable[[nnx.Module, Any], Any]
) -> Callable[[Any, np.ndarray, Sequence[Array], Mapping[str, Array]], Any]:
  """`run(inputs, masks [P, L, N], replaced, kept) -> read's outputs, each [P, ...]`, compiled.

  Args:
    model: the model whose heads are replaced.
    read: `read(model, inputs)`, what is measured of an edited pass (called inside the edits, so
      a task's counts work as they are).

  `replaced[layer]` broadcasts to that layer's per-head outputs `[B, N, T, H]` (e.g. zeros
  `[1, 1, 1, 1]`, a mean `[1, N, T|1, H]`, a patch `[B, N, T, H]`); `kept` maps tap names to
  the values they take in every row (see the module docstring); `unmasked[layer]`, where given,
  is what the heads a row does not mask output instead of what they compute (frozen at a
  clean run's, for path patching). Each structure of `kept` and `unmasked` compiles once.
  """
  graphdef, state = nnx.split(model)
  layers = heads_per_layer(model)

  @jax.jit
  def run(state, inputs, masks, replaced, kept, unmasked):
    def one(mask):  # [L, N]
      model = nnx.merge(graphdef, state)
      edits = dict(kept)
      for layer, (path, heads) in enumerate(layers.items()):
        hit = mask[layer, :heads][None, :, None, None]  # [1, N, 1, 1]
        other = None if unmasked is None else unmasked[layer]
        edits[f'{path}/heads'] = lambda v, hit=hit, new=replaced[layer], other=other: jnp.where(
          hit, new.astype(v.dtype), v if other is None else other.astype(v.dtype)
        )
      with interventions.editing(model, edits):
        return read(model, inputs)

    return jax.vmap(one)(masks)

  def call(inputs, masks, replaced, kept=None, unmasked=None):
    unmasked = None if unmasked is None else list(unmasked)
    return run(state, inputs, jnp.asarray(masks), list(replaced), dict(kept or {}), unmasked)

  return call


class Pace:
  """Progress lines over `total` heads: one every `Progress.EVERY_SECONDS` and one at the end,
  `'<what> | <rate> heads/s | ETA <time>'`, the rate in heads of `per` counts each (a head over
  every batch of a sweep)."""

  def __init__(self, total: int, say: Callable[[str], None], per: int = 1):
    self.total, self.say, self.per, self.done = total, say, per, 0
    self.started = self.last = time.perf_counter()

  def add(self, count: int, what: Callable[[int], str]) -> None:
    """Counts `count` more; a line beginning `what(the count so far)` when one is due."""
    self.done += count
    now = time.perf_counter()
    if now - self.last >= Progress.EVERY_SECONDS or self.done == self.total:
      rate, self.last = self.done / (now - self.started), now
      eta = duration((self.total - self.done) / rate)
      self.say(f'{what(self.done)} | {rate / self.per:.2f} heads/s | ETA {eta}')


def measure_rows(
  rows: Sequence[Sequence[Head]],
  shape: tuple[int, int],
  measure: Callable[[np.ndarray], Any],
  *,
  pace: Pace | None = None,
  what: Callable[[int, Sequence[Sequence[Head]]], str] | None = None,
) -> Any:
  """`measure(masks [N, L, N])` over `rows`, N rows a call (`shape` = `(L, N)`).

  Each row is a set of heads replaced together (`()`: none, the clean run); the last call is
  padded with clean rows, so that every call has one compiled shape. `pace` counts the rows
  that replace heads, its lines beginning `what(the count so far, the call's rows)`.

  Returns:
    `measure`'s outputs (an array or a dict of them, `[N, ...]` a call) on the host, joined over
    the rows: `[len(rows), ...]`.
  """
  layers, n = shape
  padded = [*rows, *[()] * (-len(rows) % n)]
  parts = []
  for start in range(0, len(padded), n):
    call = padded[start : start + n]
    parts.append(jax.device_get(measure(masks(call, layers, n))))
    if pace is not None:
      pace.add(sum(1 for row in call if row), lambda done, call=call: what(done, call))
  return jax.tree.map(lambda *values: np.concatenate(values)[: len(rows)], *parts)


def one_at_a_time(
  heads: Sequence[Head],
  shape: tuple[int, int],
  measure: Callable[[np.ndarray], Array],
  *,
  what: str,
  progress: Callable[[str], None],
) -> tuple[float, np.ndarray]:
  """`(the clean value, [L, N] each head's value less it)`, NaN for heads not in `heads`.

  `measure(masks [P, L, N]) -> [P, B]` is called by `measure_rows` on the clean row, then a row
  per head of `heads`. The values are means over B; a `progress` line (`what`: what is counted)
  comes every `Progress.EVERY_SECONDS` and at the end.
  """

  def line(done: int, call) -> str:
    reached = max((row[0][0] for row in call if row), default=0)
    return f'{what}: {done}/{len(heads)} (layer {reached})'

  rows = [(), *[(head,) for head in heads]]
  pace = Pace(len(heads), progress)
  values = measure_rows(rows, shape, measure, pace=pace, what=line).mean(axis=-1)
  values = values.astype(np.float64)  # the clean value subtracted in float64
  clean = float(values[0])
  effects = np.full(shape, np.nan)
  for (layer, head), value in zip(heads, values[1:]):
    effects[layer, head] = value - clean
  return clean, effects
