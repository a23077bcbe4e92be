"""What every family's table of tensors shares: a row's shape, its transforms, `assign` and
`Gathered`.

A family (bert.py, decoders.py) maps each checkpoint tensor to an Attend parameter by a table of
`Row`s: (Attend's dotted parameter path, the checkpoint's tensor name, the transform it needs).
`assign` copies a table's tensors into a built model; `Gathered` reads them back out of a model
under the checkpoint's names, undoing each transform (`INVERSES`, and `Part`s joined), so one
table serves reading and writing. `config_fields` turns a family's model arguments into flat
`config.model` fields. The families import this module, never each other.
"""

from collections.abc import Mapping
import dataclasses
from typing import Any, Callable

from flax import nnx
import jax.numpy as jnp
import numpy as np

# The id data/ pads every row with (data.tokenizers.PAD_ID, which models/ does not import;
# tests/test_pretrained.py checks that the two agree).
PAD_ID = 0

Transform = Callable[[np.ndarray], np.ndarray]
Row = tuple[str, str, Transform]  # (Attend path, checkpoint tensor name, its transform)
SAME: Transform = lambda w: w
TRANSPOSED: Transform = lambda w: w.T  # a torch Linear weight, [out, in] -> kernel [in, out]
# Each plain transform's inverse, for `Gathered` (a transpose undoes itself).
INVERSES: dict[Transform, Transform] = {SAME: SAME, TRANSPOSED: TRANSPOSED}


@dataclasses.dataclass(frozen=True)
class Part:
  """Part `k` of `n` equal parts along the last axis of a fused tensor (GPT-2's `c_attn`:
  queries, keys, values); `Gathered` joins a tensor's parts back in order."""

  k: int
  n: int

  def __call__(self, w: np.ndarray) -> np.ndarray:
    return np.split(w, self.n, axis=-1)[self.k]


def _variable(model: nnx.Module, path: str) -> nnx.Variable:
  """The variable at a dotted Attend path (`layers.0.ffn.w_1.kernel`)."""
  node = model
  for part in path.split('.'):
    node = node[int(part)] if part.isdigit() else getattr(node, part)
  return node


def assign(model: nnx.Module, tensors: Mapping[str, np.ndarray], rows: list[Row], source: str):
  """Copies each row's checkpoint tensor, transformed, into the model, one tensor at a time;
  ValueError naming a missing or misshapen one (`source` names the checkpoint)."""
  for ours, theirs, transform in rows:
    if theirs not in tensors:
      raise ValueError(f"The checkpoint {source} has no tensor {theirs!r} (Attend's {ours}).")
    tensor = tensors[theirs]
    value, variable = transform(tensor), _variable(model, ours)
    shape = variable.get_value().shape  # also of a variable built as its shape alone
    if value.shape != shape:
      raise ValueError(
        f"The checkpoint {source}'s tensor {theirs!r} has shape {tensor.shape}, which "
        f"does not fit Attend's {ours} {shape} as its config.json builds it."
      )
    variable.set_value(jnp.asarray(value, jnp.float32))


class Gathered(Mapping):
  """A model's tensors under a table's checkpoint names, each computed when asked for (float32
  NumPy, torch's layout): its row's Attend parameter with the transform undone (`INVERSES`; a
  fused tensor's `Part`s joined in order), the inverse of `assign`, so writing holds the model
  and one tensor, not a second copy of the weights. `shape(name)` reads no values."""

  def __init__(self, model: nnx.Module, rows: list[Row]):
    self._model = model
    self._rows: dict[str, list[Row]] = {}
    for row in rows:
      self._rows.setdefault(row[1], []).append(row)

  def _undone(self, theirs: str, value: Callable[[str], np.ndarray]) -> np.ndarray:
    rows = self._rows[theirs]
    if isinstance(rows[0][2], Part):
      by_k = sorted(rows, key=lambda row: row[2].k)
      return np.concatenate([value(ours) for ours, _, _ in by_k], axis=-1)
    (ours, _, transform), *more = rows
    if more:  # a table that maps two parameters to one tensor that is not fused: a table's bug
      raise ValueError(f'The table maps {ours} and {more[0][0]} both to {theirs!r}.')
    return INVERSES[transform](value(ours))

  def __getitem__(self, theirs: str) -> np.ndarray:
    read = lambda ours: np.asarray(_variable(self._model, ours).get_value(), np.float32)
    return np.ascontiguousarray(self._undone(theirs, read))

  def shape(self, theirs: str) -> tuple[int, ...]:
    """The tensor's shape, from the parameters' shapes alone (zero-stride views)."""
    empty = lambda ours: np.broadcast_to(
      np.float32(0), _variable(self._model, ours).get_value().shape
    )
    return self._undone(theirs, empty).shape

  def __iter__(self):
    return iter(self._rows)

  def __len__(self) -> int:
    return len(self._rows)


def config_fields(model_args: dict[str, Any], **overrides: Any) -> dict[str, Any]:
  """`config.model` fields, flat as `models.default_config` takes them, of a family's model
  arguments (its `stack` and options); the vocabulary and padding id come from the task's data,
  and `overrides` change some fields (dropout, say)."""
  args = dict(model_args)
  stack = dataclasses.asdict(args.pop('stack'))
  del args['vocab_size'], args['pad_id']
  return {**stack, **args, **overrides}
