"""Data parallelism over a 1-D device mesh: batch on the 'data' axis, state replicated."""

import os

from absl import logging
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

# Set by every launcher that starts one process per host (SLURM, Cloud TPU, torchrun-style).
_DISTRIBUTED_ENV = ('JAX_COORDINATOR_ADDRESS', 'COORDINATOR_ADDRESS', 'SLURM_JOB_ID',
                    'TPU_WORKER_HOSTNAMES')


def maybe_initialize_distributed() -> None:
  """Joins a multi-host job when a launcher's environment is present; no-op on one host."""
  if any(name in os.environ for name in _DISTRIBUTED_ENV) and not jax.distributed.is_initialized():
    jax.distributed.initialize()
    logging.info('Process %d of %d.', jax.process_index(), jax.process_count())


def make_mesh() -> Mesh:
  """All devices of all hosts on one 'data' axis."""
  return Mesh(np.array(jax.devices()), ('data',))


def replicate(tree, mesh: Mesh):
  """Places every array of `tree` on every device."""
  return jax.device_put(tree, NamedSharding(mesh, PartitionSpec()))


def shard_batch(batch: dict, mesh: Mesh) -> dict:
  """Global arrays from this host's rows, split along the batch axis over the 'data' axis.

  The global batch must divide evenly over the devices; `training.config.validate` checks the
  configured batch sizes before anything runs.
  """
  sharding = NamedSharding(mesh, PartitionSpec('data'))
  return {key: jax.make_array_from_process_local_data(sharding, value)
          for key, value in batch.items()}
