"""Where labeled texts come from: Attend's own builders (`key_sentence_docs`, and
`tsv_classification` for a user's TSV files, whose fields and splits are checked and made here),
prepared offline, or any TFDS text classification dataset; which of its features hold the text,
the label and the key sentences; its label names.

`data.classification` reads the records of a split into `Example`s and encodes them.
"""

from collections.abc import Mapping
import dataclasses
from typing import Any

import ml_collections
import tensorflow_datasets as tfds

from data.builders import key_sentence
from data.readers import tsv_classification
from data.tfds_reading import as_text, make_builder, read_all

OWN_BUILDERS = {
  'key_sentence_docs': key_sentence.KeySentenceDocs,
  'tsv_classification': tsv_classification.TsvClassification,
}


@dataclasses.dataclass(frozen=True)
class Example:
  """One labeled text.

  Attributes:
    text: the text as stored in the dataset.
    label: index into `LabeledText.label_names`; None for a new text (`unlabeled`).
    sentences: the preprocessed pieces that are tokenized: `split_sentences(text)`, each
      preprocessed, for the document layout; `(preprocessed text,)` for the sentence layout.
    key_sentences: positions in `split_sentences(text)` of the sentences that carry the label;
      empty when the dataset does not say.
  """

  text: str
  label: int | None
  sentences: tuple[str, ...]
  key_sentences: tuple[int, ...]


def check_tsv_fields(merged: dict[str, Any]) -> None:
  """Raises ValueError naming the first tsv_classification field that cannot make the splits."""
  if not merged['tsv_path']:
    raise ValueError(
      "config.dataset.tsv_path must name a file when config.dataset.name is 'tsv_classification'."
    )
  for field in ('validation_fraction', 'test_fraction'):
    if not 0 < merged[field] < 1:
      raise ValueError(f'config.dataset.{field}={merged[field]!r} must be in (0, 1).')
  folds, fold = merged['num_folds'], merged['fold']
  if folds < 0 or folds == 1:
    raise ValueError(f'config.dataset.num_folds={folds} must be 0 (off) or at least 2.')
  if folds and not 0 <= fold < folds:
    raise ValueError(
      f'config.dataset.fold={fold} must be in 0 .. {folds - 1} (config.dataset.num_folds={folds}).'
    )
  if folds and merged['test_path']:
    raise ValueError(
      "config.dataset.test_path must be '' with config.dataset.num_folds="
      f'{folds}: cross-validation tests on the folds of tsv_path.'
    )


def tsv_builder_config(config: Any) -> tsv_classification.TsvClassificationConfig:
  """The builder config of a validated tsv_classification `config.dataset`: its files and splits.

  Raises:
    FileNotFoundError: a named file does not exist.
  """
  return tsv_classification.config_for_path(
    config.tsv_path,
    config.validation_path,
    config.test_path,
    validation_fraction=config.validation_fraction,
    test_fraction=config.test_fraction,
    num_folds=config.num_folds,
    fold=config.fold if config.num_folds else 0,
    split_seed=config.split_seed,
  )


def classification_builder(config: ml_collections.FrozenConfigDict) -> tfds.core.DatasetBuilder:
  """`make_builder` for a text classification dataset, not yet prepared.

  Raises:
    ValueError: for an unknown dataset name or builder config.
    FileNotFoundError: if `tsv_path` names no file.
  """
  file_config = (
    tsv_builder_config(config)  # Its config is the files' and the splits'.
    if config.name == 'tsv_classification'
    else None
  )
  return make_builder(
    config,
    OWN_BUILDERS,
    kind='text classification',
    examples=('ag_news_subset', 'imdb_reviews', 'yelp_polarity_reviews'),
    builder_config=file_config,
  )


def feature_keys(
  config: ml_collections.FrozenConfigDict,
  features: Mapping[str, Any],
  name: str,
  defaults: Mapping[str, Any],
) -> str:
  """Checks the configured features exist; returns the key sentences feature ('' = none).

  A key sentences feature left at its default name (`defaults`, the schema's) may be absent.
  """
  for field in ('text_key', 'label_key'):
    if config[field] not in features:
      raise ValueError(
        f'config.dataset.{field}={config[field]!r} is not a feature of {name}; '
        f'valid: {sorted(features)}.'
      )
  key = config.key_sentences_key
  if key and key not in features:
    if key != defaults['key_sentences_key']:
      raise ValueError(
        f'config.dataset.key_sentences_key={key!r} is not a feature of {name}; '
        f"valid: {sorted(features)} or '' (none)."
      )
    return ''
  return key


def label_names(
  config: ml_collections.FrozenConfigDict, builder: tfds.core.DatasetBuilder, name: str
) -> list[str]:
  """The class names of a prepared dataset: a ClassLabel feature's, or a Text feature's values in
  the train split, sorted.

  Raises:
    ValueError: if the label feature is neither.
  """
  label_feature = builder.info.features[config.label_key]
  if isinstance(label_feature, tfds.features.ClassLabel):
    return list(label_feature.names)
  if isinstance(label_feature, tfds.features.Text):
    records = read_all(builder.as_data_source(split=config.train_split))
    return sorted({as_text(r[config.label_key]) for r in records})
  raise ValueError(
    f'config.dataset.label_key={config.label_key!r} is a '
    f'{type(label_feature).__name__} feature of {name}; valid: a ClassLabel or '
    'Text feature.'
  )
