"""`tsv_classification`: a local file of `text<TAB>label` lines, for text classification.

Feature 'text' is the first column and 'label' the second (further columns are ignored); the
classes are the distinct labels of the file, sorted. Lines that are not UTF-8, have no tab, or
have an empty text or label are skipped and counted in one warning.

Splits are disjoint by text (case and spacing ignored): 5% of the distinct texts go to
validation and 5% to test (at least one each), chosen by a fixed seed. Every class must keep at
least one example in train. The builder config is named after the file and a hash of its bytes
(see `config_for_path`), so an edited file is prepared afresh.
"""

import dataclasses
import functools

import tensorflow_datasets as tfds

from data import tsv_parallel


Row = tuple[int, str, str]  # (line number, text, label)


def config_for_path(path: str) -> tsv_parallel.TsvParallelConfig:
  """A config named `<file name>_<hash of contents>` for the file at `path`.

  Raises:
    FileNotFoundError: if there is no file at `path`.
  """
  config = tsv_parallel.config_for_path(path)
  return dataclasses.replace(config, description=f"Labeled texts from {config.path}.")


def read_rows(path: str) -> list[Row]:
  """The `(line number, text, label)` of every well-formed line; see `tsv_parallel.read_columns`.

  Raises:
    ValueError: if no line is well formed (an empty file included).
  """
  return tsv_parallel.read_columns(path, "tsv_classification", "text<TAB>label")


def split_rows(rows: list[Row]) -> dict[str, list[Row]]:
  """Assigns whole groups of rows with the same text to train, validation or test.

  Raises:
    ValueError: if there are fewer than 3 distinct texts, or a class has no train example.
  """
  splits = tsv_parallel.split_by_first_column(rows, "tsv_classification", "texts")
  missing = sorted({label for _, _, label in rows} - {label for _, _, label in splits["train"]})
  if missing:
    raise ValueError(f"tsv_classification: class(es) {missing} have no example in the train "
                     "split; add more lines with these labels.")
  return splits


class TsvClassification(tfds.core.GeneratorBasedBuilder):
  """A local `text<TAB>label` file; build its config with `config_for_path`."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Initial release."}

  @functools.cached_property
  def _rows(self) -> list[Row]:
    """The file's rows, read once: `_info` needs the class names before the splits are made."""
    if self.builder_config is None or not self.builder_config.path:
      raise ValueError("tsv_classification needs a config from "
                       "data.tsv_classification.config_for_path(path).")
    return read_rows(self.builder_config.path)

  def _info(self) -> tfds.core.DatasetInfo:
    names = sorted({label for _, _, label in self._rows})
    return tfds.core.DatasetInfo(
        builder=self,
        description=__doc__,
        features=tfds.features.FeaturesDict({"text": tfds.features.Text(),
                                             "label": tfds.features.ClassLabel(names=names)}),
        supervised_keys=("text", "label"))

  def _split_generators(self, dl_manager):
    del dl_manager  # The file is local.
    splits = split_rows(self._rows)
    return {split: self._generate_examples(rows) for split, rows in splits.items()}

  def _generate_examples(self, rows: list[Row]):
    for number, text, label in rows:
      yield number, {"text": text, "label": label}
