"""The words of the comparison's tables and figures: a metric or field in words, a config
value as written, and the legend that tells lines apart by what differs among them
('positions=alibi'). One mapping each, read by reports/compare.py and compare_against.py.
"""

import json
import re

MISSING = object()  # A config field that one run has and another lacks.


def format_value(value) -> str:
  """A config value as written in config.json ('dot', 16, true, [1, 2]); '—' when absent."""
  if value is MISSING:
    return '—'
  return value if isinstance(value, str) else json.dumps(value)


# A metric's name in words, the one mapping the figures' titles, axes and ticks read; a metric not
# here is written with its underscores as spaces ('sequence_accuracy': 'sequence accuracy').
METRIC_WORDS = {
  'bits_per_char': 'bits per character',
  'bits_per_token': 'bits per token',
  'exact_match': 'exact match',
  'teacher_forced_exact_match': 'teacher-forced exact match',
  'token_accuracy': 'token accuracy',
  'attention_entropy': 'attention entropy (nats)',
  'attention_hit_rate': 'attention hit rate',
  'bleu': 'BLEU',
  'grad_norm': 'gradient norm',
}
# A field along a figure's x axis in words, by its short name (`short_names`); others are written
# with their underscores as spaces.
FIELD_WORDS = {
  'builder_config': 'dataset configuration',
  'd_k': 'key dimension d_k',
  'num_kv_heads': 'key/value heads',
  'warmup_steps': 'warm-up steps',
  'positions': 'positional encoding',
}
EVAL_LENGTH = 'evaluation length (tokens)'  # what the N of 'bits_per_char@N' is


def metric_words(metric: str) -> str:
  """'bits_per_char' -> 'bits per character'; 'loss@128' -> 'loss at 128 tokens'; 'accuracy@init'
  -> 'accuracy at initialisation'; 'attention_hit_rate/head0' -> 'attention hit rate (head0)'."""
  name, at, suffix = metric.partition('@')
  if at:
    where = (
      'initialisation' if suffix == 'init' else f'{suffix} tokens' if suffix.isdigit() else suffix
    )
    return f'{metric_words(name)} at {where}'
  name, slash, part = metric.partition('/')
  if slash:
    return f'{metric_words(name)} ({part})'
  return METRIC_WORDS.get(name, name.replace('_', ' '))


def short_names(fields: list[str], keys) -> dict[str, str]:
  """Field -> its shortest dotted suffix that no other of the config `keys` ends with.

  'model.positions' -> 'positions'; 'model.name' stays whole where 'dataset.name' is a key too.
  """
  names = {}
  for field in fields:
    parts = field.split('.')
    for start in range(len(parts) - 1, -1, -1):
      suffix = '.'.join(parts[start:])
      others = (key for key in keys if key != field)
      if not any(key == suffix or key.endswith('.' + suffix) for key in others):
        break
    names[field] = suffix
  return names


def field_words(field: str, keys=()) -> str:
  """A field along an axis in words: 'model.num_kv_heads' -> 'key/value heads'."""
  name = short_names([field], keys)[field]
  return FIELD_WORDS.get(name, name.replace('_', ' '))


def determines(values: list[dict], given: list[str], fields: list[str]) -> bool:
  """Whether the values of `given` fix those of `fields` across `values` (one dict per setting or
  line: field -> value)."""
  seen = {}
  for value in values:
    key = json.dumps([value[f] for f in given], default=repr)
    fixed = json.dumps([value[f] for f in fields], default=repr)
    if seen.setdefault(key, fixed) != fixed:
      return False
  return True


def legend(values: list[dict], keys) -> tuple[list[str], list[str]]:
  """(short names of the fields that tell the lines apart, each line's label).

  `values` holds one dict per line drawn (field -> value). A line is labelled by the fields whose
  values differ among the lines, written 'name=value' with `short_names` (among the config
  `keys`): 'positions=alibi'. A field whose value follows from another labelling field's, which
  its own value does not fix in turn, is left out: a setting that comes with another, as the
  learned position table's `dataset.eval_lengths=[64]` comes with `model.positions=learned`.
  Fields that fix each other (a pair count and the sequence length it sets) are all kept. No
  field differs: the labels are ''.
  """
  fields = [
    field
    for field in (values[0] if values else {})
    if len({json.dumps(value[field], default=repr) for value in values}) > 1
  ]
  dropped = True
  while dropped:
    dropped = False
    for field in fields:
      if any(
        determines(values, [other], [field]) and not determines(values, [field], [other])
        for other in fields
        if other != field
      ):
        fields.remove(field)
        dropped = True
        break
  names = short_names(fields, keys)
  labels = [', '.join(f'{names[f]}={format_value(value[f])}' for f in fields) for value in values]
  return [names[f] for f in fields], labels


def and_list(names: list[str]) -> str:
  """['a'] -> 'a'; ['a', 'b', 'c'] -> 'a, b and c'."""
  return ' and '.join([', '.join(names[:-1]), names[-1]] if len(names) > 1 else names)


def natural_key(value) -> tuple:
  """Numbers numerically, then strings with their digit runs as numbers, then anything else."""
  if isinstance(value, (int, float)):
    return (0, value)
  if isinstance(value, str):
    return (
      1,
      tuple(int(part) if i % 2 else part for i, part in enumerate(re.split(r'(\d+)', value))),
    )
  return (2, format_value(value))
