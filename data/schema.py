"""The checks every task's `config.dataset` schema shares (`checked_fields`).

Each task's data module (e.g. `data.translation`) holds its own schema, `default_config()` and
`validate_config()`, and checks its fields here first.
"""

from typing import Any

import ml_collections


def _type_name(value: Any) -> str:
  return type(value).__name__


def checked_fields(
  config: Any,
  defaults: ml_collections.ConfigDict,
  *,
  positive: tuple[str, ...],
  non_empty: tuple[str, ...],
) -> dict[str, Any]:
  """`config` merged over `defaults` after the checks every dataset schema shares.

  Raises:
    ValueError: naming the first unknown field, a value of the wrong type, a size below 1, an
      empty name, or a vocabulary too small for the 4 special tokens.
  """
  values = dict(config.items()) if hasattr(config, 'items') else None
  if values is None:
    raise ValueError(f'config.dataset must be a ConfigDict or dict, got {_type_name(config)}.')
  unknown = sorted(set(values) - set(defaults))
  if unknown:
    raise ValueError(
      f'config.dataset has unknown field(s) {unknown}; valid fields: {sorted(defaults)}.'
    )
  merged = defaults.to_dict()
  for key, value in values.items():
    expected = type(merged[key])
    if expected is tuple and isinstance(value, list):  # config.json stores tuples as lists
      value = tuple(value)
    if type(value) is not expected:  # noqa: E721  (bool must not pass as int, nor int as bool)
      raise ValueError(
        f'config.dataset.{key} must be of type {expected.__name__}, got '
        f'{value!r} ({_type_name(value)}).'
      )
    merged[key] = value
  for key in positive:
    if merged[key] < 1:
      raise ValueError(f'config.dataset.{key} must be at least 1, got {merged[key]}.')
  for key in non_empty:
    if not merged[key]:
      raise ValueError(f'config.dataset.{key} must not be empty.')
  if 'vocab_size' in merged and merged['vocab_size'] <= 4:  # Image data has no vocabulary.
    raise ValueError(
      f'config.dataset.vocab_size must exceed the 4 special tokens, got {merged["vocab_size"]}.'
    )
  return merged
