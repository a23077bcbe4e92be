"""Data that batches its splits: `batches`, the one entry every task's data offers, defined once.

Each task's data class (`data.translation.TranslationData`, `data.language.LanguageData`, ...)
subclasses `BatchSource`, says under 'Batches' in its docstring what a batch holds, and builds its
iterator in `_batches` from a checked `BatchPlan`:

    class MyData(BatchSource):
      def _batches(self, split, plan):
        return DenseBatches(self.arrays(split), **plan.iterator_args())
"""

import abc
import dataclasses
from typing import Any

from data.pipeline import PaddedBatches, check_batch_args


@dataclasses.dataclass(frozen=True)
class BatchPlan:
  """What `BatchSource.batches` was asked, with the hosts filled in and every value checked.

  Attributes:
    batch_size: the global batch size; each host gets `batch_size // process_count` rows.
    shuffle: reshuffle every epoch (training); False gives a fixed order (evaluation).
    seed: the shuffling (and augmentation) seed.
    num_epochs: epochs before StopIteration; None repeats forever.
    process_index: this host's index.
    process_count: number of hosts.
  """

  batch_size: int
  shuffle: bool
  seed: int
  num_epochs: int | None
  process_index: int
  process_count: int

  def iterator_args(self) -> dict[str, Any]:
    """The plan as the keyword arguments of `PaddedBatches` and its subclasses."""
    return dataclasses.asdict(self)


class BatchSource(abc.ABC):
  """A task's data: subclasses implement `_batches` and document its batches under 'Batches'."""

  def batches(
    self,
    split: str,
    *,
    batch_size: int,
    shuffle: bool,
    seed: int,
    num_epochs: int | None = None,
    process_index: int | None = None,
    process_count: int | None = None,
  ) -> PaddedBatches:
    """A resumable iterator of this host's batches of `split`.

    Args:
      split: the split to read.
      batch_size: the global batch size; each host gets `batch_size // process_count` rows.
      shuffle: reshuffle every epoch (with `seed + epoch`), and augment where the data does;
        False gives a fixed order, the one the class's docstring names (map rows back to
        examples with 'index').
      seed: the shuffling (and augmentation) seed.
      num_epochs: epochs before StopIteration; None repeats forever.
      process_index: this host's index; default `jax.process_index()`.
      process_count: number of hosts; default `jax.process_count()`.

    Returns:
      An iterator of dicts of arrays with `b = batch_size // process_count` rows, laid out as
      the class's docstring says under 'Batches', each with 'index' int32 `[b]`: the row's
      position in the split, -1 for the rows that fill a partial last batch.
      `get_state()` / `set_state()` save and restore its position.

    Raises:
      ValueError: for a bad batch size, epoch count or host index, or a split the data rejects.
    """
    process_index, process_count = check_batch_args(
      batch_size, num_epochs, process_index, process_count
    )
    plan = BatchPlan(batch_size, shuffle, seed, num_epochs, process_index, process_count)
    return self._batches(split, plan)

  @abc.abstractmethod
  def _batches(self, split: str, plan: BatchPlan) -> PaddedBatches:
    """The iterator `batches` returns: the batches of `split`, planned as `plan` says."""
