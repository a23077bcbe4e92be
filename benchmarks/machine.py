"""The machine facts a benchmark's figures depend on, recorded beside them in every run."""

import os
import platform

import flax
import jax

from training import allocator


def torch_on_every_core() -> int | None:
  """Gives torch's intra-op pool every CPU, as XLA's pool has them; returns its thread count
  (None: torch is not installed)."""
  try:
    import torch  # pylint: disable=import-outside-toplevel
  except ImportError:
    return None
  torch.set_num_threads(os.cpu_count())
  return torch.get_num_threads()


def facts(dtype: str | None = None) -> dict:
  """CPUs, library versions, backend, devices, the allocator and torch's threads and device.

  Args:
    dtype: the compute dtype of the run, recorded when given.
  """
  out = dict(
    cpus=os.cpu_count(),
    python=platform.python_version(),
    jax=jax.__version__,
    flax=flax.__version__,
    backend=jax.default_backend(),
    devices=[str(d) for d in jax.devices()],
    device=jax.devices()[0].device_kind,
    allocator='mimalloc' if allocator.active() else 'system',
    torch=None,
  )
  if dtype is not None:
    out['dtype'] = dtype
  try:
    import torch  # pylint: disable=import-outside-toplevel
  except ImportError:
    return out
  out.update(
    torch=torch.__version__,
    torch_threads=torch.get_num_threads(),
    torch_device='cuda' if torch.cuda.is_available() else 'cpu',
  )
  return out
