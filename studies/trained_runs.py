"""A trained workdir's test split as arrays run in batches: what the intervention studies
(interventions_study.py, documents_study.py) share, and the workdir's newest readable checkpoint
(`newest`).
"""

import numpy as np

import sources

SPLIT = 'test'


def newest(workdir: str):
  """`(task, model)` of the newest readable checkpoint of a training workdir."""
  source = sources.resolve(workdir, newest=True)
  return source.task, source.model()


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
