"""`tsv_parallel`: a local tab-separated parallel corpus, e.g. the Anki / Tatoeba files.

Each line is `english<TAB>other[<TAB>attribution]`; feature 'source' is the first column and
'target' the second (swap config.dataset.source_key/target_key to translate into English).
Lines without a tab or with an empty side are skipped and counted in one warning.

`validation_path` / `test_path` name files of their own (a corpus with an official test set):
they are used as they are, and train is the whole `path`. A split without a file of its own is
cut from `path`, disjoint by source sentence: all translations of "Go." land in the same split, so
the model is never tested on a sentence it saw in training. 5% of the distinct sources go to
validation and 5% to test (at least one each), chosen by a fixed seed. The builder config is
named after the file and a hash of every file's bytes, so an edited file is prepared afresh.
"""

import collections
import dataclasses
import hashlib
import re

from absl import logging
from etils import epath
import numpy as np
import tensorflow_datasets as tfds

from data.builders.text_pairs import text_pair_info

HOLDOUT_FRACTION = 0.05
_SEED = 0


@dataclasses.dataclass(eq=False)
class TsvParallelConfig(tfds.core.BuilderConfig):
  """The corpus files.

  Attributes:
    path: the tab-separated file (train, and the splits without a file of their own).
    validation_path: the validation file; '' = cut from `path`.
    test_path: the test file; '' = cut from `path`.
  """

  path: str = ''
  validation_path: str = ''
  test_path: str = ''


def config_for_path(
  path: str, field: str = 'tsv_path', *, validation_path: str = '', test_path: str = ''
) -> TsvParallelConfig:
  """A config named `<file name>_<hash of contents>` for the file at `path` (and the hash covers
  the validation and test files, when given).

  Raises:
    FileNotFoundError: if a named file does not exist (`config.dataset.<field>`, or
      `validation_path` / `test_path`, names it).
  """
  file = epath.Path(path).expanduser()
  if not file.is_file():
    raise FileNotFoundError(f'config.dataset.{field}: no such file: {path!r}.')
  digest = hashlib.sha256(file.read_bytes())
  files = dict(validation_path=validation_path, test_path=test_path)
  for name, other in files.items():
    if other:
      named = config_for_path(other, field=name)
      files[name] = named.path
      digest.update(f'{name}={named.name}'.encode())
  stem = re.sub(r'[^a-z0-9]+', '_', file.name.lower()).strip('_') or 'tsv'
  return TsvParallelConfig(
    name=f'{stem}_{digest.hexdigest()[:12]}',
    path=str(file),
    description=f'Sentence pairs from {file}.',
    **files,
  )


def read_columns(
  path: str, builder: str, header: str, field: str = 'tsv_path'
) -> list[tuple[int, str, str]]:
  """The `(line number, first column, second column)` of every well-formed line of a TSV file.

  Blank lines are ignored silently; lines that are not UTF-8, have no tab, or have an empty first
  or second column are skipped and counted in one warning naming `builder`. Further columns (an
  attribution, say) are ignored.

  Raises:
    ValueError: if no line is well formed; `header` names the expected columns and `field` the
      config field that named the file.
  """
  rows = []
  skipped = collections.Counter()
  first_skipped = 0
  for number, raw in enumerate(epath.Path(path).read_bytes().split(b'\n'), start=1):
    try:
      line = raw.decode('utf-8').lstrip('\ufeff').rstrip('\r')
    except UnicodeDecodeError:
      reason = 'not UTF-8'
    else:
      if not line.strip():
        continue
      columns = line.split('\t')
      if len(columns) < 2:
        reason = 'no tab'
      elif not columns[0].strip() or not columns[1].strip():
        reason = 'an empty column'
      else:
        rows.append((number, columns[0].strip(), columns[1].strip()))
        continue
    skipped[reason] += 1
    first_skipped = first_skipped or number
  if skipped:
    reasons = ', '.join(f'{count} with {reason}' for reason, count in sorted(skipped.items()))
    logging.warning(
      '%s: skipped %d malformed line(s) of %s (%s); the first is line %d.',
      builder,
      sum(skipped.values()),
      path,
      reasons,
      first_skipped,
    )
  if not rows:
    raise ValueError(f"config.dataset.{field} {path!r} has no '{header}' line.")
  return rows


def read_pairs(path: str, field: str = 'tsv_path') -> list[tuple[int, str, str]]:
  """The `(line number, source, target)` of every well-formed line of the file that
  `config.dataset.<field>` names; see `read_columns`."""
  return read_columns(path, 'tsv_parallel', 'source<TAB>target', field)


def split_by_first_column(
  rows: list[tuple[int, str, str]],
  builder: str,
  what: str,
  files: dict[str, list[tuple[int, str, str]]] | None = None,
) -> dict[str, list[tuple[int, str, str]]]:
  """Train, validation and test: the rows of `files` ('validation', 'test') as they are, the
  others cut from `rows` by whole groups with the same first column (case and spacing ignored),
  `HOLDOUT_FRACTION` of the groups (at least one) each; `builder` and `what` (the first column's
  contents) name them in errors."""
  files = files or {}
  groups = {}
  for row in rows:
    groups.setdefault(' '.join(row[1].casefold().split()), []).append(row)
  cuts = [split for split in ('test', 'validation') if split not in files]
  if len(groups) < len(cuts) + 1:
    raise ValueError(
      f'{builder} needs at least {len(cuts) + 1} distinct {what} to cut '
      f'{" and ".join(cuts)} from train, got {len(groups)}.'
    )
  keys = list(groups)
  order = np.random.default_rng(_SEED).permutation(len(keys))
  holdout = max(1, round(HOLDOUT_FRACTION * len(keys)))
  parts = {}
  for split in cuts:
    parts[split], order = order[:holdout], order[holdout:]
  parts['train'] = order
  splits = {
    split: [row for g in sorted(part) for row in groups[keys[g]]] for split, part in parts.items()
  }
  return {**splits, **files}


def split_by_source(
  pairs: list[tuple[int, str, str]], files: dict[str, list[tuple[int, str, str]]] | None = None
) -> dict[str, list[tuple[int, str, str]]]:
  """Assigns whole groups of pairs with the same source (case and spacing ignored) to a split;
  the splits in `files` come from their own files."""
  return split_by_first_column(pairs, 'tsv_parallel', 'source sentences', files)


def corpus_splits(
  path: str, validation_path: str = '', test_path: str = ''
) -> dict[str, list[tuple[int, str, str]]]:
  """The splits this builder writes for a corpus (`config.dataset.tsv_path`, and the validation
  and test files where given), for programs that read the same sentences without TFDS."""
  files = {
    split: read_pairs(file, f'{split}_path')
    for split, file in (('validation', validation_path), ('test', test_path))
    if file
  }
  return split_by_source(read_pairs(path), files)


class TsvParallel(tfds.core.GeneratorBasedBuilder):
  """A local tab-separated parallel corpus; build its config with `config_for_path`."""

  VERSION = tfds.core.Version('1.1.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.', '1.1.0': 'Validation and test files.'}

  def _info(self) -> tfds.core.DatasetInfo:
    return text_pair_info(self, __doc__)

  def _split_generators(self, dl_manager):
    del dl_manager  # The file is local.
    if self.builder_config is None or not self.builder_config.path:
      raise ValueError(
        'tsv_parallel needs a config from data.readers.tsv_parallel.config_for_path(path).'
      )
    c = self.builder_config
    splits = corpus_splits(c.path, c.validation_path, c.test_path)
    return {split: self._generate_examples(pairs) for split, pairs in splits.items()}

  def _generate_examples(self, pairs: list[tuple[int, str, str]]):
    for number, source, target in pairs:
      yield number, {'source': source, 'target': target}
