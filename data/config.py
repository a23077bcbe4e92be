"""The `config.dataset` schema: every field, its default, and its validation."""

from typing import Any

import ml_collections

from data.tokenizers import VOCAB_KINDS


def default_config() -> ml_collections.ConfigDict:
  """Returns `config.dataset` with every field at its default (the number_words en->de task)."""
  c = ml_collections.ConfigDict()
  # Which data.
  c.name = "number_words"       # 'number_words', 'dates', 'tsv_parallel' or any TFDS dataset name.
  c.builder_config = "en_de"    # TFDS builder config, e.g. 'pt_to_en' for ted; '' = the default.
  c.source_key = "source"       # Feature holding the source text ('pt' for ted pt_to_en).
  c.target_key = "target"       # Feature holding the target text ('en' for ted pt_to_en).
  c.data_dir = ""               # TFDS data dir to prepare datasets in; '' = ~/tensorflow_datasets.
  c.tsv_path = ""               # tsv_parallel: file of 'english<TAB>other[<TAB>...]' lines.
  # Preprocessing, applied to both sides of every example before tokenization.
  c.lowercase = False           # Lower-case the text.
  c.strip_accents = False       # Drop accents from Latin letters ('café' -> 'cafe').
  c.split_punctuation = False   # Put spaces around punctuation ('boy.' -> 'boy .').
  c.split_cjk = False           # Put spaces around each CJK character (Chinese, Japanese).
  # Tokenizers, built from the train split and saved into the workdir.
  c.source_vocab = "char"       # 'char' | 'word' | 'sentencepiece'.
  c.target_vocab = "char"       # 'char' | 'word' | 'sentencepiece'.
  c.vocab_size = 8000           # Cap (specials included) for word and sentencepiece vocabularies.
  c.shared_vocab = False        # One vocabulary for both sides (needs equal source/target_vocab).
  # Lengths and batches.
  c.max_input_length = 79       # Source tokens per example, EOS excluded (79 + EOS = 80).
  c.max_target_length = 79      # Target tokens per example, EOS excluded.
  c.truncate = False            # Truncate longer examples instead of dropping them.
  c.bucket_step = 8             # Padded lengths are multiples of this, so jit sees few shapes.
  c.batch_size = 64             # Global training batch size (split evenly across hosts).
  c.eval_batch_size = 256       # Global evaluation batch size.
  c.train_split = "train"       # Split for training and for building the vocabularies.
  c.eval_split = "validation"   # Split evaluated during training.
  c.test_split = "test"         # Split for the final evaluation.
  return c


_CHOICES = {"source_vocab": VOCAB_KINDS, "target_vocab": VOCAB_KINDS}
_POSITIVE = ("max_input_length", "max_target_length", "bucket_step", "batch_size",
             "eval_batch_size")
_NON_EMPTY = ("name", "source_key", "target_key", "train_split", "eval_split", "test_split")


def _type_name(value: Any) -> str:
  return type(value).__name__


def checked_fields(config: Any, defaults: ml_collections.ConfigDict, *,
                   positive: tuple[str, ...], non_empty: tuple[str, ...]) -> dict[str, Any]:
  """`config` merged over `defaults` after the checks every dataset schema shares.

  Raises:
    ValueError: naming the first unknown field, a value of the wrong type, a size below 1, an
      empty name, or a vocabulary too small for the 4 special tokens.
  """
  values = dict(config.items()) if hasattr(config, "items") else None
  if values is None:
    raise ValueError(f"config.dataset must be a ConfigDict or dict, got {_type_name(config)}.")
  unknown = sorted(set(values) - set(defaults))
  if unknown:
    raise ValueError(f"config.dataset has unknown field(s) {unknown}; valid fields: "
                     f"{sorted(defaults)}.")
  merged = defaults.to_dict()
  for key, value in values.items():
    expected = type(merged[key])
    if expected is tuple and isinstance(value, list):  # config.json stores tuples as lists
      value = tuple(value)
    if type(value) is not expected:  # noqa: E721  (bool must not pass as int, nor int as bool)
      raise ValueError(f"config.dataset.{key} must be of type {expected.__name__}, got "
                       f"{value!r} ({_type_name(value)}).")
    merged[key] = value
  for key in positive:
    if merged[key] < 1:
      raise ValueError(f"config.dataset.{key} must be at least 1, got {merged[key]}.")
  for key in non_empty:
    if not merged[key]:
      raise ValueError(f"config.dataset.{key} must not be empty.")
  if "vocab_size" in merged and merged["vocab_size"] <= 4:  # Image data has no vocabulary.
    raise ValueError(f"config.dataset.vocab_size must exceed the 4 special tokens, got "
                     f"{merged['vocab_size']}.")
  return merged


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
      raise ValueError(f"config.dataset.{key} must be one of {list(choices)}, got {merged[key]!r}.")
  if merged["shared_vocab"] and merged["source_vocab"] != merged["target_vocab"]:
    raise ValueError(f"config.dataset.shared_vocab=True needs source_vocab == target_vocab, got "
                     f"{merged['source_vocab']!r} and {merged['target_vocab']!r}.")
  if merged["name"] == "tsv_parallel" and not merged["tsv_path"]:
    raise ValueError("config.dataset.tsv_path must name a file when config.dataset.name is "
                     "'tsv_parallel'.")
  return ml_collections.FrozenConfigDict(merged)
