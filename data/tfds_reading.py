"""Reading TFDS datasets the way every task's data does: array_record data sources, no TensorFlow.

`make_builder` turns `config.dataset` into a builder (Attend's own builders by name, else TFDS's
registry), checking its builder config; `read_split` reads a prepared split whole, in order.
"""

from collections.abc import Callable, Iterable, Mapping
import os
from typing import TYPE_CHECKING, Any

import ml_collections

# TFDS is imported where a builder is made, not here: the language models' data imports this
# module, and a text file or a converted checkpoint's workdir (prompt.py, generate.py) never
# reads a TFDS dataset (its import is about a second of CPU).
if TYPE_CHECKING:
  import tensorflow_datasets as tfds

_READ_CHUNK = 4096


def as_text(value: Any) -> str:
  """A text feature as str: the real data sources give bytes, `tfds.testing.mock_data` str."""
  return value.decode('utf-8') if isinstance(value, bytes) else str(value)


def read_all(source: Any) -> list[dict[str, Any]]:
  """Every record of a TFDS data source, in order, read in chunks (4x faster than one by one)."""
  n = len(source)
  try:
    return [
      example
      for start in range(0, n, _READ_CHUNK)
      for example in source.__getitems__(list(range(start, min(n, start + _READ_CHUNK))))
    ]
  except TypeError:  # The data sources of tfds.testing.mock_data only support indexing.
    return [source[i] for i in range(n)]


def read_split(builder: 'tfds.core.DatasetBuilder', split: str, name: str) -> list[dict[str, Any]]:
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
  if known and split.split('[')[0] not in known:
    raise ValueError(f'Split {split!r} is not a split of {name}; valid: {sorted(known)}.')
  return read_all(builder.as_data_source(split=split))


def make_builder(
  config: ml_collections.FrozenConfigDict,
  own_builders: Mapping[str, type['tfds.core.DatasetBuilder']],
  *,
  kind: str,
  examples: Iterable[str] | Callable[[], Iterable[str]],
  extra_names: Iterable[str] = (),
  builder_config: 'tfds.core.BuilderConfig | None' = None,
) -> 'tfds.core.DatasetBuilder':
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
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top,redefined-outer-name

  if config.name in own_builders:
    cls = own_builders[config.name]
  else:
    try:
      cls = tfds.builder_cls(config.name)
    except tfds.core.registered.DatasetNotFoundError:
      named = sorted(examples() if callable(examples) else examples)
      raise ValueError(
        f'config.dataset.name={config.name!r} is not a known dataset; valid: '
        f'{sorted([*own_builders, *extra_names])} or a registered TFDS {kind} '
        f'dataset, e.g. {named}.'
      ) from None
  kwargs = {
    'data_dir': os.path.expanduser(config.data_dir) if config.data_dir else None,
    'file_format': 'array_record',
  }
  if builder_config is not None:
    return cls(config=builder_config, **kwargs)
  valid = sorted(cls.builder_configs)
  if config.builder_config and config.builder_config not in valid:
    raise ValueError(
      f'config.dataset.builder_config={config.builder_config!r} is not a config '
      f'of {config.name}; valid: {valid or "none (use an empty string)"}.'
    )
  return cls(config=config.builder_config or None, **kwargs)
