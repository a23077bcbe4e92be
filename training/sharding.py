"""Devices and shardings: a ('data', 'fsdp', 'tensor') mesh, the batch split over 'data' and
'fsdp', parameters split by the logical axis names the models give their dimensions.

- data parallel (`config.mesh.data`): parameters replicated, the batch split.
- fully sharded data parallel (`config.mesh.fsdp`): the batch split, and every parameter
  dimension named 'embed' (the model width) split, with its optimizer moments; XLA gathers each
  weight where it is used.
- tensor parallel (`config.mesh.tensor`): the dimensions named 'heads', 'mlp' and 'vocab' split
  (Megatron-style); the batch is replicated over this axis, which stays within one process.

Several processes (hosts) form one job through `jax.distributed` (`initialize_distributed`);
each reads its own rows of every global batch (`data/`, by `jax.process_index()`).
"""

import math
import os

from absl import logging
from flax import nnx
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import ml_collections
import numpy as np

MESH_AXES = ('data', 'fsdp', 'tensor')
BATCH_AXES = ('data', 'fsdp')
# The one table of logical axis names: a parameter dimension so named (models' `out_sharding`
# metadata) is split over this mesh axis; unnamed dimensions are replicated.
LOGICAL_AXIS_RULES = {'embed': 'fsdp', 'heads': 'tensor', 'mlp': 'tensor', 'vocab': 'tensor'}

# Set by the cluster launchers `jax.distributed.initialize()` detects by itself (SLURM, Open MPI,
# Cloud TPU) and by JAX's own JAX_COORDINATOR_ADDRESS.
_DISTRIBUTED_ENV = (
  'JAX_COORDINATOR_ADDRESS',
  'SLURM_JOB_ID',
  'OMPI_COMM_WORLD_SIZE',
  'TPU_WORKER_HOSTNAMES',
)


def mesh_config() -> ml_collections.ConfigDict:
  """`config.mesh`: devices per mesh axis; -1 = all devices the other axes leave."""
  c = ml_collections.ConfigDict()
  c.data = -1  # data parallel: batch rows split, parameters replicated
  c.fsdp = 1  # fully sharded: batch rows and 'embed' dimensions split
  c.tensor = 1  # tensor parallel: 'heads', 'mlp', 'vocab' dimensions split (within a process)
  return c


def initialize_distributed(
  coordinator_address: str | None = None,
  num_processes: int | None = None,
  process_id: int | None = None,
) -> None:
  """Joins a multi-process job when asked to (arguments) or launched by a cluster (environment).

  Call it before anything touches the devices. On CPU the processes exchange data over gloo.
  """
  asked = num_processes is not None and num_processes > 1
  if not (asked or any(name in os.environ for name in _DISTRIBUTED_ENV)):
    return
  if jax.distributed.is_initialized():
    return
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  jax.distributed.initialize(coordinator_address, num_processes, process_id)
  logging.info(
    'Process %d of %d; %d of %d devices here.',
    jax.process_index(),
    jax.process_count(),
    jax.local_device_count(),
    jax.device_count(),
  )


def mesh_shape(
  mesh: ml_collections.ConfigDict, device_count: int, local_device_count: int
) -> dict[str, int]:
  """The size of every mesh axis, -1 resolved; raises ValueError naming a bad `config.mesh` field.

  Args:
    mesh: `config.mesh`.
    device_count: devices of all processes.
    local_device_count: devices of one process (tensor parallelism stays within it).
  """
  unknown = sorted(set(mesh) - set(MESH_AXES))
  if unknown:
    raise ValueError(
      f'config.mesh.{unknown[0]} is not a mesh axis; the axes are {", ".join(MESH_AXES)}.'
    )
  sizes = {axis: mesh.get(axis, 1) for axis in MESH_AXES}
  for axis, size in sizes.items():
    if isinstance(size, bool) or not isinstance(size, int) or not (size >= 1 or size == -1):
      raise ValueError(
        f'config.mesh.{axis}={size!r} must be a positive integer or -1 (the '
        'devices the other axes leave).'
      )
  free = [axis for axis, size in sizes.items() if size == -1]
  fixed = math.prod(size for size in sizes.values() if size != -1)
  if len(free) > 1:
    raise ValueError(f'config.mesh: only one axis may be -1; got {", ".join(free)}.')
  if free and device_count % fixed == 0:
    sizes[free[0]] = device_count // fixed
  if math.prod(sizes.values()) != device_count:
    shown = ' x '.join(f'{axis}={mesh.get(axis, 1)}' for axis in MESH_AXES)
    raise ValueError(
      f'config.mesh {shown} does not multiply to the {device_count} devices; '
      'make the product of the axis sizes equal the device count.'
    )
  if local_device_count % sizes['tensor']:
    raise ValueError(
      f'config.mesh.tensor={sizes["tensor"]} must divide the '
      f'{local_device_count} devices of one process (tensor parallelism '
      'exchanges activations at every layer, so it stays within a host).'
    )
  return sizes


def batch_shards(sizes: dict[str, int]) -> int:
  """How many ways a global batch is split (the 'data' and 'fsdp' axes together)."""
  return math.prod(sizes[axis] for axis in BATCH_AXES)


def make_mesh(mesh: ml_collections.ConfigDict | None = None) -> Mesh:
  """The device mesh `config.mesh` describes (None = every device on 'data')."""
  sizes = mesh_shape(mesh or mesh_config(), jax.device_count(), jax.local_device_count())
  # Auto axes: jit propagates the shardings of the inputs and of `out_shardings` (GSPMD).
  return jax.make_mesh(
    tuple(sizes.values()), MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES)
  )


def partition_spec(names, shape: tuple[int, ...], sizes: dict[str, int]) -> PartitionSpec:
  """The mesh axes of a parameter with logical `names` (one per dimension, or None) and `shape`.

  A dimension whose size the mesh axis does not divide stays whole (replicated), so any model
  runs on any mesh; `shard_report` lists such dimensions.

  Raises:
    ValueError: a name is not in `LOGICAL_AXIS_RULES` (a model bug, caught by the tests).
  """
  if not names:
    return PartitionSpec()
  axes = []
  for name, size in zip(names, shape):
    if name is not None and name not in LOGICAL_AXIS_RULES:
      raise ValueError(
        f'Logical axis {name!r} is not in training.sharding.LOGICAL_AXIS_RULES '
        f'({", ".join(LOGICAL_AXIS_RULES)}).'
      )
    axis = LOGICAL_AXIS_RULES.get(name)
    axes.append(axis if axis and sizes[axis] > 1 and size % sizes[axis] == 0 else None)
  return PartitionSpec(*axes)


def is_variable(x) -> bool:
  """Whether `x` is an NNX Variable (the tree leaf that carries logical axis names)."""
  return isinstance(x, nnx.Variable)


def spec_of(x, sizes: dict[str, int]) -> PartitionSpec:
  """The mesh axes of `x`: a Variable's by its logical axis names, a bare array's none."""
  if not is_variable(x):
    return PartitionSpec()
  return partition_spec(x.get_metadata().get('out_sharding'), x.get_value().shape, sizes)


def state_shardings(tree, mesh: Mesh):
  """The `NamedSharding` of every array of `tree` on `mesh`: a train state whose parameters and
  moments are still Variables (`training.steps.annotated_train_state`), possibly abstract."""
  sizes = dict(mesh.shape)

  def sharding(x):
    named = NamedSharding(mesh, spec_of(x, sizes))
    return x.replace(named) if is_variable(x) else named

  return jax.tree.map(sharding, tree, is_leaf=is_variable)


def check_axes_used(abstract_state, sizes: dict[str, int], model_name: str) -> None:
  """Raises ValueError when a parameter axis of the mesh (fsdp, tensor) is > 1 but no parameter
  of the model is split over it, which would only repeat the same work on more devices."""
  used = set()
  for x in jax.tree.leaves(abstract_state.params, is_leaf=is_variable):
    used.update(axis for axis in spec_of(x, sizes) if axis)
  for axis in MESH_AXES[1:]:
    if sizes[axis] > 1 and axis not in used:
      kinds = sorted(name for name, mesh_axis in LOGICAL_AXIS_RULES.items() if mesh_axis == axis)
      raise ValueError(
        f'config.mesh.{axis}={sizes[axis]}, but no parameter of '
        f'config.model.name={model_name!r} has a dimension it splits '
        f'({", ".join(kinds)}, by a size divisible by {sizes[axis]}); use '
        'config.mesh.data for this model.'
      )


def replicated(mesh: Mesh) -> NamedSharding:
  """A whole copy on every device."""
  return NamedSharding(mesh, PartitionSpec())


def replicate(tree, mesh: Mesh):
  """Places every array of `tree` on every device."""
  return jax.device_put(tree, replicated(mesh))


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Batch rows split over 'data' and 'fsdp' (replicated over 'tensor')."""
  return NamedSharding(mesh, PartitionSpec(BATCH_AXES))


def shard_batch(batch: dict, mesh: Mesh) -> dict:
  """Global arrays from this process's rows (its contiguous share of every global batch).

  The global batch must divide evenly over the batch shards; `training.config.validate` checks
  the configured batch sizes before anything runs.
  """
  sharding = batch_sharding(mesh)

  def global_array(value):
    value = np.asarray(value)
    rows = value.shape[0]
    first = jax.process_index() * rows  # this process's rows: first .. first+rows
    shape = (rows * jax.process_count(), *value.shape[1:])

    def rows_of(index):
      start, stop, _ = index[0].indices(shape[0])
      if start < first or stop > first + rows:
        raise ValueError(
          f'A device of process {jax.process_index()} holds batch rows '
          f'{start}:{stop}, outside the rows {first}:{first + rows} it reads.'
        )
      return value[start - first : stop - first]

    return jax.make_array_from_callback(shape, sharding, rows_of)

  return {key: global_array(value) for key, value in batch.items()}
