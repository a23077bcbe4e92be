"""Text classification data: `build(config.dataset, vocab_dir) -> LabeledText`, then batches.

    labeled = classification.build(config.dataset, workdir)
    it = labeled.batches('train', batch_size=64, shuffle=True, seed=0)
    batch = next(it)  # {'inputs': int32 [B, S, W] or [B, T], 'labels': int32 [B], 'index': [B]}

Layout 'document' splits each text into sentences (`data.sentences`) and encodes it as up to
`max_sentences` sentences of up to `max_words` word ids, for hierarchical models (attention over
words, then over sentences); layout 'sentence' encodes the whole text as one sequence of up to
`max_length` word ids. Ids are word-level (`WordTokenizer`), 0 is padding; no BOS/EOS is added.
Datasets (data.classification_sources): Attend's `key_sentence_docs` and `tsv_classification`
(prepared offline), or any TFDS text classification dataset (imdb_reviews, ag_news_subset, ...),
prepared by TFDS as usual. The vocabulary is saved with the label names
(data.classification_vocabulary).
"""

import dataclasses
from typing import Any

from absl import logging
import ml_collections
import numpy as np
import tensorflow_datasets as tfds

from data.batch_source import BatchPlan, BatchSource
from data.classification_sources import (
  Example,
  check_tsv_fields,
  classification_builder,
  feature_keys,
  label_names,
)
from data.classification_vocabulary import new_vocabulary, saved_vocabulary
from data.encoded_split import placeholder_split
from data.pipeline import PaddedBatches
from data.schema import checked_fields
from data.sentences import split_sentences
from data.text import TextOptions
from data.tfds_reading import as_text, read_split
from data.tokenizers import PAD_ID, WordTokenizer

LAYOUTS = ('document', 'sentence')


def default_config() -> ml_collections.ConfigDict:
  """Returns the classification `config.dataset` with every field at its default."""
  c = ml_collections.ConfigDict()
  c.name = 'key_sentence_docs'  # 'key_sentence_docs', 'tsv_classification' or a TFDS dataset.
  c.builder_config = ''  # TFDS builder config; '' = the default.
  c.data_dir = ''  # TFDS data dir to prepare datasets in; '' = ~/tensorflow_datasets.
  # tsv_classification: files of 'text<TAB>label' lines (data/readers/tsv_classification.py).
  c.tsv_path = ''  # The training file (the held-out splits are cut from it too).
  c.validation_path = ''  # The validation file; '' = validation_fraction of tsv_path.
  c.test_path = ''  # The test file; '' = test_fraction of tsv_path (or a fold).
  c.validation_fraction = 0.05  # Share of tsv_path's distinct texts held out for validation.
  c.test_fraction = 0.05  # Share of tsv_path's distinct texts held out for test.
  c.num_folds = 0  # k-fold cross-validation of tsv_path (0 = off): test = one fold.
  c.fold = 0  # Which fold is the test split, 0 .. num_folds - 1.
  c.split_seed = 0  # Seed of the cuts and folds (not of training).
  c.text_key = 'text'  # Feature holding the text.
  c.label_key = 'label'  # Feature holding the label (ClassLabel or text).
  c.key_sentences_key = 'key_sentences'  # Key sentence positions; '' or absent default = none.
  c.layout = 'document'  # 'document': [sentences, words]; 'sentence': one token sequence.
  c.lowercase = True  # Lower-case the text.
  c.split_punctuation = True  # Put spaces around punctuation ('boy.' -> 'boy .').
  c.vocab_size = 20000  # Word vocabulary cap, 4 specials included, built from train.
  c.max_sentences = 16  # document: sentences kept per document.
  c.max_words = 32  # document: words kept per sentence.
  c.max_length = 256  # sentence: words kept per text.
  c.bucket_step = 4  # Batches are trimmed to multiples of this (few jit shapes).
  c.batch_size = 64  # Global training batch size (split evenly across hosts).
  c.eval_batch_size = 256  # Global evaluation batch size.
  c.train_split = 'train'  # Split for training and for building the vocabulary.
  c.eval_split = 'validation'  # Split evaluated during training.
  c.test_split = 'test'  # Split for the final evaluation.
  return c


_POSITIVE = (
  'max_sentences',
  'max_words',
  'max_length',
  'bucket_step',
  'batch_size',
  'eval_batch_size',
)
_NON_EMPTY = ('name', 'text_key', 'label_key', 'train_split', 'eval_split', 'test_split')


def validate_config(config: Any) -> ml_collections.FrozenConfigDict:
  """Checks `config.dataset` against the schema and fills fields it leaves out with defaults.

  Raises:
    ValueError: naming the first bad field and what it accepts.
  """
  merged = checked_fields(config, default_config(), positive=_POSITIVE, non_empty=_NON_EMPTY)
  if merged['layout'] not in LAYOUTS:
    raise ValueError(
      f'config.dataset.layout={merged["layout"]!r} is not a layout; valid: {list(LAYOUTS)}.'
    )
  if merged['name'] == 'tsv_classification':
    check_tsv_fields(merged)
  return ml_collections.FrozenConfigDict(merged)


def _extent(mask: np.ndarray) -> np.ndarray:
  """`[...]` one past the last True along the last axis of `mask` `[..., L]`; 0 if none."""
  return np.where(mask.any(-1), mask.shape[-1] - np.argmax(mask[..., ::-1], axis=-1), 0)


class LabeledText(BatchSource):
  """A prepared classification dataset with its word tokenizer.

  Batches: `{'inputs': int32 [b, S, W] (document) or [b, T] (sentence), 'labels': int32 [b],
  'index': int32 [b]}`. S, W and T are the batch's longest real extents rounded up to multiples
  of `bucket_step` (at most the config's limits); without shuffling, sorted by length. Rows of a
  partial last batch are all padding, label 0.

  Attributes:
    name: the dataset, e.g. 'key_sentence_docs/default'.
    config: the validated `config.dataset`.
    layout: 'document' or 'sentence'.
    label_names: the class names; labels are indices into this list.
    preprocess: the text preprocessing, `str -> str`, applied after sentence splitting.
    tokenizer: the word tokenizer (set by `build`).
  """

  def __init__(
    self,
    builder: tfds.core.DatasetBuilder,
    config: ml_collections.FrozenConfigDict,
    label_names: list[str],
    key_sentences_key: str,
  ):
    """Wraps a prepared builder; `build` is the usual way to get one."""
    self.name = builder.info.full_name.rsplit('/', 1)[0]
    self.config = config
    self.layout = config.layout
    self.label_names = list(label_names)
    self.preprocess = TextOptions(
      lowercase=config.lowercase, split_punctuation=config.split_punctuation
    )
    self.tokenizer: WordTokenizer | None = None
    self._builder = builder
    self._key_sentences_key = key_sentences_key
    self._label_ids = {name: i for i, name in enumerate(self.label_names)}
    self._examples: dict[str, list[Example]] = {}
    self._encoded: dict[str, np.ndarray] = {}

  def _label(self, value: Any, split: str) -> int:
    if isinstance(value, (bytes, str)):  # A text label feature: its index among the names.
      name = as_text(value)
      if name not in self._label_ids:
        raise ValueError(
          f'Label {name!r} of split {split!r} is not a label of the train split '
          f'{self.config.train_split!r}; valid: {self.label_names}.'
        )
      return self._label_ids[name]
    return int(value)

  def examples(self, split: str) -> list[Example]:
    """Every example of `split` ('train', 'validation', 'test', or a TFDS slice), cached."""
    if split not in self._examples:
      c = self.config
      out = []
      for record in read_split(self._builder, split, self.name):
        keys = record[self._key_sentences_key] if self._key_sentences_key else ()
        out.append(
          dataclasses.replace(
            self.unlabeled(as_text(record[c.text_key])),
            label=self._label(record[c.label_key], split),
            key_sentences=tuple(int(k) for k in keys),
          )
        )
      self._examples[split] = out
      logging.info('%s %s: %d examples.', self.name, split, len(out))
    return self._examples[split]

  def _encode(self, sentences: tuple[str, ...], counts: np.ndarray) -> np.ndarray:
    """Ids of preprocessed `sentences`, `[S, W]` or `[T]`; adds what was cut to `counts`."""
    c = self.config
    if self.layout == 'sentence':
      ids = self.tokenizer.encode(' '.join(sentences))
      counts += [len(ids) > c.max_length, 0, 0, max(0, len(ids) - c.max_length)]
      row = np.zeros(c.max_length, np.int32)
      row[: min(len(ids), c.max_length)] = ids[: c.max_length]
      return row
    out = np.zeros((c.max_sentences, c.max_words), np.int32)
    dropped, cut = max(0, len(sentences) - c.max_sentences), 0
    for s, sentence in enumerate(sentences[: c.max_sentences]):
      ids = self.tokenizer.encode(sentence)
      cut += len(ids) > c.max_words
      counts[3] += max(0, len(ids) - c.max_words)
      out[s, : min(len(ids), c.max_words)] = ids[: c.max_words]
    counts[:3] += [dropped > 0 or cut > 0, dropped, cut]
    return out

  def unlabeled(self, text: str) -> Example:
    """A text as an example of this dataset reads it (split into sentences for the document
    layout, each preprocessed), with no label and no key sentences."""
    pieces = split_sentences(text) if self.layout == 'document' else [text]
    return Example(text, None, tuple(self.preprocess(p) for p in pieces), ())

  def encode(self, text: str) -> np.ndarray:
    """Ids of a new text, as a row of `encoded`: int32 `[max_sentences, max_words]` or `[T]`."""
    return self._encode(self.unlabeled(text).sentences, np.zeros(4, np.int64))

  def text_batch(self, text: str) -> dict[str, np.ndarray]:
    """A new text as a batch of its own (`batches` with one row): `encode(text)` trimmed to
    its extents rounded up to `bucket_step`. A Transformer reads a document's sentences as one
    row of `S * W` positions, so what it predicts depends on that width."""
    rows = ClassificationBatches(
      self.encode(text)[None],
      np.zeros(1, np.int32),
      bucket_step=self.config.bucket_step,
      **BatchPlan(1, False, 0, 1, 0, 1).iterator_args(),
    )
    return next(iter(rows))

  def encoded(self, split: str) -> np.ndarray:
    """Ids of every example of `split`, PAD_ID-padded and truncated to the limits, cached.

    Returns:
      int32 `[N, max_sentences, max_words]` (document) or `[N, max_length]` (sentence).
    """
    if split not in self._encoded:
      examples = self.examples(split)
      counts = np.zeros(4, np.int64)  # Texts cut, sentences dropped, sentences cut, words cut.
      shape = (
        (self.config.max_sentences, self.config.max_words)
        if self.layout == 'document'
        else (self.config.max_length,)
      )
      ids = np.zeros((len(examples), *shape), np.int32)
      for i, example in enumerate(examples):
        ids[i] = self._encode(example.sentences, counts)
      if counts[0]:
        c = self.config
        limits = (
          f'{counts[1]} sentence(s) over max_sentences={c.max_sentences}, {counts[2]} '
          f'sentence(s) over max_words={c.max_words}'
          if self.layout == 'document'
          else f'over max_length={c.max_length}'
        )
        logging.warning(
          '%s %s: truncated %d of %d texts (%s; %d words cut).',
          self.name,
          split,
          counts[0],
          len(examples),
          limits,
          counts[3],
        )
      self._encoded[split] = ids
    return self._encoded[split]

  def _batches(self, split: str, plan: BatchPlan) -> 'ClassificationBatches':
    labels = np.asarray([e.label for e in self.examples(split)], np.int32)
    return ClassificationBatches(
      self.encoded(split), labels, bucket_step=self.config.bucket_step, **plan.iterator_args()
    )


class ClassificationBatches(PaddedBatches):
  """Batches `{'inputs', 'labels', 'index'}` of one split, planned as `PaddedBatches` plans.

  The parent's plan (length-sorted pools, `seed + epoch` shuffles, host slices) and its
  `get_state`/`set_state` are used as they are: it is given each example's extents (sentences
  and words, or tokens) as source and target lengths over placeholder ids, and this class
  assembles the batches from the dense inputs instead.
  """

  def __init__(self, inputs: np.ndarray, labels: np.ndarray, **kwargs):
    """See `LabeledText.batches`; `inputs` is `[N, S, W]` or `[N, T]`, `labels` `[N]`."""
    real = inputs != PAD_ID
    # [N, A]: each example's real extent along each non-batch axis (sentences, words; tokens).
    self._extents = np.stack(
      [_extent(real)] if inputs.ndim == 2 else [_extent(real.any(-1)), _extent(real).max(-1)],
      axis=-1,
    )
    super().__init__(placeholder_split(self._extents[:, 0], self._extents[:, -1]), **kwargs)
    self._inputs, self._labels = inputs, labels

  def _assemble(self, rows: np.ndarray) -> dict[str, np.ndarray]:
    # The trimmed shape comes from the global batch, so all hosts agree on it.
    step = self._bucket_step
    widths = [
      min(-(-max(1, int(e)) // step) * step, limit)
      for e, limit in zip(self._extents[rows].max(0), self._inputs.shape[1:])
    ]
    mine = rows[self._first_row : self._first_row + self._host_rows]
    batch = {
      'inputs': np.full((self._host_rows, *widths), PAD_ID, np.int32),
      'labels': np.zeros(self._host_rows, np.int32),
      'index': np.full(self._host_rows, -1, np.int32),
    }
    batch['inputs'][: len(mine)] = self._inputs[(mine, *(slice(w) for w in widths))]
    batch['labels'][: len(mine)] = self._labels[mine]
    batch['index'][: len(mine)] = mine
    return batch


def build(dataset_config: Any, vocab_dir: str) -> LabeledText:
  """Prepares the dataset and its word tokenizer.

  The dataset is prepared into `dataset_config.data_dir` if it is not there yet. The tokenizer
  is loaded from `vocab_dir` when it holds one (so eval and resumed runs use exactly the training
  vocabulary); otherwise it is built from the train split and saved there.

  Args:
    dataset_config: the classification `config.dataset` (see `default_config()`); missing fields
      take defaults.
    vocab_dir: directory for the vocabulary file (usually the workdir).

  Returns:
    The dataset.

  Raises:
    ValueError: for a bad config field, or a saved vocabulary that is not a word vocabulary or
      was saved for other labels (one saved without labels, e.g. by pretraining, is adopted).
    FileNotFoundError: if `tsv_path` names no file.
  """
  config = validate_config(dataset_config)
  builder = classification_builder(config)
  builder.download_and_prepare()
  name = builder.info.full_name.rsplit('/', 1)[0]
  key_sentences_key = feature_keys(config, builder.info.features, name, default_config())
  names = label_names(config, builder, name)
  labeled = LabeledText(builder, config, names, key_sentences_key)
  labeled.tokenizer = saved_vocabulary(vocab_dir, name, names)
  if labeled.tokenizer is None:
    train = labeled.examples(config.train_split)
    labeled.tokenizer = new_vocabulary(
      (s for e in train for s in e.sentences),
      vocab_dir,
      name=name,
      split=config.train_split,
      label_names=names,
      max_size=config.vocab_size,
    )
  return labeled
