"""The Neural Turing Machine's copy task: read a sequence of random bit vectors, then write it back.

    copying = algorithmic.build(config.dataset)
    batch = next(copying.batches('train', batch_size=32, shuffle=True, seed=0))
    # {'inputs': [B, T, W + 1], 'targets': [B, T, W], 'weights': [B, T], 'index': [B]}

Each example is L vectors of W random bits (L uniform in [min_length, max_length]; the test split
has every L = `test_length`, by default twice the longest training length, to measure how the
learned procedure generalises), then one step with only the delimiter channel on, then L blank
steps during which the model must reproduce the vectors (Graves et al. 2014, Sec. 4.1). Rows are
padded with blank steps to one length per split, T = 2 * longest L + 1; `weights` marks the L
output steps. The bits are drawn once per split from a fixed seed, so runs are reproducible.
"""

import dataclasses
import functools
from typing import Any

import ml_collections
import numpy as np

from data.batch_source import BatchPlan, BatchSource
from data.pipeline import DenseBatches
from data.schema import checked_fields

SPLITS = ('train', 'validation', 'test')


def default_config() -> ml_collections.ConfigDict:
  """Returns the copy task's `config.dataset` with every field at its default."""
  c = ml_collections.ConfigDict()
  c.name = 'copy'  # The only algorithmic dataset so far.
  c.width = 8  # Bits per vector W (the input has one more: the delimiter).
  c.min_length = 1  # Shortest training sequence.
  c.max_length = 20  # Longest training (and validation) sequence.
  c.test_length = 0  # Length of every test sequence; 0 = 2 * max_length.
  c.train_size = 50_000  # Training sequences (an epoch), drawn once.
  c.eval_size = 1_000  # Validation and test sequences each.
  c.seed = 0  # Seed of the bits and lengths.
  c.batch_size = 32  # Global training batch size (split evenly across hosts).
  c.eval_batch_size = 250  # Global evaluation batch size.
  c.train_split = 'train'  # Split for training.
  c.eval_split = 'validation'  # Split evaluated during training (training lengths).
  c.test_split = 'test'  # Split for the final evaluation (test_length).
  return c


_POSITIVE = (
  'width',
  'min_length',
  'max_length',
  'train_size',
  'eval_size',
  'batch_size',
  'eval_batch_size',
)


def validate_config(config: Any) -> ml_collections.FrozenConfigDict:
  """Checks `config.dataset`; raises ValueError naming the first bad field."""
  merged = checked_fields(
    config,
    default_config(),
    positive=_POSITIVE,
    non_empty=('train_split', 'eval_split', 'test_split'),
  )
  if merged['name'] != 'copy':
    raise ValueError(
      f"config.dataset.name={merged['name']!r} is not an algorithmic dataset; valid: ['copy']."
    )
  if merged['min_length'] > merged['max_length']:
    raise ValueError(
      f'config.dataset.min_length={merged["min_length"]} exceeds '
      f'config.dataset.max_length={merged["max_length"]}.'
    )
  if merged['test_length'] < 0:
    raise ValueError(
      f'config.dataset.test_length={merged["test_length"]} must be >= 0 (0 = twice max_length).'
    )
  for split in ('train_split', 'eval_split', 'test_split'):
    if merged[split] not in SPLITS:
      raise ValueError(
        f'config.dataset.{split}={merged[split]!r} is not a split; valid: {list(SPLITS)}.'
      )
  return ml_collections.FrozenConfigDict(merged)


@dataclasses.dataclass(frozen=True)
class Sequences:
  """The bits of one split.

  Attributes:
    bits: uint8 `[N, L_max, W]`, zero past each sequence's length.
    lengths: `[N]` the sequence lengths.
  """

  bits: np.ndarray
  lengths: np.ndarray


def layout(bits: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
  """Model inputs, targets and output weights of sequences, `T = 2 * L_max + 1` steps.

  Args:
    bits: uint8 `[B, L_max, W]`, zero past each row's length.
    lengths: `[B]` the sequence lengths L.

  Returns:
    `{'inputs': float32 [B, T, W + 1], 'targets': float32 [B, T, W], 'weights': float32 [B, T]}`:
    inputs hold the bits at steps 0..L-1 and the delimiter channel at step L; targets hold the
    bits at steps L+1..2L, where weights are 1.
  """
  batch, longest, width = bits.shape
  steps = 2 * longest + 1
  inputs = np.zeros((batch, steps, width + 1), np.float32)
  targets = np.zeros((batch, steps, width), np.float32)
  weights = np.zeros((batch, steps), np.float32)
  inputs[:, :longest, :width] = bits
  rows = np.arange(batch)
  inputs[rows, lengths, width] = 1.0  # the delimiter
  time = np.arange(longest)[None, :]  # [1, L_max]
  out_steps = lengths[:, None] + 1 + time  # [B, L_max]
  real = time < lengths[:, None]
  targets[np.broadcast_to(rows[:, None], real.shape)[real], out_steps[real]] = bits[real]
  weights[np.broadcast_to(rows[:, None], real.shape)[real], out_steps[real]] = 1.0
  return dict(inputs=inputs, targets=targets, weights=weights)


class Copying(BatchSource):
  """The copy task's splits; see the module docstring.

  Batches: the arrays of `layout` and 'index'; without shuffling, the split's order. Rows of a
  partial last batch are all zeros (weights 0).

  Attributes:
    config: the validated `config.dataset`.
    width: bits per vector W.
    test_length: the length of every test sequence.
  """

  def __init__(self, config: ml_collections.FrozenConfigDict):
    self.config = config
    self.width = config.width
    self.test_length = config.test_length or 2 * config.max_length

  @functools.lru_cache(maxsize=None)
  def sequences(self, split: str) -> Sequences:
    """The bits and lengths of `split`, drawn once from `(seed, split)`."""
    if split not in SPLITS:
      raise ValueError(f'Split {split!r} is not a split of copy; valid: {list(SPLITS)}.')
    c = self.config
    rng = np.random.default_rng([c.seed, SPLITS.index(split)])
    count = c.train_size if split == 'train' else c.eval_size
    if split == 'test':
      lengths = np.full(count, self.test_length)
    else:
      lengths = rng.integers(c.min_length, c.max_length + 1, size=count)
    longest = int(lengths.max())
    bits = rng.integers(0, 2, size=(count, longest, c.width), dtype=np.uint8)
    bits[np.arange(longest)[None, :] >= lengths[:, None]] = 0
    return Sequences(bits, lengths)

  def _batches(self, split: str, plan: BatchPlan) -> DenseBatches:
    sequences = self.sequences(split)

    def transform(rows: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
      del rng  # the bits were drawn with the split
      return layout(rows['bits'], rows['lengths'])

    return DenseBatches(
      {'bits': sequences.bits, 'lengths': sequences.lengths},
      transform=transform,
      **plan.iterator_args(),
    )


def build(dataset_config: Any) -> Copying:
  """The copy task of `config.dataset` (see `default_config()`); ValueError on a bad field."""
  return Copying(validate_config(dataset_config))
