"""A deterministic, resumable iterator of padded batches of a split's token ids.

A split is tokenized once into an `EncodedSplit` (data.encoded_split: flat ids plus offsets,
compact even for large corpora). Each epoch is then a list of global batches of example positions,
computed from `(seed + epoch)` alone, so the iterator's whole state is `{'epoch', 'batch'}` and a
restored iterator yields exactly the batch the saved one would have yielded next.

Padding stays small through length bucketing: a batch is padded to the smallest multiple of
`bucket_step` that holds its longest row, and batches group rows of similar length (training:
sorted within pools of `_POOL_BATCHES` batches of a shuffled order; evaluation: sorted
globally). Every host computes the same global batches and takes its own slice of rows.
"""

from collections.abc import Callable, Mapping

import jax
import numpy as np

from data.encoded_split import EncodedSplit, placeholder_split
from data.tokenizers import PAD_ID

# Training batches are formed from pools of this many batches, sorted by length: larger pools
# pad less but make batches of similar-length examples more often.
_POOL_BATCHES = 32


def check_batch_args(
  batch_size: int, num_epochs: int | None, process_index: int | None, process_count: int | None
) -> tuple[int, int]:
  """`(process_index, process_count)`, defaulting to this JAX process's, after checking them.

  Raises:
    ValueError: for a host index outside the job, a global batch that does not split evenly
      over the hosts, or fewer than one epoch.
  """
  process_index = jax.process_index() if process_index is None else process_index
  process_count = jax.process_count() if process_count is None else process_count
  if process_count < 1 or not 0 <= process_index < process_count:
    raise ValueError(
      f'process_index must be in [0, process_count), got {process_index} of {process_count}.'
    )
  if batch_size < 1 or batch_size % process_count:
    raise ValueError(
      f'batch_size must be a positive multiple of process_count={process_count}, got {batch_size}.'
    )
  if num_epochs is not None and num_epochs < 1:
    raise ValueError(f'num_epochs must be None (forever) or at least 1, got {num_epochs}.')
  return process_index, process_count


def _padded_length(length: int, step: int) -> int:
  return -(-length // step) * step


def _gather(flat: np.ndarray, offsets: np.ndarray, rows: np.ndarray, width: int) -> np.ndarray:
  """Rows `rows` of a flat sequence store, padded with PAD_ID to `width`: `[len(rows), width]`."""
  starts = offsets[rows][:, None]  # [R, 1]
  lengths = offsets[rows + 1][:, None] - starts  # [R, 1]
  cols = np.arange(width)[None, :]  # [1, W]
  positions = np.minimum(starts + cols, len(flat) - 1)  # [R, W], clipped past the end
  return np.where(cols < lengths, flat[positions], PAD_ID).astype(np.int32)


class PaddedBatches:
  """Padded batches `{'inputs' [B, S], 'targets' [B, T], 'index' [B]}` of one split, resumable.

  Every epoch visits each kept example exactly once; its last batch may be partial and is then
  filled with all-padding rows whose 'index' is -1. Use `get_state`/`set_state` to checkpoint.
  """

  def __init__(
    self,
    encoded: EncodedSplit,
    *,
    batch_size: int,
    shuffle: bool,
    seed: int,
    num_epochs: int | None,
    process_index: int,
    process_count: int,
    bucket_step: int,
  ):
    """See `data.translation.TranslationData.batches`; `batch_size` is global, this host yields
    its share of rows."""
    self._encoded = encoded
    self._batch_size = batch_size
    self._host_rows = batch_size // process_count
    self._first_row = process_index * self._host_rows
    self._shuffle = shuffle
    self._seed = seed
    self._num_epochs = num_epochs
    self._bucket_step = bucket_step
    self._source_lengths = encoded.source_lengths
    self._target_lengths = encoded.target_lengths
    self._epoch = 0
    self._batch = 0
    self._plan_epoch = -1
    self._plan: list[np.ndarray] = []

  @property
  def batches_per_epoch(self) -> int:
    """Number of (global) batches in one epoch."""
    return -(-len(self._encoded) // self._batch_size)

  def _epoch_plan(self, epoch: int) -> list[np.ndarray]:
    """The global batches of `epoch`, as arrays of positions into the encoded split."""
    if epoch == self._plan_epoch:
      return self._plan
    size = self._batch_size
    if self._shuffle:
      rng = np.random.default_rng(self._seed + epoch)
      order = rng.permutation(len(self._encoded))
      pool = size * _POOL_BATCHES
      batches = []
      for start in range(0, len(order), pool):
        chunk = self._by_length(order[start : start + pool])
        batches.extend(chunk[i : i + size] for i in range(0, len(chunk), size))
      plan = [batches[i] for i in rng.permutation(len(batches))]
    else:
      order = self._by_length(np.arange(len(self._encoded)))
      plan = [order[i : i + size] for i in range(0, len(order), size)]
    self._plan_epoch, self._plan = epoch, plan
    return plan

  def _by_length(self, rows: np.ndarray) -> np.ndarray:
    """`rows` stably sorted by source length, then target length."""
    return rows[np.lexsort((self._target_lengths[rows], self._source_lengths[rows]))]

  def __iter__(self) -> 'PaddedBatches':
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    if self._batch >= self.batches_per_epoch:
      self._epoch, self._batch = self._epoch + 1, 0
    if self._num_epochs is not None and self._epoch >= self._num_epochs:
      raise StopIteration
    rows = self._epoch_plan(self._epoch)[self._batch]
    self._batch += 1
    return self._assemble(rows)

  def _assemble(self, rows: np.ndarray) -> dict[str, np.ndarray]:
    # The padded lengths come from the global batch, so all hosts agree on the shapes.
    s = _padded_length(int(self._source_lengths[rows].max()), self._bucket_step)
    t = _padded_length(int(self._target_lengths[rows].max()), self._bucket_step)
    mine = rows[self._first_row : self._first_row + self._host_rows]
    n = len(mine)
    e = self._encoded
    batch = {
      'inputs': np.full((self._host_rows, s), PAD_ID, np.int32),
      'targets': np.full((self._host_rows, t), PAD_ID, np.int32),
      'index': np.full((self._host_rows,), -1, np.int32),
    }
    batch['inputs'][:n] = _gather(e.source, e.source_offsets, mine, s)
    batch['targets'][:n] = _gather(e.target, e.target_offsets, mine, t)
    batch['index'][:n] = e.index[mine]
    return batch

  def get_state(self) -> dict[str, int]:
    """The position of the next batch, `{'epoch': int, 'batch': int}` (JSON-able)."""
    return {'epoch': self._epoch, 'batch': self._batch}

  def set_state(self, state: Mapping[str, int]) -> None:
    """Restores a position from `get_state`; the next batch is the one that followed it.

    Values may be Python ints or 0-d integer arrays (as a checkpoint library may return them).
    """
    if not isinstance(state, Mapping) or set(state) != {'epoch', 'batch'}:
      raise ValueError(
        f"Iterator state must be a dict with keys 'epoch' and 'batch', got {state!r}."
      )
    values = [np.asarray(state[key]) for key in ('epoch', 'batch')]
    if not all(v.shape == () and np.issubdtype(v.dtype, np.integer) and v >= 0 for v in values):
      raise ValueError(f'Iterator state values must be non-negative ints, got {state!r}.')
    epoch, batch = (int(v) for v in values)
    if batch > self.batches_per_epoch:
      raise ValueError(
        f'Iterator state batch={batch} exceeds the {self.batches_per_epoch} '
        'batches per epoch of this split and batch size.'
      )
    self._epoch, self._batch = epoch, batch


# A per-batch transform of `DenseBatches`: (this host's real rows, generator) -> arrays.
BatchTransform = Callable[[dict[str, np.ndarray], np.random.Generator], dict[str, np.ndarray]]


class DenseBatches(PaddedBatches):
  """Fixed-shape batches of dense per-example arrays, planned as `PaddedBatches` plans.

  Every example has the same shape, so the parent's plan is given equal placeholder lengths
  (see `placeholder_split`): shuffled training epochs with `seed + epoch`, the split's order for
  evaluation, host slices, and `get_state`/`set_state`, all as they are. Each batch is
  `{key: the rows of arrays[key]}` passed through `transform`, plus 'index'; the rows of a
  partial last batch are zeros with index -1.
  """

  def __init__(
    self, arrays: Mapping[str, np.ndarray], *, transform: BatchTransform | None = None, **kwargs
  ):
    """Creates the iterator.

    Args:
      arrays: per-example arrays `[N, ...]`, all of the same length N.
      transform: applied to this host's real rows of each batch with a generator seeded from
        `(seed, epoch, batch, first row of this host)`, so a restored iterator transforms
        exactly as the saved one would have; e.g. data augmentation, normalization.
      **kwargs: the `PaddedBatches` arguments but `encoded` and `bucket_step`.
    """
    lengths = {len(a) for a in arrays.values()}
    if len(lengths) != 1:
      raise ValueError(f'DenseBatches needs arrays of one length, got {sorted(lengths)}.')
    ones = np.ones(lengths.pop(), np.int64)
    super().__init__(placeholder_split(ones, ones), bucket_step=1, **kwargs)
    self._arrays, self._transform = dict(arrays), transform

  def _assemble(self, rows: np.ndarray) -> dict[str, np.ndarray]:
    mine = rows[self._first_row : self._first_row + self._host_rows]
    real = {key: a[mine] for key, a in self._arrays.items()}
    if self._transform is not None:
      # `__next__` has already moved past this batch: it is number `self._batch - 1`.
      rng = np.random.default_rng([self._seed, self._epoch, self._batch - 1, self._first_row])
      real = self._transform(real, rng)
    real['index'] = mine.astype(np.int32)
    batch = {}
    for key, values in real.items():
      batch[key] = np.full(
        (self._host_rows, *values.shape[1:]), -1 if key == 'index' else 0, values.dtype
      )
      batch[key][: len(mine)] = values
    return batch
