"""Memory per device: the parameters, gradients and AdamW moments each device holds under each
mesh, for the base Transformer and a 1B-parameter decoder, computed from shapes (nothing is
allocated, no accelerator needed).

    python -m benchmarks.sharding_memory                        # 8 devices, both models
    python -m benchmarks.sharding_memory --devices=16 --json=/tmp/sharding_memory.json
    python -m benchmarks.sharding_memory --models=base          # only configs/transformer_base.py

Models: `base` is configs/transformer_base.py (d_model 512, 8 heads, d_ff 2048, 6+6 layers, one
shared vocabulary of 8000, tied output); `gpt_1b` is configs/gpt_text.py's `DecoderLM` widened
to d_model 2048, 16 heads, d_ff 8192, 19 layers, RoPE, max_length 2048, a vocabulary of 32000,
tied output. Each state is `jax.eval_shape` of what `training.setup.build_state` builds (the
model, then `training.steps.annotated_train_state` with the config's AdamW), so the parameters
and moments keep the logical axis names `training.sharding` splits them by.

Meshes over `--devices` (n) devices: data=n; fsdp=n; tensor=n; fsdp=n/2 x tensor=2;
data=2 x fsdp=n/2 (the last two only for an even n). An array's bytes on one device are its bytes
divided by the product of the mesh axis sizes its `training.sharding.partition_spec` uses; a
dimension the axis does not divide stays whole, and arrays without names (the Adam count) are
replicated. Gradients have the parameters' shapes and shardings in float32. "split" is the
fraction of parameter bytes in arrays that are split at all. MB = 10^6 bytes.

Not counted: activations (they depend on batch size, sequence length, dtype and
rematerialisation, and are often the largest term), the step counter, XLA's temporary buffers
and the gathered copy of a weight fsdp materialises while a layer uses it.
"""

import argparse
import json
import math
from typing import Any, Callable

from flax import nnx
import jax
import numpy as np

from configs import gpt_text, transformer_base
import models
from training import optim, sharding, steps

MB = 1e6


def _base():
  return transformer_base.get_config(), dict(
    input_vocab_size=8000, output_vocab_size=8000, pad_id=0
  )


def _gpt_1b():
  config = gpt_text.get_config()
  config.model.update(d_model=2048, num_layers=19, num_heads=16, d_ff=8192, max_length=2048)
  return config, dict(vocab_size=32000, pad_id=0)


# Name -> () -> (experiment config, the arguments `models.build` takes from the data).
MODELS: dict[str, Callable[[], tuple[Any, dict[str, int]]]] = {'base': _base, 'gpt_1b': _gpt_1b}


def abstract_state(config, data_args: dict[str, int]) -> steps.TrainState:
  """The train state of `config.model` as shapes, parameters and moments still Variables."""

  def annotated():
    model = models.build(config.model, rngs=nnx.Rngs(0), **data_args)
    return steps.annotated_train_state(model, optim.make_optimizer(config))

  return jax.eval_shape(annotated)


def meshes(devices: int) -> list[dict[str, int]]:
  """The mesh axis sizes to compare on `devices` devices, duplicates dropped."""
  half = devices // 2
  layouts = [dict(data=devices), dict(fsdp=devices), dict(tensor=devices)]
  if devices % 2 == 0 and half > 1:
    layouts += [dict(fsdp=half, tensor=2), dict(data=2, fsdp=half)]
  unique = []
  for layout in layouts:
    sizes = {axis: layout.get(axis, 1) for axis in sharding.MESH_AXES}
    if sizes not in unique:
      unique.append(sizes)
  return unique


def mesh_label(sizes: dict[str, int]) -> str:
  """'fsdp=4 x tensor=2': the axes larger than 1 (all on 'data' for one device)."""
  return ' x '.join(f'{a}={n}' for a, n in sizes.items() if n > 1) or 'data=1'


def split_ways(x, sizes: dict[str, int]) -> int:
  """How many devices share one copy of array `x` (a Variable, or a bare array: replicated)."""
  return math.prod(sizes[axis] for axis in sharding.spec_of(x, sizes) if axis)


def device_bytes(tree, sizes: dict[str, int], itemsize: int | None = None) -> float:
  """Bytes of `tree`'s arrays one device holds; `itemsize` overrides their dtypes' sizes."""
  total = 0.0
  for x in jax.tree.leaves(tree, is_leaf=sharding.is_variable):
    value = x.get_value() if sharding.is_variable(x) else x
    nbytes = math.prod(value.shape) * (itemsize or np.dtype(value.dtype).itemsize)
    total += nbytes / split_ways(x, sizes)
  return total


def memory_per_device(state: steps.TrainState, sizes: dict[str, int]) -> dict[str, float]:
  """Bytes per device of the parameters, float32 gradients, AdamW moments, and their total,
  plus 'split', the fraction of parameter bytes in arrays split over some mesh axis."""
  params = device_bytes(state.params, sizes)
  grads = device_bytes(state.params, sizes, itemsize=4)
  adam = device_bytes(state.opt_state, sizes)
  leaves = jax.tree.leaves(state.params, is_leaf=sharding.is_variable)
  nbytes = [x.get_value().size * np.dtype(x.get_value().dtype).itemsize for x in leaves]
  split = sum(n for n, x in zip(nbytes, leaves) if split_ways(x, sizes) > 1) / sum(nbytes)
  return dict(params=params, grads=grads, adam=adam, total=params + grads + adam, split=split)


def table(rows: list[dict[str, Any]]) -> str:
  """The rows of `main` as a markdown table."""
  lines = [
    '| model | parameters | mesh | params MB/device | grads MB/device | Adam MB/device | '
    'total MB/device | split |',
    '|' + '---|' * 8,
  ]
  for r in rows:
    mb = ' | '.join(f'{r[k] / MB:,.1f}' for k in ('params', 'grads', 'adam', 'total'))
    lines.append(f'| {r["model"]} | {r["parameters"]:,} | {r["mesh"]} | {mb} | {r["split"]:.2%} |')
  return '\n'.join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
  """Prints the table for the command line `argv`; returns its rows."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--devices', type=int, default=8, help='devices the meshes span')
  parser.add_argument(
    '--models', default=','.join(MODELS), help=f'comma-separated, from {", ".join(MODELS)}'
  )
  parser.add_argument('--json', default='', help='also write the rows to this JSON file')
  args = parser.parse_args(argv)
  names = [n for n in args.models.split(',') if n]
  if not names or set(names) - set(MODELS):
    parser.error(f'--models must name one or more of {", ".join(MODELS)}; got {args.models!r}.')
  if args.devices < 1:
    parser.error(f'--devices must be >= 1; got {args.devices}.')
  rows = []
  for name in names:
    state = abstract_state(*MODELS[name]())
    count = steps.parameter_count(state.params)
    for sizes in meshes(args.devices):
      rows.append(
        dict(
          model=name,
          parameters=count,
          mesh=mesh_label(sizes),
          sizes=sizes,
          **memory_per_device(state, sizes),
        )
      )
  print(
    f'# bytes per device on {args.devices} devices: parameters, float32 gradients, AdamW '
    'moments (activations not counted); split = parameter bytes split over some axis'
  )
  print(table(rows))
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(dict(devices=args.devices, rows=rows), f, indent=1)
  return rows


if __name__ == '__main__':
  main()
