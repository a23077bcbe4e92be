"""Translation data: `build(config.dataset, vocab_dir) -> TranslationData`, then batches.

    translation_data = translation.build(config.dataset, workdir)
    train_iter = translation_data.batches('train', batch_size=64, shuffle=True, seed=0)
    batch = next(train_iter)        # {'inputs': [B, S], 'targets': [B, T], 'index': [B]}

The `config.dataset` schema of translation is `default_config()` / `validate_config()` here. The
dataset is read through `tfds` data sources (array_record files, no TensorFlow): Attend's own
builders (`number_words`, `dates`, `tsv_parallel`: data.translation_sources) are prepared offline
on first use; any other registered TFDS dataset is prepared by TFDS as usual (which may need the
internet).
"""

import functools
from typing import Any

from absl import logging
import ml_collections
import tensorflow_datasets as tfds

from data.batch_source import BatchPlan, BatchSource
from data.encoded_split import EncodedSplit, encode_split
from data.pipeline import PaddedBatches
from data.placeholders import TAGS, label_tags, protect, protect_pair, restore, source_items
from data.schema import checked_fields
from data.text import TextOptions
from data.tfds_reading import as_text, read_split
from data.tokenizers import (
  EOS_ID,
  VOCAB_KINDS,
  Tokenizer,
  build_tokenizer,
  load_tokenizers,
  save_tokenizers,
)
from data.translation_sources import translation_builder


def default_config() -> ml_collections.ConfigDict:
  """Returns `config.dataset` with every field at its default (the number_words en->de task)."""
  c = ml_collections.ConfigDict()
  # Which data.
  c.name = 'number_words'  # 'number_words', 'dates', 'tsv_parallel' or any TFDS dataset name.
  c.builder_config = 'en_de'  # TFDS builder config, e.g. 'pt_to_en' for ted; '' = the default.
  c.source_key = 'source'  # Feature holding the source text ('pt' for ted pt_to_en).
  c.target_key = 'target'  # Feature holding the target text ('en' for ted pt_to_en).
  c.data_dir = ''  # TFDS data dir to prepare datasets in; '' = ~/tensorflow_datasets.
  c.tsv_path = ''  # tsv_parallel: file of 'english<TAB>other[<TAB>...]' lines.
  c.validation_path = ''  # tsv_parallel: the validation file; '' = 5% of tsv_path's sources.
  c.test_path = ''  # tsv_parallel: the test file; '' = 5% of tsv_path's sources.
  # Preprocessing, applied to both sides of every example before tokenization.
  c.lowercase = False  # Lower-case the text.
  c.strip_accents = False  # Drop accents from Latin letters ('café' -> 'cafe').
  c.split_punctuation = False  # Put spaces around punctuation ('boy.' -> 'boy .').
  c.split_cjk = False  # Put spaces around each CJK character (Chinese, Japanese).
  # Placeholders and identifiers of each source (data/placeholders.py) become numbered tags on
  # both sides, one SentencePiece piece each, and an output's tags become its source's items.
  c.protect_items = False
  # Tokenizers, built from the train split and saved into the workdir.
  c.source_vocab = 'char'  # 'char' | 'word' | 'sentencepiece'.
  c.target_vocab = 'char'  # 'char' | 'word' | 'sentencepiece'.
  c.vocab_size = 8000  # Cap (specials included) for word and sentencepiece vocabularies.
  c.shared_vocab = False  # One vocabulary for both sides (needs equal source/target_vocab).
  # Lengths and batches.
  c.max_input_length = 79  # Source tokens per example, EOS excluded (79 + EOS = 80).
  c.max_target_length = 79  # Target tokens per example, EOS excluded.
  c.truncate = False  # Truncate longer examples instead of dropping them.
  c.bucket_step = 8  # Padded lengths are multiples of this, so jit sees few shapes.
  c.batch_size = 64  # Global training batch size (split evenly across hosts).
  c.eval_batch_size = 256  # Global evaluation batch size.
  c.train_split = 'train'  # Split for training and for building the vocabularies.
  c.eval_split = 'validation'  # Split evaluated during training.
  c.test_split = 'test'  # Split for the final evaluation.
  return c


_CHOICES = {'source_vocab': VOCAB_KINDS, 'target_vocab': VOCAB_KINDS}
_POSITIVE = (
  'max_input_length',
  'max_target_length',
  'bucket_step',
  'batch_size',
  'eval_batch_size',
)
_NON_EMPTY = ('name', 'source_key', 'target_key', 'train_split', 'eval_split', 'test_split')


def validate_config(config: Any) -> ml_collections.FrozenConfigDict:
  """Checks `config.dataset` against the schema and fills fields it leaves out with defaults.

  Args:
    config: a ConfigDict or dict with fields of `default_config()`.

  Returns:
    The complete, frozen config.

  Raises:
    ValueError: naming the first bad field and what it accepts.
  """
  merged = checked_fields(config, default_config(), positive=_POSITIVE, non_empty=_NON_EMPTY)
  for key, choices in _CHOICES.items():
    if merged[key] not in choices:
      raise ValueError(f'config.dataset.{key} must be one of {list(choices)}, got {merged[key]!r}.')
  if merged['shared_vocab'] and merged['source_vocab'] != merged['target_vocab']:
    raise ValueError(
      f'config.dataset.shared_vocab=True needs source_vocab == target_vocab, got '
      f'{merged["source_vocab"]!r} and {merged["target_vocab"]!r}.'
    )
  vocabs = {merged['source_vocab'], merged['target_vocab']}
  if merged['protect_items'] and vocabs != {'sentencepiece'}:
    raise ValueError(
      'config.dataset.protect_items=True needs sentencepiece vocabularies (each tag is one '
      f'piece), got source_vocab={merged["source_vocab"]!r}, '
      f'target_vocab={merged["target_vocab"]!r}.'
    )
  if merged['name'] == 'tsv_parallel' and not merged['tsv_path']:
    raise ValueError(
      "config.dataset.tsv_path must name a file when config.dataset.name is 'tsv_parallel'."
    )
  for field in ('validation_path', 'test_path'):
    if merged[field] and merged['name'] != 'tsv_parallel':
      raise ValueError(
        f"config.dataset.{field} is read with name='tsv_parallel' only, got name="
        f"{merged['name']!r}; leave it '' or read the corpus as tsv_parallel."
      )
  return ml_collections.FrozenConfigDict(merged)


class TranslationData(BatchSource):
  """A prepared dataset with its tokenizers: examples and padded batches of any split.

  Batches: `{'inputs': int32 [b, S], 'targets': int32 [b, T], 'index': int32 [b]}`, ids then
  EOS, PAD_ID-padded to multiples of `config.bucket_step`; without shuffling, sorted by length,
  which pads least.

  Attributes:
    name: the dataset, e.g. 'number_words/en_de'.
    config: the validated `config.dataset`.
    preprocess: the config's text preprocessing, `str -> str` (apply it to new input text).
    source_tokenizer: tokenizer of the source side.
    target_tokenizer: tokenizer of the target side; the same object when the vocab is shared.
  """

  def __init__(
    self,
    builder: tfds.core.DatasetBuilder,
    config: ml_collections.FrozenConfigDict,
    source_tokenizer: Tokenizer | None = None,
    target_tokenizer: Tokenizer | None = None,
  ):
    """Wraps a prepared builder; `build` is the usual way to get one."""
    self.config = config
    self._builder = builder
    self.name = builder.info.full_name.rsplit('/', 1)[0]
    self.preprocess = TextOptions(
      lowercase=config.lowercase,
      strip_accents=config.strip_accents,
      split_cjk=config.split_cjk,
      split_punctuation=config.split_punctuation,
    )
    self.source_tokenizer = source_tokenizer
    self.target_tokenizer = target_tokenizer
    self._raw: dict[str, list[tuple[str, str]]] = {}
    self._examples: dict[str, list[tuple[str, str]]] = {}
    self._encoded: dict[str, EncodedSplit] = {}
    features = set(builder.info.features.keys())
    for field in ('source_key', 'target_key'):
      if config[field] not in features:
        raise ValueError(
          f'config.dataset.{field}={config[field]!r} is not a feature of '
          f'{self.name}; valid: {sorted(features)}.'
        )

  def raw_examples(self, split: str) -> list[tuple[str, str]]:
    """`(source_text, target_text)` of every example of `split` as the corpus holds them (before
    `config.dataset`'s preprocessing), in split order: what outputs are scored against.

    Args:
      split: a split name ('train', 'validation', 'test'; TFDS slices such as 'train[:10%]' work).

    Returns:
      The examples (read once, then cached).
    """
    if split not in self._raw:
      records = read_split(self._builder, split, self.name)
      keys = self.config.source_key, self.config.target_key
      self._raw[split] = [(as_text(ex[keys[0]]), as_text(ex[keys[1]])) for ex in records]
      logging.info('%s %s: %d examples.', self.name, split, len(self._raw[split]))
    return self._raw[split]

  def examples(self, split: str) -> list[tuple[str, str]]:
    """`raw_examples(split)` preprocessed as `config.dataset` says (lower-casing, accents,
    punctuation, then protected items): the text the tokenizers see."""
    if split not in self._examples:
      preprocess = self.preprocess
      pairs = [(preprocess(s), preprocess(t)) for s, t in self.raw_examples(split)]
      if self.config.protect_items:
        pairs = [protect_pair(s, t) for s, t in pairs]
      self._examples[split] = pairs
    return self._examples[split]

  def output_text(self, decoded: str, source: str) -> str:
    """A decoded output as text: with `protect_items`, its tags replaced by the items of its raw
    `source` (read as the model saw it), else unchanged."""
    if not self.config.protect_items:
      return decoded
    return restore(decoded, source_items(self.preprocess(source)))

  def token_labels(self, tokens: list[str], source: str) -> list[str]:
    """Tokens as pictures and the explorer label them: with `protect_items`, each tag with the
    item of the raw `source` it stands for (`⟪0:%s⟫`), else unchanged."""
    if not self.config.protect_items:
      return tokens
    items = source_items(self.preprocess(source))
    return [label_tags(token, items) for token in tokens]

  def source_ids(self, text: str) -> list[int]:
    """The ids a new source `text` is read as, the same as a split's example of that text:
    preprocessed, its items protected, tokenized, cut to `max_input_length` with `truncate`,
    then EOS.

    Raises:
      ValueError: if `text` is longer than `max_input_length` without `truncate`.
    """
    source = self.preprocess(text)
    if self.config.protect_items:
      source = protect(source, source_items(source))
    ids = list(self.source_tokenizer.encode(source))
    limit = self.config.max_input_length
    if len(ids) > limit and not self.config.truncate:
      raise ValueError(
        f'The text is {len(ids)} source tokens, more than config.dataset.max_input_length='
        f'{limit} that the model was trained on; shorten it.'
      )
    return ids[:limit] + [EOS_ID]

  def encoded(self, split: str) -> EncodedSplit:
    """Token ids of the examples of `split` that fit the length limits (tokenized once)."""
    if split not in self._encoded:
      pairs = self.examples(split)
      self._encoded[split] = encode_split(
        f'{self.name} {split}',
        [self.source_tokenizer.encode(source) for source, _ in pairs],
        [self.target_tokenizer.encode(target) for _, target in pairs],
        max_input_length=self.config.max_input_length,
        max_target_length=self.config.max_target_length,
        truncate=self.config.truncate,
      )
    return self._encoded[split]

  def _batches(self, split: str, plan: BatchPlan) -> PaddedBatches:
    return PaddedBatches(
      self.encoded(split), bucket_step=self.config.bucket_step, **plan.iterator_args()
    )


def _check_saved(
  config: ml_collections.FrozenConfigDict, source: Tokenizer, target: Tokenizer, vocab_dir: str
) -> None:
  saved = {
    'source_vocab': source.kind,
    'target_vocab': target.kind,
    'shared_vocab': source is target,
  }
  if config.protect_items:  # built with the tags as pieces of their own
    saved['protect_items'] = all(
      side.tokens(side.encode(TAGS[-1]))[-1] == TAGS[-1] for side in (source, target)
    )
  for field, value in saved.items():
    if config[field] != value:
      raise ValueError(
        f'config.dataset.{field}={config[field]!r} but the tokenizers saved in '
        f'{vocab_dir} have {field}={value!r}; use that or another directory.'
      )


def build(dataset_config: Any, vocab_dir: str) -> TranslationData:
  """Prepares the dataset and its tokenizers.

  The dataset is prepared into `dataset_config.data_dir` if it is not there yet. Tokenizers are
  loaded from `vocab_dir` when it holds saved ones (so eval and resumed runs use exactly the
  training vocabulary); otherwise they are built from the train split and saved there.

  Args:
    dataset_config: `config.dataset`, see `default_config()`; missing fields take defaults.
    vocab_dir: directory for the tokenizer files (usually the workdir).

  Returns:
    The prepared data.

  Raises:
    ValueError: for a bad config field, naming it and the valid values.
    FileNotFoundError: if `tsv_path` names no file.
  """
  config = validate_config(dataset_config)
  builder = translation_builder(config)
  builder.download_and_prepare()
  prepared = TranslationData(builder, config)
  loaded = load_tokenizers(vocab_dir)
  if loaded:
    _check_saved(config, *loaded, vocab_dir)
    prepared.source_tokenizer, prepared.target_tokenizer = loaded
    logging.info('Loaded tokenizers from %s.', vocab_dir)
    return prepared
  pairs = prepared.examples(config.train_split)
  tokenizer = functools.partial(
    build_tokenizer, vocab_size=config.vocab_size, symbols=TAGS if config.protect_items else ()
  )
  sources = [source for source, _ in pairs]
  targets = [target for _, target in pairs]
  if config.shared_vocab:
    prepared.source_tokenizer = prepared.target_tokenizer = tokenizer(
      config.source_vocab, sources + targets
    )
  else:
    prepared.source_tokenizer = tokenizer(config.source_vocab, sources)
    prepared.target_tokenizer = tokenizer(config.target_vocab, targets)
  save_tokenizers(
    vocab_dir, prepared.source_tokenizer, prepared.target_tokenizer, dataset=prepared.name
  )
  logging.info(
    'Built tokenizers from %s %s (sizes %d, %d) and saved them in %s.',
    prepared.name,
    config.train_split,
    prepared.source_tokenizer.vocab_size,
    prepared.target_tokenizer.vocab_size,
    vocab_dir,
  )
  return prepared
