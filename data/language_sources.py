"""Where language-model texts come from: TFDS datasets (whose examples may mark the positions
that carry the loss and the evidence for each), and a local UTF-8 file with a held-out tail.

Readers return `Example`s; `data.language` tokenizes them into rows.
"""

from collections.abc import Mapping
import os
from typing import TYPE_CHECKING, Any, NamedTuple

from etils import epath
import ml_collections

from data.tfds_reading import as_text, read_split

if TYPE_CHECKING:  # TFDS loads only for a dataset it reads (data.tfds_reading says why)
  import tensorflow_datasets as tfds

TEXT_FILE = 'text_file'


class Example(NamedTuple):
  """A text as stored; the token positions whose prediction carries the loss (empty = every
  token); per answer, the token position that holds its evidence (empty = none)."""

  text: str
  answers: tuple[int, ...] = ()
  support: tuple[int, ...] = ()


def read_tfds(
  builder: 'tfds.core.DatasetBuilder', text_key: str, answers_key: str, support_key: str, split: str
) -> list[Example]:
  """Every example of a TFDS `split`, with the positions of the answers and support features
  ('' = the dataset has none)."""

  def positions(record, key):
    return tuple(int(p) for p in record[key]) if key else ()

  return [
    Example(as_text(r[text_key]), positions(r, answers_key), positions(r, support_key))
    for r in read_split(builder, split, builder.name)
  ]


def feature_keys(
  config: ml_collections.FrozenConfigDict,
  features: Mapping[str, Any],
  name: str,
  defaults: Mapping[str, Any],
) -> tuple[str, str]:
  """Checks the configured features exist; returns the answers and support features ('' = none).

  A feature left at its default name (`defaults`, the schema's) may be absent (most datasets
  mark no answers). Answers are read only for packing 'example', support only with answers (it
  holds one position each).
  """
  if config.text_key not in features:
    raise ValueError(
      f'config.dataset.text_key={config.text_key!r} is not a feature of {name}; '
      f'valid: {sorted(features)}.'
    )
  keys = {}
  for field in ('answers_key', 'support_key'):
    key = config[field]
    if key and key not in features and key != defaults[field]:
      raise ValueError(
        f'config.dataset.{field}={key!r} is not a feature of {name}; valid: '
        f"{sorted(features)} or '' (none)."
      )
    keys[field] = key if key in features else ''
  if config.packing == 'stream':  # Windows cut across examples: every target is weighted.
    return '', ''
  if keys['answers_key'] and config.vocab != 'word':
    raise ValueError(
      f'config.dataset.answers_key={keys["answers_key"]!r} holds word positions, '
      f"so it needs config.dataset.vocab='word', got {config.vocab!r}; or set "
      "answers_key='' to weight every token."
    )
  return keys['answers_key'], (keys['support_key'] if keys['answers_key'] else '')


def split_text_file(config: ml_collections.FrozenConfigDict) -> dict[str, str]:
  """The text file cut at characters: train, then validation and test, `held_out` each."""
  path = epath.Path(os.path.expanduser(config.text_path))
  if not path.exists():
    raise FileNotFoundError(f'config.dataset.text_path={config.text_path!r} names no file.')
  try:
    text = path.read_text(encoding='utf-8')
  except UnicodeDecodeError as error:
    raise ValueError(
      f'config.dataset.text_path={config.text_path!r} is not UTF-8 text (byte '
      f'{error.start} cannot be decoded); give a text file.'
    ) from None
  if not text.strip():
    raise ValueError(f'config.dataset.text_path={config.text_path!r} is an empty file.')
  end, held = len(text), int(len(text) * config.held_out)
  return {
    'train': text[: end - 2 * held],
    'validation': text[end - 2 * held : end - held],
    'test': text[end - held :],
  }


def read_text_file(texts: dict[str, str], split: str) -> list[Example]:
  """The one example of `split` of a text cut by `split_text_file`."""
  if split not in texts:
    raise ValueError(f'Split {split!r} is not a split of {TEXT_FILE}; valid: {sorted(texts)}.')
  return [Example(texts[split])]
