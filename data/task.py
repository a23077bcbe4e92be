"""`build_task`: from `config.dataset` to examples, tokenizers and batches.

    task = data.build_task(config.dataset, workdir)
    train_iter = task.batches('train', batch_size=64, shuffle=True, seed=0)
    batch = next(train_iter)        # {'inputs': [B, S], 'targets': [B, T], 'index': [B]}

The dataset is read through `tfds` data sources (array_record files, no TensorFlow): Attend's
own builders (`number_words`, `dates`, `tsv_parallel`) are prepared offline on first use; any
other registered TFDS dataset is prepared by TFDS as usual (which may need the internet).
"""

import functools
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from absl import logging
import ml_collections
import tensorflow_datasets as tfds

from data import tsv_parallel
from data.config import validate_config
from data.dates import Dates
from data.number_words import NumberWords
from data.pipeline import BatchIterator, EncodedSplit, check_batch_args, encode_split
from data.text import TextOptions
from data.tokenizers import Tokenizer, build_tokenizer, load_tokenizers, save_tokenizers

OWN_BUILDERS = {"dates": Dates, "number_words": NumberWords,
                "tsv_parallel": tsv_parallel.TsvParallel}
_READ_CHUNK = 4096


def as_text(value: Any) -> str:
  """A text feature as str: the real data sources give bytes, `tfds.testing.mock_data` str."""
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def read_all(source: Any) -> list[dict[str, Any]]:
  """Every record of a TFDS data source, in order, read in chunks (4x faster than one by one)."""
  n = len(source)
  try:
    return [example for start in range(0, n, _READ_CHUNK)
            for example in source.__getitems__(list(range(start, min(n, start + _READ_CHUNK))))]
  except TypeError:  # The data sources of tfds.testing.mock_data only support indexing.
    return [source[i] for i in range(n)]


def read_split(builder: tfds.core.DatasetBuilder, split: str, name: str) -> list[dict[str, Any]]:
  """Every record of `split` of a prepared builder, in order (`read_all`), after checking it.

  Args:
    builder: the prepared builder.
    split: a split name, or a TFDS slice such as 'train[:10%]'.
    name: the dataset, as the error names it.

  Raises:
    ValueError: if the builder has no such split. Builders mocked by `tfds.testing.mock_data`
      know no split names; they accept any.
  """
  known = list(builder.info.splits.keys())
  if known and split.split("[")[0] not in known:
    raise ValueError(f"Split {split!r} is not a split of {name}; valid: {sorted(known)}.")
  return read_all(builder.as_data_source(split=split))


def make_builder(config: ml_collections.FrozenConfigDict,
                 own_builders: Mapping[str, type[tfds.core.DatasetBuilder]], *, kind: str,
                 examples: Iterable[str] | Callable[[], Iterable[str]],
                 extra_names: Iterable[str] = (),
                 builder_config: tfds.core.BuilderConfig | None = None
                 ) -> tfds.core.DatasetBuilder:
  """The builder `config.dataset` names, reading array_record files, its builder config checked.

  Shared by translation, classification and language modelling, whose datasets differ only in
  Attend's own builders and in what the error for an unknown name suggests.

  Args:
    config: a validated `config.dataset`; its name, builder_config and data_dir are read.
    own_builders: Attend's builders of this kind of data, by name; any other name is looked up
      in TFDS's registry.
    kind: the kind of TFDS dataset the error for an unknown name suggests, e.g. 'text'.
    examples: TFDS datasets that error names, or a function giving them (called only then, for
      a list that costs something to make).
    extra_names: names the caller serves without a builder, listed as valid in that error.
    builder_config: the builder config to use instead of `config.builder_config` (which is then
      not checked): for builders whose config is made from a file.

  Returns:
    The builder, not yet prepared.

  Raises:
    ValueError: for an unknown dataset name or a builder config the dataset does not have.
  """
  if config.name in own_builders:
    cls = own_builders[config.name]
  else:
    try:
      cls = tfds.builder_cls(config.name)
    except tfds.core.registered.DatasetNotFoundError:
      named = sorted(examples() if callable(examples) else examples)
      raise ValueError(f"config.dataset.name={config.name!r} is not a known dataset; valid: "
                       f"{sorted([*own_builders, *extra_names])} or a registered TFDS {kind} "
                       f"dataset, e.g. {named}.") from None
  kwargs = {"data_dir": os.path.expanduser(config.data_dir) if config.data_dir else None,
            "file_format": "array_record"}
  if builder_config is not None:
    return cls(config=builder_config, **kwargs)
  valid = sorted(cls.builder_configs)
  if config.builder_config and config.builder_config not in valid:
    raise ValueError(f"config.dataset.builder_config={config.builder_config!r} is not a config "
                     f"of {config.name}; valid: {valid or 'none (use an empty string)'}.")
  return cls(config=config.builder_config or None, **kwargs)


def _translation_builder(config: ml_collections.FrozenConfigDict) -> tfds.core.DatasetBuilder:
  """`make_builder` for a translation dataset; an unknown name lists TFDS's translation sets."""
  if config.name not in OWN_BUILDERS:
    # The legacy translation builders (wmt14_translate, ...) register only when imported.
    import tensorflow_datasets.translate  # noqa: F401  pylint: disable=g-import-not-at-top
  file_config = (tsv_parallel.config_for_path(config.tsv_path)  # Its config is the file's.
                 if config.name == "tsv_parallel" else None)
  return make_builder(
      config, OWN_BUILDERS, kind="translation", builder_config=file_config,
      examples=lambda: (n for n in tfds.list_builders(with_community_datasets=False)
                        if "translate" in n))


class Task:
  """A prepared dataset with its tokenizers: examples and padded batches of any split.

  Attributes:
    name: the dataset, e.g. 'number_words/en_de'.
    config: the validated `config.dataset`.
    preprocess: the config's text preprocessing, `str -> str` (apply it to new input text).
    source_tokenizer: tokenizer of the source side.
    target_tokenizer: tokenizer of the target side; the same object when the vocab is shared.
  """

  def __init__(self, builder: tfds.core.DatasetBuilder, config: ml_collections.FrozenConfigDict,
               source_tokenizer: Tokenizer | None = None,
               target_tokenizer: Tokenizer | None = None):
    """Wraps a prepared builder; `build_task` is the usual way to get one."""
    self.config = config
    self._builder = builder
    self.name = builder.info.full_name.rsplit("/", 1)[0]
    self.preprocess = TextOptions(
        lowercase=config.lowercase, strip_accents=config.strip_accents,
        split_cjk=config.split_cjk, split_punctuation=config.split_punctuation)
    self.source_tokenizer = source_tokenizer
    self.target_tokenizer = target_tokenizer
    self._examples: dict[str, list[tuple[str, str]]] = {}
    self._encoded: dict[str, EncodedSplit] = {}
    features = set(builder.info.features.keys())
    for field in ("source_key", "target_key"):
      if config[field] not in features:
        raise ValueError(f"config.dataset.{field}={config[field]!r} is not a feature of "
                         f"{self.name}; valid: {sorted(features)}.")

  def examples(self, split: str) -> list[tuple[str, str]]:
    """`(source_text, target_text)` of every example of `split`, preprocessed, in split order.

    Args:
      split: a split name ('train', 'validation', 'test'; TFDS slices such as 'train[:10%]' work).

    Returns:
      The examples (read once, then cached).
    """
    if split not in self._examples:
      records = read_split(self._builder, split, self.name)
      keys = self.config.source_key, self.config.target_key
      preprocess = self.preprocess
      self._examples[split] = [
          (preprocess(as_text(ex[keys[0]])), preprocess(as_text(ex[keys[1]]))) for ex in records]
      logging.info("%s %s: %d examples.", self.name, split, len(self._examples[split]))
    return self._examples[split]

  def encoded(self, split: str) -> EncodedSplit:
    """Token ids of the examples of `split` that fit the length limits (tokenized once)."""
    if split not in self._encoded:
      pairs = self.examples(split)
      self._encoded[split] = encode_split(
          f"{self.name} {split}",
          [self.source_tokenizer.encode(source) for source, _ in pairs],
          [self.target_tokenizer.encode(target) for _, target in pairs],
          max_input_length=self.config.max_input_length,
          max_target_length=self.config.max_target_length, truncate=self.config.truncate)
    return self._encoded[split]

  def batches(self, split: str, *, batch_size: int, shuffle: bool, seed: int,
              num_epochs: int | None = None, process_index: int | None = None,
              process_count: int | None = None) -> BatchIterator:
    """A resumable iterator of this host's padded batches of `split`.

    Args:
      split: the split to read.
      batch_size: the global batch size; each host gets `batch_size // process_count` rows.
      shuffle: reshuffle every epoch (with `seed + epoch`); False gives a fixed order sorted by
        length, which pads least (map rows back to examples with 'index').
      seed: the shuffling seed.
      num_epochs: epochs before StopIteration; None repeats forever.
      process_index: this host's index; default `jax.process_index()`.
      process_count: number of hosts; default `jax.process_count()`.

    Returns:
      An iterator of `{'inputs': int32 [b, S], 'targets': int32 [b, T], 'index': int32 [b]}`
      with `b = batch_size // process_count`: ids then EOS, PAD_ID-padded to multiples of
      `config.bucket_step`; 'index' is the row's position in `examples(split)`, -1 for padding
      rows. `get_state()` / `set_state()` save and restore its position.

    Raises:
      ValueError: for a bad batch size, epoch count or host index.
    """
    process_index, process_count = check_batch_args(batch_size, num_epochs, process_index,
                                                    process_count)
    return BatchIterator(self.encoded(split), batch_size=batch_size, shuffle=shuffle, seed=seed,
                         num_epochs=num_epochs, process_index=process_index,
                         process_count=process_count, bucket_step=self.config.bucket_step)


def _check_saved(config: ml_collections.FrozenConfigDict, source: Tokenizer, target: Tokenizer,
                 vocab_dir: str) -> None:
  saved = {"source_vocab": source.kind, "target_vocab": target.kind,
           "shared_vocab": source is target}
  for field, value in saved.items():
    if config[field] != value:
      raise ValueError(f"config.dataset.{field}={config[field]!r} but the tokenizers saved in "
                       f"{vocab_dir} have {field}={value!r}; use that or another directory.")


def build_task(dataset_config: Any, vocab_dir: str) -> Task:
  """Prepares the dataset and its tokenizers.

  The dataset is prepared into `dataset_config.data_dir` if it is not there yet. Tokenizers are
  loaded from `vocab_dir` when it holds saved ones (so eval and resumed runs use exactly the
  training vocabulary); otherwise they are built from the train split and saved there.

  Args:
    dataset_config: `config.dataset`, see `data.default_config()`; missing fields take defaults.
    vocab_dir: directory for the tokenizer files (usually the workdir).

  Returns:
    The task.

  Raises:
    ValueError: for a bad config field, naming it and the valid values.
    FileNotFoundError: if `tsv_path` names no file.
  """
  config = validate_config(dataset_config)
  builder = _translation_builder(config)
  builder.download_and_prepare()
  task = Task(builder, config)
  loaded = load_tokenizers(vocab_dir)
  if loaded:
    _check_saved(config, *loaded, vocab_dir)
    task.source_tokenizer, task.target_tokenizer = loaded
    logging.info("Loaded tokenizers from %s.", vocab_dir)
    return task
  pairs = task.examples(config.train_split)
  build = functools.partial(build_tokenizer, vocab_size=config.vocab_size)
  sources = [source for source, _ in pairs]
  targets = [target for _, target in pairs]
  if config.shared_vocab:
    task.source_tokenizer = task.target_tokenizer = build(config.source_vocab, sources + targets)
  else:
    task.source_tokenizer = build(config.source_vocab, sources)
    task.target_tokenizer = build(config.target_vocab, targets)
  save_tokenizers(vocab_dir, task.source_tokenizer, task.target_tokenizer, dataset=task.name)
  logging.info("Built tokenizers from %s %s (sizes %d, %d) and saved them in %s.", task.name,
               config.train_split, task.source_tokenizer.vocab_size,
               task.target_tokenizer.vocab_size, vocab_dir)
  return task

