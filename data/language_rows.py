"""A language model's rows: a split's token ids cut into rows of `seq_length + 1` tokens with the
weight and the evidence of each target, and the batches of those rows (`LanguageBatches`).

Every function returns `{'tokens': int32 [N, L + 1], 'weights': float32 [N, L], 'support': int32
[N, L]}`, `L = seq_length`: the model reads `tokens[:, :-1]` and predicts `tokens[:, 1:]`;
`data.language` adds each row's index.
"""

from collections.abc import Callable, Mapping

from absl import logging
import numpy as np

from data.encoded_split import placeholder_split
from data.language_sources import Example
from data.pipeline import PaddedBatches
from data.tokenizers import PAD_ID


def stream_rows(ids: np.ndarray, length: int, name: str, split: str) -> dict[str, np.ndarray]:
  """Windows of a split's joined ids `[n]`, every target weighted.

  Raises:
    ValueError: if the split holds fewer than `length + 1` tokens.
  """
  count = (len(ids) - 1) // length  # Windows overlap by one token: none is lost as a target.
  if count < 1:
    raise ValueError(
      f'config.dataset.seq_length={length} makes a window longer than the '
      f'corpus: split {split!r} of {name} has {len(ids)} tokens, fewer '
      f'than seq_length + 1.'
    )
  starts = np.arange(count)[:, None] * length  # [N, 1]
  return {
    'tokens': ids[starts + np.arange(length + 1)],  # [N, L + 1]
    'weights': np.ones((count, length), np.float32),
    'support': np.full((count, length), -1, np.int32),
  }


def framed_rows(
  pieces: np.ndarray, length: int, bos_id: int, eos_id: int, name: str, split: str
) -> dict[str, np.ndarray]:
  """Windows for a pretrained tokenizer: each window of `length - 2` of the split's joined pieces
  `[n]` framed `[CLS] pieces [SEP]` (`bos_id`, `eos_id`) as in its pretraining, then a PAD (the
  last target, weight 0).

  Raises:
    ValueError: if a row cannot hold the frame and a piece, or the split one window.
  """
  count = len(pieces) // max(length - 2, 1)
  if length < 3 or count < 1:
    raise ValueError(
      f'config.dataset.seq_length={length} must hold [CLS], at least one piece '
      f'and [SEP], and fit in split {split!r} of {name} ({len(pieces)} '
      'pieces).'
    )
  tokens = np.full((count, length + 1), PAD_ID, np.int32)  # [N, L + 1]
  tokens[:, 0], tokens[:, length - 1] = bos_id, eos_id
  tokens[:, 1 : length - 1] = pieces[: count * (length - 2)].reshape(count, length - 2)
  weights = np.ones((count, length), np.float32)
  weights[:, -1] = 0
  return {'tokens': tokens, 'weights': weights, 'support': np.full((count, length), -1, np.int32)}


def example_rows(
  examples: list[Example],
  encode: Callable[[Example], list[int]],
  length: int,
  name: str,
  split: str,
) -> dict[str, np.ndarray]:
  """One PAD-filled row per example (`encode` gives its ids), weighted at its real targets or,
  when it marks answers, only where an answer is predicted, with the support of each.

  Raises:
    ValueError: if the split has no examples, or an example marks answer or support positions
      outside its tokens.
  """
  if not examples:
    raise ValueError(f'Split {split!r} of {name} has no examples.')
  tokens = np.full((len(examples), length + 1), PAD_ID, np.int32)
  weights = np.zeros((len(examples), length), np.float32)
  support = np.full((len(examples), length), -1, np.int32)
  truncated = answers_cut = 0
  for i, example in enumerate(examples):
    ids = encode(example)
    truncated += len(ids) > length + 1
    tokens[i, : min(len(ids), length + 1)] = ids[: length + 1]
    if not example.answers:
      weights[i, : max(0, min(len(ids), length + 1) - 1)] = 1
      continue
    answers, sources = example.answers, example.support or (-1,) * len(example.answers)
    if not (
      len(sources) == len(answers)
      and all(0 < p < len(ids) for p in answers)
      and all(-1 <= s < len(ids) for s in sources)
    ):
      raise ValueError(
        f'Example {i} of {name} {split} has answers {example.answers} and '
        f'support {example.support} (config.dataset.answers_key, support_key) '
        f'that do not fit its {len(ids)} tokens.'
      )
    for p, s in zip(answers, sources):
      if p > length:  # Its target fell off the row.
        answers_cut += 1
        continue
      weights[i, p - 1] = 1  # The answer at p is predicted from the input at p - 1.
      support[i, p - 1] = s if s < length else -1
  if truncated:
    logging.warning(
      '%s %s: truncated %d of %d examples to seq_length + 1 = %d tokens (%d answers cut).',
      name,
      split,
      truncated,
      len(examples),
      length + 1,
      answers_cut,
    )
  return {'tokens': tokens, 'weights': weights, 'support': support}


class LanguageBatches(PaddedBatches):
  """Batches of one split's rows, planned and resumed as `PaddedBatches` does.

  Every row is given the same placeholder length: rows have one fixed shape, so sorting by
  length would save no padding and only make training batches less random. The plan thus keeps
  the shuffled order (or, without shuffling, the split's).
  """

  def __init__(self, rows: Mapping[str, np.ndarray], **kwargs):
    """See `LanguageData.batches`; `rows` is `LanguageData.rows(split)`."""
    same = np.zeros(len(rows['tokens']), np.int64)
    super().__init__(placeholder_split(same, same), bucket_step=1, **kwargs)
    self._rows = rows

  def _assemble(self, rows: np.ndarray) -> dict[str, np.ndarray]:
    mine = rows[self._first_row : self._first_row + self._host_rows]
    n, (b, length) = len(mine), (self._host_rows, self._rows['weights'].shape[1])
    tokens = np.full((b, length + 1), PAD_ID, np.int32)
    tokens[:n] = self._rows['tokens'][mine]
    # Copies, so a task that masks the inputs in place leaves the targets alone.
    batch = {
      'inputs': tokens[:, :-1].copy(),
      'targets': tokens[:, 1:].copy(),
      'weights': np.zeros((b, length), np.float32),
      'support': np.full((b, length), -1, np.int32),
      'index': np.full(b, -1, np.int32),
    }
    for key in ('weights', 'support', 'index'):
      batch[key][:n] = self._rows[key][mine]
    return batch
