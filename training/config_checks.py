"""Checks of the training fields of a config, run before any data or compilation."""

import jax

from training.optim import SCHEDULES

DTYPES = ('float32', 'bfloat16')


def validate_config(config) -> None:
  """Raises ValueError naming the first bad training field of `config` and what it may be."""
  positive = ('num_train_steps', 'log_every_steps', 'checkpoint_every_steps', 'keep_checkpoints')
  for field in positive:
    if not isinstance(config[field], int) or config[field] <= 0:
      raise ValueError(f'config.{field}={config[field]!r} must be a positive integer.')
  for field in ('eval_every_steps', 'warmup_steps', 'max_decode_length', 'num_eval_decode'):
    if not isinstance(config[field], int) or config[field] < 0:
      raise ValueError(f'config.{field}={config[field]!r} must be an integer >= 0.')
  if config.schedule not in SCHEDULES:
    raise ValueError(f'config.schedule={config.schedule!r} is not one of {SCHEDULES}.')
  if config.dtype not in DTYPES:
    raise ValueError(f'config.dtype={config.dtype!r} is not one of {DTYPES}.')
  if not config.learning_rate > 0:
    raise ValueError(f'config.learning_rate={config.learning_rate!r} must be > 0.')
  if not 0 <= config.label_smoothing < 1:
    raise ValueError(f'config.label_smoothing={config.label_smoothing!r} must be in [0, 1).')
  if config.grad_clip < 0:
    raise ValueError(f'config.grad_clip={config.grad_clip!r} must be >= 0 (0 = off).')
  devices = jax.device_count()
  for field in ('batch_size', 'eval_batch_size'):
    if config.dataset[field] % devices:
      raise ValueError(f'config.dataset.{field}={config.dataset[field]} is not divisible by the '
                       f'{devices} devices; choose a multiple of {devices}.')
