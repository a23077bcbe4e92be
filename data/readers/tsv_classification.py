"""`tsv_classification`: local files of `text<TAB>label` lines, for text classification.

Feature 'text' is the first column and 'label' the second (further columns are ignored); the
classes are the distinct labels of the training file, sorted. Lines that are not UTF-8, have no
tab, or have an empty text or label are skipped and counted in one warning.

Where the splits come from (`TsvClassificationConfig`):
- `validation_path` / `test_path` name files of their own (a corpus with an official test set,
  such as TREC): they are used as they are, and train is the whole `path`.
- A split without a file of its own is cut from `path`: `validation_fraction` or `test_fraction`
  of the distinct texts (at least one), chosen by `split_seed`. The cuts are disjoint by text
  (case and spacing ignored), so no test text is trained on.
- `num_folds` > 1: k-fold cross-validation of one file. The distinct texts are permuted by
  `split_seed` and dealt into `num_folds` folds; fold `fold` is the test split, and validation is
  `validation_fraction` of the rest (or `validation_path`).
Every class of the held-out splits must have an example in train. The builder config is named
after the file, a hash of every file's bytes and the split settings, so an edited file or
another split is prepared afresh.
"""

import dataclasses
import functools
import hashlib

import numpy as np
import tensorflow_datasets as tfds

from data.readers import tsv_parallel

Row = tuple[int, str, str]  # (line number, text, label)


@dataclasses.dataclass(eq=False)
class TsvClassificationConfig(tsv_parallel.TsvParallelConfig):
  """The files (`path`, `validation_path`, `test_path`) and how the splits are made; see the
  module docstring."""

  validation_fraction: float = 0.05
  test_fraction: float = 0.05
  num_folds: int = 0
  fold: int = 0
  split_seed: int = 0


def config_for_path(
  path: str, validation_path: str = '', test_path: str = '', **split: float | int
) -> TsvClassificationConfig:
  """A config named `<file name>_<hash of the files and split settings>` for `path`.

  Args:
    path: the training file (and the source of the splits without a file of their own).
    validation_path: the validation file; '' = cut from `path`.
    test_path: the test file; '' = cut from `path`.
    **split: `validation_fraction`, `test_fraction`, `num_folds`, `fold`, `split_seed`.

  Raises:
    FileNotFoundError: a named file does not exist (the message names its config field).
  """
  files = tsv_parallel.config_for_path(path, validation_path=validation_path, test_path=test_path)
  digest = hashlib.sha256(files.name.encode())
  digest.update(repr(sorted(split.items())).encode())
  stem = files.name.rsplit('_', 1)[0]
  return TsvClassificationConfig(
    name=f'{stem}_{digest.hexdigest()[:12]}',
    path=files.path,
    validation_path=files.validation_path,
    test_path=files.test_path,
    description=f'Labeled texts from {files.path}.',
    **split,
  )


def read_rows(path: str, field: str = 'tsv_path') -> list[Row]:
  """The `(line number, text, label)` of every well-formed line; see `tsv_parallel.read_columns`.

  Raises:
    ValueError: if no line is well formed (an empty file included).
  """
  return tsv_parallel.read_columns(path, 'tsv_classification', 'text<TAB>label', field=field)


def _groups(rows: list[Row]) -> dict[str, list[Row]]:
  """The rows grouped by their text, case and spacing ignored, in order of first appearance."""
  groups = {}
  for row in rows:
    groups.setdefault(' '.join(row[1].casefold().split()), []).append(row)
  return groups


def split_rows(
  rows: list[Row],
  config: TsvClassificationConfig | None = None,
  files: dict[str, list[Row]] | None = None,
) -> dict[str, list[Row]]:
  """Train, validation and test rows: those of `files` ('validation', 'test') as they are, the
  others cut from `rows` by whole groups of one text; see the module docstring.

  Raises:
    ValueError: too few distinct texts to cut the splits, or a held-out class absent from train.
  """
  config = config or TsvClassificationConfig(name='split')
  files = files or {}
  groups = _groups(rows)
  keys = list(groups)
  cuts = [split for split in ('test', 'validation') if split not in files]
  if len(keys) < len(cuts) + 1:
    raise ValueError(
      f'tsv_classification needs at least {len(cuts) + 1} distinct texts to cut '
      f'{" and ".join(cuts)} from train, got {len(keys)}.'
    )
  order = np.random.default_rng(config.split_seed).permutation(len(keys))
  parts = {}
  if config.num_folds > 1:
    parts['test'] = np.array_split(order, config.num_folds)[config.fold]
    order = np.setdiff1d(order, parts['test'], assume_unique=True)
    order = order[np.random.default_rng(config.split_seed + 1).permutation(len(order))]
  fractions = dict(test=config.test_fraction, validation=config.validation_fraction)
  for split in cuts:
    if split not in parts:
      count = min(max(1, round(fractions[split] * len(keys))), len(order) - 1)
      parts[split], order = order[:count], order[count:]
  parts['train'] = order
  splits = {
    split: [row for g in sorted(part) for row in groups[keys[g]]] for split, part in parts.items()
  }
  splits.update(files)
  labels = {label for _, _, label in splits['train']}
  for split in ('validation', 'test'):
    missing = sorted({label for _, _, label in splits[split]} - labels)
    if missing:
      raise ValueError(
        f'tsv_classification: class(es) {missing} have no example in the train '
        f'split (they are in {split}); add lines with these labels to train.'
      )
  return splits


class TsvClassification(tfds.core.GeneratorBasedBuilder):
  """Local `text<TAB>label` files; build its config with `config_for_path`."""

  VERSION = tfds.core.Version('1.1.0')
  RELEASE_NOTES = {
    '1.0.0': 'Initial release.',
    '1.1.0': 'Validation and test files; seeded fractions; k-fold splits.',
  }

  @functools.cached_property
  def _rows(self) -> list[Row]:
    """The training file's rows, read once: `_info` needs the class names first."""
    if self.builder_config is None or not self.builder_config.path:
      raise ValueError(
        'tsv_classification needs a config from '
        'data.readers.tsv_classification.config_for_path(path).'
      )
    return read_rows(self.builder_config.path)

  def _info(self) -> tfds.core.DatasetInfo:
    names = sorted({label for _, _, label in self._rows})
    return tfds.core.DatasetInfo(
      builder=self,
      description=__doc__,
      features=tfds.features.FeaturesDict(
        {'text': tfds.features.Text(), 'label': tfds.features.ClassLabel(names=names)}
      ),
      supervised_keys=('text', 'label'),
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # The files are local.
    c = self.builder_config
    files = {
      split: read_rows(path, f'{split}_path')
      for split, path in (('validation', c.validation_path), ('test', c.test_path))
      if path
    }
    splits = split_rows(self._rows, c, files)
    return {split: self._generate_examples(rows) for split, rows in splits.items()}

  def _generate_examples(self, rows: list[Row]):
    for number, text, label in rows:
      yield number, {'text': text, 'label': label}
