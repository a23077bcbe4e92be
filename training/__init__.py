"""Training and evaluation shared by train.py and eval.py: steps, optimizer, checkpoints, metrics.

Names and submodules load on first use, so that an entry point can import `training.allocator`
and re-execute itself before JAX is imported.
"""

import importlib

# The names `training.NAME` offers, each with the module that defines it.
_EXPORTS = {
  'train_and_evaluate': 'training.loop',
  'quiet_library_logs': 'training.metrics',
  'DEFAULT_COMPILATION_CACHE': 'training.setup',
  'COMPILATION_CACHE_HELP': 'training.setup',
  'enable_compilation_cache': 'training.setup',
  'initialize_distributed': 'training.sharding',
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
  if name in _EXPORTS:
    return getattr(importlib.import_module(_EXPORTS[name]), name)
  try:
    return importlib.import_module(f'{__name__}.{name}')  # a submodule, e.g. training.steps
  except ModuleNotFoundError:
    raise AttributeError(f"module 'training' has no attribute {name!r}") from None
