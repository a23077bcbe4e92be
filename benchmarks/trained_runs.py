"""A trained workdir's task and newest checkpoint, and its test split as arrays run in batches:
what the intervention studies (interventions_study.py, documents_study.py) share.
"""

import os

import numpy as np

from reports.run_eval import load_config
import tasks
from training import sharding
from training import workdir as workdir_lib
from training.checkpoints import Checkpointer
from training.setup import build_state

SPLIT = 'test'


def load(workdir: str):
  """`(task, train state, mesh)` of the newest checkpoint of a training workdir."""
  config = load_config(workdir)
  with workdir_lib.staging(workdir) as staged:
    task = tasks.build(config, staged)
  checkpointer = Checkpointer(os.path.join(workdir, 'checkpoints'), max_to_keep=None, create=False)
  try:
    state, _ = checkpointer.restore(build_state(config, task))
  finally:
    checkpointer.close()
  return task, state, sharding.make_mesh(config.mesh)


def split_arrays(task, batch_size: int = 250) -> dict[str, np.ndarray]:
  """The split's batches concatenated, padding rows (index < 0) dropped, in split order."""
  batches = list(task.batches(SPLIT, batch_size=batch_size, shuffle=False, seed=0, num_epochs=1))
  width = {
    key: max(b[key].shape[1] for b in batches) for key in batches[0] if batches[0][key].ndim == 2
  }
  pad = lambda a, key: np.pad(a, [(0, 0), (0, width[key] - a.shape[1])]) if key in width else a
  out = {key: np.concatenate([pad(b[key], key) for b in batches]) for key in batches[0]}
  order = np.argsort(np.where(out['index'] < 0, np.iinfo(np.int32).max, out['index']))
  kept = order[out['index'][order] >= 0]
  return {key: value[kept] for key, value in out.items()}


def in_batches(fn, *arrays, size: int = 250) -> np.ndarray:
  """`fn` over rows of `arrays` `size` at a time (the last batch padded to one shape)."""
  n, outs = len(arrays[0]), []
  for start in range(0, n, size):
    chunk = [a[start : start + size] for a in arrays]
    rows = len(chunk[0])
    chunk = [np.concatenate([c, np.repeat(c[-1:], size - rows, axis=0)]) for c in chunk]
    outs.append(np.asarray(fn(*chunk))[:rows])
  return np.concatenate(outs)
