"""A split's token ids in flat NumPy arrays: `EncodedSplit` (flat ids plus offsets, compact even
for large corpora), made once per split by `encode_split` and batched by `data.pipeline`.

`placeholder_split` makes one of zero ids with given lengths, for a `PaddedBatches` subclass whose
rows are dense arrays of its own: the parent's plan reads only the lengths.
"""

from collections.abc import Sequence
import dataclasses

from absl import logging
import numpy as np

from data.tokenizers import EOS_ID


@dataclasses.dataclass(frozen=True)
class EncodedSplit:
  """Token ids of the examples of a split that fit the length limits, each ending with EOS.

  Attributes:
    index: `[K]` position of each kept example in the split's example list.
    source: flat source ids; example k is `source[source_offsets[k]:source_offsets[k + 1]]`.
    source_offsets: `[K + 1]` offsets into `source`.
    target: flat target ids.
    target_offsets: `[K + 1]` offsets into `target`.
  """

  index: np.ndarray
  source: np.ndarray
  source_offsets: np.ndarray
  target: np.ndarray
  target_offsets: np.ndarray

  def __len__(self) -> int:
    return len(self.index)

  @property
  def source_lengths(self) -> np.ndarray:
    return np.diff(self.source_offsets)

  @property
  def target_lengths(self) -> np.ndarray:
    return np.diff(self.target_offsets)


def _flatten(sequences: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
  offsets = np.zeros(len(sequences) + 1, np.int64)
  np.cumsum([len(s) for s in sequences], out=offsets[1:])
  flat = np.fromiter((i for s in sequences for i in s), np.int32, count=int(offsets[-1]))
  return flat, offsets


def encode_split(
  name: str,
  sources: Sequence[list[int]],
  targets: Sequence[list[int]],
  *,
  max_input_length: int,
  max_target_length: int,
  truncate: bool,
) -> EncodedSplit:
  """Appends EOS to tokenized examples and drops (or truncates) those over the length limits.

  Args:
    name: the split's name, for the log and errors.
    sources: source ids of every example, without EOS.
    targets: target ids of every example, without EOS.
    max_input_length: longest source kept, EOS excluded.
    max_target_length: longest target kept, EOS excluded.
    truncate: cut long examples to the limits instead of dropping them.

  Returns:
    The kept examples.

  Raises:
    ValueError: if no example is left, naming the limit that removed them.
  """
  kept, kept_sources, kept_targets = [], [], []
  too_long = {'max_input_length': 0, 'max_target_length': 0}
  long_examples = 0
  for i, (source, target) in enumerate(zip(sources, targets, strict=True)):
    source_over, target_over = len(source) > max_input_length, len(target) > max_target_length
    too_long['max_input_length'] += source_over
    too_long['max_target_length'] += target_over
    if source_over or target_over:
      long_examples += 1
      if not truncate:
        continue
    kept.append(i)
    kept_sources.append(list(source[:max_input_length]) + [EOS_ID])
    kept_targets.append(list(target[:max_target_length]) + [EOS_ID])
  limits = {'max_input_length': max_input_length, 'max_target_length': max_target_length}
  reasons = ', '.join(f'{n} over {field}={limits[field]}' for field, n in too_long.items() if n)
  if not sources:
    raise ValueError(f'Split {name!r} has no examples.')
  if not kept:
    raise ValueError(
      f'Split {name!r} is empty after filtering: all {len(sources)} examples are '
      f'too long ({reasons}); raise the config.dataset limit(s) or set '
      'config.dataset.truncate=True.'
    )
  if long_examples:
    logging.warning(
      'Split %r: %s %d of %d examples as too long (%s).',
      name,
      'truncated' if truncate else 'dropped',
      long_examples,
      len(sources),
      reasons,
    )
  source, source_offsets = _flatten(kept_sources)
  target, target_offsets = _flatten(kept_targets)
  return EncodedSplit(np.asarray(kept, np.int32), source, source_offsets, target, target_offsets)


def placeholder_split(source_lengths: np.ndarray, target_lengths: np.ndarray) -> EncodedSplit:
  """An `EncodedSplit` of zero ids with the given per-row lengths; row k has index k.

  Lets a `PaddedBatches` subclass that holds its rows as dense arrays reuse the parent's plan
  (length-sorted pools, `seed + epoch` shuffles, host slices) and `get_state`/`set_state`: the
  plan reads only the lengths, and the subclass's `_assemble` reads its own arrays.

  Args:
    source_lengths: `[K]` the length the plan sorts rows by first.
    target_lengths: `[K]` the length it sorts ties by.

  Returns:
    The placeholder split.
  """
  source_offsets, target_offsets = (
    np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    for lengths in (source_lengths, target_lengths)
  )
  # The ids are never read, and np.zeros maps its pages lazily: large splits cost next to nothing.
  return EncodedSplit(
    np.arange(len(source_lengths), dtype=np.int32),
    np.zeros(source_offsets[-1], np.int32),
    source_offsets,
    np.zeros(target_offsets[-1], np.int32),
    target_offsets,
  )
