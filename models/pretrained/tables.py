"""What every family's table of tensors shares: a row's shape, its transforms, and `assign`.

A family (bert.py, decoders.py) maps each checkpoint tensor to an Attend parameter by a table of
`Row`s: (Attend's dotted parameter path, the checkpoint's tensor name, the transform it needs).
`assign` copies a table's tensors into a built model; `config_fields` turns a family's model
arguments into flat `config.model` fields. The families import this module, never each other.
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


def config_fields(model_args: dict[str, Any], **overrides: Any) -> dict[str, Any]:
  """`config.model` fields, flat as `models.default_config` takes them, of a family's model
  arguments (its `stack` and options); the vocabulary and padding id come from the task's data,
  and `overrides` change some fields (dropout, say)."""
  args = dict(model_args)
  stack = dataclasses.asdict(args.pop('stack'))
  del args['vocab_size'], args['pad_id']
  return {**stack, **args, **overrides}
