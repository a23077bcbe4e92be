"""The experiment config's schema: every training field with its default, and its validation.

A config file starts from `default_config(task, model)` and states only where it differs:

    config = default_config('translation', 'transformer', num_layers=2, d_model=128)
    config.dataset.update(source_vocab='word')
    config.num_train_steps = 1500

`config.model` is the model's constructor arguments (`models.default_config`), `config.dataset` the
task's data schema (e.g. `data.translation.default_config()`); every other field is below. Every
field exists in every config, so `--config.FIELD=value` overrides any of them.
"""

import json
import os
from typing import Any

from absl import logging
import jax
import ml_collections

from attention.presses import PRESSES
import models
import tasks
from training import layout, profiling, sharding
from training.kv_heads import POOLINGS
from training.optim import SCHEDULES

DTYPES = ('float32', 'bfloat16')


def _training_fields() -> ml_collections.ConfigDict:
  """The training fields at their defaults (the values of configs/default.py)."""
  c = ml_collections.ConfigDict()
  c.seed = 0  # parameters, dropout and data order
  c.num_train_steps = 1500  # optimizer updates
  c.log_every_steps = 100  # progress line and train metrics
  c.eval_every_steps = 500  # validation metrics (0 = only at the end)
  c.checkpoint_every_steps = 500  # Orbax checkpoint interval (also saved at the end)
  c.keep_checkpoints = 3  # how many of the newest checkpoints are kept
  # Model selection (training/selection.py): the validation metric that picks WORKDIR/best/
  # ('' = the task's headline metric, Task.selection_metric); its direction follows its name.
  c.selection_metric = ''
  c.patience = 0  # stop after this many evaluations without a new best (0 = off)
  c.num_eval_decode = 256  # validation examples predicted (decoded) in training (0 = none)
  # Studies of initialisation: validation metrics of the initial parameters (step 0), and step 1's
  # train metrics logged on their own (its loss and gradient norm are at those parameters).
  c.eval_at_start = False
  c.max_decode_length = 0  # tokens generated per example; 0 = the task's default
  c.beam_size = 4  # eval.py --decode=beam
  c.alpha = 0.6  # beam-search length penalty (GNMT)
  c.temperatures = (0.0, 0.7, 1.0)  # language models: sampling temperatures (0 = greedy)
  c.top_k = 0  # sampling: only the k most likely tokens (0 = all)
  c.top_p = 1.0  # sampling: the smallest set of tokens with this mass (1 = all)
  c.press = ''  # language models' continuations: a KV-cache press of attention.PRESSES ('' = none)
  c.press_ratio = 0.5  # with a press: the share of the prompt's cached positions dropped
  # Fine-tuning: a workdir (its newest checkpoint), WORKDIR/checkpoints/STEP, or a pretrained
  # checkpoint (models.pretrained.read: a short name, a folder, a .zip, a .gguf); a new run starts
  # from its parameters that match by name and shape, and uses its vocabulary (or tokenizer).
  c.init_from = ''
  # With fewer key/value heads than init_from: how each group becomes one head
  # (training/kv_heads.py: 'mean' | 'first' | 'random'; '' = refuse the difference).
  c.init_kv_pooling = ''
  # Optimizer: AdamW with the Transformer paper's betas and epsilon.
  c.schedule = 'rsqrt'  # rsqrt (paper) | cosine | constant
  c.learning_rate = 2e-3  # peak learning rate, reached after warmup_steps
  # Linear warm-up from 0. With 'rsqrt' it also sets the decay, peak·√(warmup/step): sweep warm-up
  # lengths on 'constant' or 'cosine' to change the ramp alone (configs/study_warmup.py).
  c.warmup_steps = 300
  c.beta1 = 0.9
  c.beta2 = 0.98
  c.eps = 1e-9
  c.weight_decay = 0.0
  c.grad_clip = 1.0  # global-norm clipping (0 = off)
  c.label_smoothing = 0.1  # probability mass spread over the wrong classes
  # Captioning: weight of Show, Attend and Tell's doubly stochastic attention regulariser.
  c.attention_penalty = 0.0
  c.dtype = 'float32'  # compute dtype: float32 | bfloat16
  # A jax.profiler trace of the train steps FIRST:END (END excluded) into WORKDIR/profile/, for
  # TensorBoard's profile plugin or Perfetto (training/profiling.py); '' = off.
  c.profile_steps = ''
  # Devices per mesh axis (data, fsdp, tensor; -1 = the rest): see training/sharding.py.
  c.mesh = sharding.mesh_config()
  return c


def default_config(task: str, model: str, **model_overrides: Any) -> ml_collections.ConfigDict:
  """A complete config: training fields, `task`, `dataset` and `model` at their defaults.

  Args:
    task: a key of `tasks.TASKS`.
    model: a key of `models.MODELS`.
    **model_overrides: constructor arguments of the model that differ from its defaults.

  Returns:
    The config, unlocked, for a config file to change.
  """
  config = _training_fields()
  config.task = task  # tasks.TASKS key: what is read, trained and evaluated
  config.model = models.default_config(model, **model_overrides)
  config.dataset = tasks.task_class(task).dataset_config()
  return config


def add_missing_fields(config) -> list[str]:
  """Sets the training fields a saved config lacks (a run older than the field) to their
  defaults, which keep what such a run did; returns their names."""
  missing = sorted(set(_training_fields()) - set(config))
  for field in missing:
    config[field] = _training_fields()[field]
  return missing


def _check_types(config) -> None:
  """Raises ValueError for a training field that is unknown or of the wrong type."""
  schema = _training_fields()
  valid = sorted([*schema, 'task', 'model', 'dataset'])
  unknown = sorted(set(config) - set(valid))
  if unknown:
    raise ValueError(f'config.{unknown[0]} is not a config field; valid fields: {valid}.')
  missing = sorted(set(valid) - set(config))
  if missing:
    raise ValueError(
      f'config.{missing[0]} is missing; start config files from '
      'training.config.default_config(task, model).'
    )
  for field, default in schema.items():
    value = config[field]
    expected = (int, float) if isinstance(default, float) else type(default)
    if isinstance(default, tuple):  # config.json stores tuples as lists
      expected = (tuple, list)
    if isinstance(default, ml_collections.ConfigDict):  # its fields are checked where it is used
      expected = (ml_collections.ConfigDict, dict)
    if isinstance(value, bool) != isinstance(default, bool) or not isinstance(value, expected):
      raise ValueError(f'config.{field}={value!r} must be of type {type(default).__name__}.')


def validate(config) -> None:
  """Raises ValueError naming the first bad training field of `config` and what it may be.

  Checks every field of `_training_fields` and the task name; `config.model` is checked when the
  model is built and `config.dataset` by the task's data, both before any compilation. The
  mesh is checked against the devices here, and the one batch-size check: the global batches
  must split evenly over the mesh's batch shards.
  """
  _check_types(config)
  task = tasks.task_class(config.task)
  if config.selection_metric in task.decoded_metrics and not config.num_eval_decode:
    raise ValueError(
      f'config.selection_metric={config.selection_metric!r} is computed from decoded outputs: '
      'it needs config.num_eval_decode > 0 (validation examples decoded at each evaluation).'
    )
  if config.model.get('copy_source') and not config.dataset.get('shared_vocab'):
    raise ValueError(
      'config.model.copy_source=True reads source ids as target ids: it needs '
      'config.dataset.shared_vocab=True (one vocabulary for both sides).'
    )
  positive = (
    'num_train_steps',
    'log_every_steps',
    'checkpoint_every_steps',
    'keep_checkpoints',
    'beam_size',
  )
  for field in positive:
    if config[field] <= 0:
      raise ValueError(f'config.{field}={config[field]!r} must be a positive integer.')
  for field in (
    'eval_every_steps',
    'warmup_steps',
    'max_decode_length',
    'num_eval_decode',
    'patience',
  ):
    if config[field] < 0:
      raise ValueError(f'config.{field}={config[field]!r} must be an integer >= 0.')
  if config.schedule not in SCHEDULES:
    raise ValueError(f'config.schedule={config.schedule!r} is not one of {SCHEDULES}.')
  if config.init_kv_pooling not in ('', *POOLINGS):
    raise ValueError(
      f'config.init_kv_pooling={config.init_kv_pooling!r} is not one of {("", *POOLINGS)}.'
    )
  if config.dtype not in DTYPES:
    raise ValueError(f'config.dtype={config.dtype!r} is not one of {DTYPES}.')
  if not config.learning_rate > 0:
    raise ValueError(f'config.learning_rate={config.learning_rate!r} must be > 0.')
  if config.attention_penalty < 0:
    raise ValueError(f'config.attention_penalty={config.attention_penalty!r} must be >= 0.')
  if not 0 <= config.label_smoothing < 1:
    raise ValueError(f'config.label_smoothing={config.label_smoothing!r} must be in [0, 1).')
  if not all(isinstance(t, (int, float)) and t >= 0 for t in config.temperatures):
    raise ValueError(f'config.temperatures={config.temperatures!r} must be numbers >= 0.')
  if config.top_k < 0:
    raise ValueError(f'config.top_k={config.top_k!r} must be an integer >= 0 (0 = all tokens).')
  if not 0 < config.top_p <= 1:
    raise ValueError(f'config.top_p={config.top_p!r} must be in (0, 1].')
  if config.get('press'):  # workdirs written before the field have none
    if config.press not in PRESSES:
      raise ValueError(f"config.press={config.press!r} is not one of {sorted(PRESSES)} ('': none).")
    if not 0 <= config.press_ratio < 1:
      raise ValueError(f'config.press_ratio={config.press_ratio!r} must be in [0, 1).')
  if config.grad_clip < 0:
    raise ValueError(f'config.grad_clip={config.grad_clip!r} must be >= 0 (0 = off).')
  profiling.parse_steps(config.profile_steps)
  sizes = sharding.mesh_shape(config.mesh, jax.device_count(), jax.local_device_count())
  shards = sharding.batch_shards(sizes)
  for field in ('batch_size', 'eval_batch_size'):
    size = config.dataset[field]
    if size % shards:
      raise ValueError(
        f'config.dataset.{field}={size} is not divisible by the {shards} batch '
        f'shards (config.mesh data={sizes["data"]} x fsdp={sizes["fsdp"]}); '
        f'choose a multiple of {shards}.'
      )


def read_config(workdir: str, output: str = '') -> ml_collections.ConfigDict:
  """The config a run in `workdir` was trained with (its config.json), or with `output` the one
  an evaluation of it used (WORKDIR/OUTPUT/config.json), with the fields added since it was
  written at their defaults.

  A new field's default is what the code did before the field existed, so a run without it ran
  as its default: eval.py rebuilds it so, and a study whose runs straddle the field's addition
  does not differ in it.

  Raises:
    FileNotFoundError: there is no such config.json.
  """
  path = os.path.join(workdir, output, layout.CONFIG_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f'{path} does not exist; is --workdir={workdir} a training workdir?')
  with open(path, encoding='utf-8') as f:
    config = ml_collections.ConfigDict(json.load(f))
  added = add_missing_fields(config)
  name = config.get('model', {}).get('name')
  if name in models.MODELS:
    for field, default in models.default_config(name).items():
      if field not in config.model:
        config.model[field] = default
        added.append(f'model.{field}')
  if added:
    logging.info('%s predates the field(s) %s; using their defaults.', path, added)
  return config


# config.model fields that change how a model runs, not what its weights compute.
_FUNCTION_NEUTRAL = ('dropout_rate', 'attention_dropout_rate', 'attention_impl', 'cache_dtype')


def swap_notes(trained_model, model, seq_length: int | None) -> list[str]:
  """One line for each change of `config.model` that the weights were not trained for (against
  `trained_model`, the fields of the run or checkpoint they come from), and for a window that
  covers every row of `seq_length` tokens and so changes nothing."""
  window = model.get('window') or 0
  covers = bool(window and seq_length and window >= seq_length)
  notes = [
    f'config.model.{field}={model[field]!r}, where the weights were trained with '
    f'{trained_model[field]!r}: they compute something else until trained for it.'
    for field in sorted(model)
    if field not in _FUNCTION_NEUTRAL
    and field in trained_model
    and model[field] != trained_model[field]
    and not (field == 'window' and covers)
  ]
  if covers:
    notes.append(
      f'config.model.window={window} covers every {seq_length}-token row '
      '(config.dataset.seq_length): the window changes nothing here.'
    )
  return notes
