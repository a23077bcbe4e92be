"""A config as config.json holds it (nested dicts), by dotted field names ('model.score').

Apart from training/config.py, which imports the models and tasks: reading a finished run's
config.json (workdir.py's config history, compare.py's settings) needs none of them.
"""


def flatten(config: dict, prefix: str = '') -> dict:
  """{'model': {'score': 'dot'}} -> {'model.score': 'dot'}."""
  flat = {}
  for key, value in config.items():
    if isinstance(value, dict):
      flat.update(flatten(value, f'{prefix}{key}.'))
    else:
      flat[f'{prefix}{key}'] = value
  return flat
