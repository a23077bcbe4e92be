"""Fine-tuning from another run or a pretrained checkpoint (`config.init_from`): the parameters
that match the new model by name and shape, checked before anything is written.

`config.init_from` is one of:

- a training workdir (its newest readable checkpoint) or one step of it,
  WORKDIR/checkpoints/STEP (`layout.checkpoint_step`), a converted one (convert.py) included;
- a pretrained checkpoint as `models.pretrained.read` reads it: a short name of
  `models.pretrained.PACKAGES`, a Hugging Face folder or `.zip`, a `.gguf` file. The run starts
  from its weights and its tokenizer, with no convert.py step.

A model that has fewer key/value heads than the one it starts from gets them merged by
`config.init_kv_pooling` (training/kv_heads.py: grouped-query conversion); any other difference in
shape is refused in one sentence naming the parameters.
"""

import contextlib
import copy
import os
import tempfile

from absl import logging
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from models import pretrained
from training import kv_heads, layout
from training.checkpoints import (
  Checkpointer,
  CheckpointMismatchError,
  flat_state,
  flatten,
  from_flat,
)
from training.config import read_config
from training.pretrained_workdir import save_vocab
from training.setup import build_state, fresh_moments, shaped_state
from training.steps import TrainState


def is_workdir(init_from: str) -> bool:
  """Whether `init_from` names a training workdir or one of its steps (it has checkpoints/)."""
  return layout.holds_checkpoints(layout.checkpoint_step(init_from)[0])


def read_pretrained(init_from: str, reader=pretrained.read):
  """The pretrained checkpoint `init_from` names, read by `reader` (`pretrained.read`: its
  tensors read when asked for; `pretrained.read_config`: its config.json alone).

  Raises:
    FileNotFoundError: `init_from` names nothing (neither a workdir nor a checkpoint).
    ValueError: a checkpoint that cannot be read, in one sentence naming it.
  """
  if init_from not in pretrained.PACKAGES and not os.path.exists(os.path.expanduser(init_from)):
    raise FileNotFoundError(
      f'config.init_from={init_from!r} is not a training workdir (it has no checkpoints/) nor '
      f'a pretrained checkpoint ({", ".join(pretrained.PACKAGES)}, a folder, a .zip or a .gguf '
      'file).'
    )
  try:
    return reader(init_from)
  except ValueError as error:
    raise ValueError(f'config.init_from={init_from!r}: {error}') from None


@contextlib.contextmanager
def vocab_source(init_from: str):
  """A directory whose vocab/ a run starting from `init_from` begins with: the workdir itself, or
  for a pretrained checkpoint a temporary one holding its tokenizer (a pretrained model's
  embeddings mean something with its own ids only)."""
  if is_workdir(init_from):
    yield layout.checkpoint_step(init_from)[0]
    return
  checkpoint = read_pretrained(init_from)
  with tempfile.TemporaryDirectory(prefix='attend-init-from-') as directory:
    save_vocab(directory, checkpoint)
    yield directory


def checkpoint_config(config, init_from: str, fields: dict):
  """`config` with `config.model` set to `fields`, the architecture of the pretrained checkpoint
  `init_from` (`trained_model_fields`: what its weights fill), for the shapes `check_init_from`
  compares."""
  original = copy.deepcopy(config)
  unknown = sorted(set(fields) - set(original.model))
  if unknown:
    raise CheckpointMismatchError(
      f'config.init_from={init_from!r}: config.model={config.model.name!r} has no field '
      f"{unknown[0]} of the checkpoint's architecture; start from its own config "
      '(configs/pretrained_lm.py:CHECKPOINT, configs/minilm_mlm.py:CHECKPOINT).'
    )
  original.model.update(fields)
  return original


def trained_model_fields(init_from: str) -> dict:
  """The `config.model` fields the weights of `init_from` were trained with."""
  if is_workdir(init_from):
    return dict(read_config(layout.checkpoint_step(init_from)[0]).model)
  return pretrained.config_fields(read_pretrained(init_from, pretrained.read_config))


def _shapes(tree) -> dict[str, tuple[int, ...]]:
  return {key: tuple(np.shape(v)) for key, v in tree.items() if key.startswith('params.')}


def _plan(like: TrainState, saved: dict, config, init_from: str) -> dict[str, tuple[int, int]]:
  """`{key: (K, K')}` of the key/value projections to regroup; CheckpointMismatchError naming
  the parameters whose shapes differ otherwise, or that need `config.init_kv_pooling`."""
  wanted = _shapes(flat_state(like))
  num_kv_heads = config.model.get('num_kv_heads') or config.model.get('num_heads', 0)
  plan, differ = {}, []
  for key, shape in wanted.items():
    if key not in saved or saved[key] == shape:
      continue
    why = 'another model size?'
    if kv_heads.is_kv_projection(key) and num_kv_heads:
      found = kv_heads.regroupable(saved[key], shape, num_kv_heads)
      if isinstance(found, tuple):
        plan[key] = found
        continue
      why = found
    differ.append(f'{key} is {saved[key]} there but {shape} here ({why})')
  if differ:
    raise CheckpointMismatchError(
      f'config.init_from={init_from!r}: {len(differ)} parameter(s) have other shapes than in '
      f'this config.model: {"; ".join(differ[:3])}.'
    )
  if plan and config.init_kv_pooling not in kv_heads.POOLINGS:
    (heads, target), *_ = plan.values()
    raise CheckpointMismatchError(
      f'config.init_from={init_from!r} has {heads} key/value heads where config.model has '
      f'{target}: set config.init_kv_pooling to one of {kv_heads.POOLINGS} to merge them '
      "('mean' is Ainslie et al.'s grouped-query conversion)."
    )
  return plan


def check_init_from(config, like: TrainState, checkpoint_like: TrainState | None = None) -> int:
  """The step of `config.init_from` a fine-tuning run would load (0 for a pretrained checkpoint),
  checked from metadata alone by this process alone.

  Args:
    config: the run's config.
    like: the new run's train state, possibly of jax.ShapeDtypeStruct leaves.
    checkpoint_like: for a pretrained checkpoint, the abstract train state of its architecture
      (`checkpoint_config`), whose parameters its weights fill.

  Raises:
    FileNotFoundError, CheckpointMismatchError, UnreadableCheckpointError: as
      `load_matching_params`.
  """
  if checkpoint_like is not None:
    _plan(like, _shapes(flat_state(checkpoint_like)), config, config.init_from)
    return 0
  return _read_workdir(config, like, arrays=False)[0]


def initial_state(config, task, mesh) -> TrainState:
  """The first state of a run that starts from `config.init_from`: its parameters, placed where
  the mesh puts them, and fresh optimizer moments at step 0.

  Where the checkpoint fills every parameter, they are read straight into the model's shapes
  (`setup.shaped_state`): nothing is initialised at random first, and the process never holds
  a random model beside the checkpoint's (SmolLM2's fine-tune: 6.1 GB peak before). A model
  with parameters the checkpoint lacks, or with key/value heads pooled 'random', is initialised
  and then overwritten (`load_matching_params`).

  Raises:
    As `load_matching_params`.
  """
  like = shaped_state(config, task, mesh)
  found = _read_source(config, like)
  saved = found[1]
  plan = _plan(like, saved, config, config.init_from)
  lacking = [key for key in flat_state(like) if key.startswith('params.') and key not in saved]
  if lacking or (plan and config.init_kv_pooling == 'random'):
    return load_matching_params(build_state(config, task, mesh), config, found)[0]
  return fresh_moments(load_matching_params(like, config, found)[0])


def load_matching_params(
  state: TrainState, config, found: tuple | None = None
) -> tuple[TrainState, list[str], list[str]]:
  """`state` with the parameters of `config.init_from` that match by name and shape, key/value
  projections merged where `check_init_from` planned it.

  The optimizer state and step stay fresh: fine-tuning starts a new run from those weights. A
  damaged newest checkpoint of a workdir is skipped for the one before it. `state` may be
  abstract (`setup.shaped_state`) where the checkpoint fills every parameter. `found`: what
  `_read_source` read already (its arrays are taken from it as they are placed).

  Returns:
    `(state, loaded names, initialised names)`: the parameter arrays taken from the checkpoint,
    and those it does not have (kept as initialised).

  Raises:
    FileNotFoundError: `init_from` holds no checkpoint (or not that step).
    CheckpointMismatchError: a parameter of both has different shapes (another model size).
    UnreadableCheckpointError: no checkpoint of a workdir can be read.
  """
  step, saved, restored = found or _read_source(config, state)
  plan = _plan(state, saved, config, config.init_from)
  flat = flat_state(state)
  wanted = [key for key in flat if key.startswith('params.')]
  loaded = sorted(key for key in wanted if key in saved)
  pooling = config.init_kv_pooling
  for key in loaded:
    value = np.asarray(restored.pop(key))  # each array freed once placed: never two models held
    if key in plan:
      # Only 'random' pooling takes the new model's own initial value (`state` may be abstract).
      fresh = np.asarray(jax.device_get(flat[key])) if pooling == 'random' else None
      value = kv_heads.regroup(value, *plan[key], pooling, fresh)
    placed = jax.device_put(
      np.asarray(value, flat[key].dtype), getattr(flat[key], 'sharding', None)
    )
    # A copy of its own: `np.asarray` views the restored array's buffer and `device_put` shares
    # it on CPU, and a buffer two arrays hold cannot be donated, so the train step's first call
    # allocated new parameters beside these (SmolLM2: 540 MB more at the run's peak).
    flat[key] = jnp.copy(placed)
  initialised = sorted(key for key in wanted if key not in saved)
  merged = f'; key/value heads merged by {pooling!r} in {len(plan)}' if plan else ''
  logging.info(
    'init_from %s (step %d): loaded %d of %d parameter arrays%s; initialised: %s',
    layout.checkpoint_step(config.init_from)[0],
    step,
    len(loaded),
    len(wanted),
    merged,
    ', '.join(initialised[:8]) + (f' and {len(initialised) - 8} more' if initialised[8:] else '')
    if initialised
    else 'none',
  )
  return from_flat(flat, state), loaded, initialised


def _read_source(config, like: TrainState) -> tuple[int, dict, dict]:
  """`(step, saved shapes, saved arrays)` of `config.init_from`: a workdir's checkpoint (its
  shapes checked against `like`) or a pretrained checkpoint's parameters, as Attend names them."""
  if is_workdir(config.init_from):
    step, (saved, restored) = _read_workdir(config, like, arrays=True)
    return step, saved, restored
  restored = _pretrained_params(config.init_from)
  return 0, _shapes(restored), restored


def _pretrained_params(init_from: str) -> dict[str, np.ndarray]:
  """The pretrained checkpoint's parameters as Attend names them, `{'params.PATH': array}`."""
  checkpoint = read_pretrained(init_from)
  model, _ = pretrained.family(checkpoint.config).load(checkpoint)
  return flatten(dict(params=nnx.to_pure_dict(nnx.state(model, nnx.Param))))


def _read_workdir(config, like: TrainState, *, arrays: bool):
  """`(step, (saved shapes, saved arrays or None))` of the checkpoint `config.init_from` names
  (the newest readable one of a workdir), its parameters' shapes checked against `like`'s."""
  init_from = config.init_from
  workdir, step = layout.checkpoint_step(init_from)
  checkpointer = Checkpointer(
    layout.checkpoints_dir(workdir), max_to_keep=None, create=False, local=not arrays
  )

  def read(candidate: int):
    saved = checkpointer.shapes(candidate)
    _plan(like, {k: v for k, v in saved.items() if k.startswith('params.')}, config, init_from)
    return saved, checkpointer.read_arrays(candidate) if arrays else None

  try:
    steps = checkpointer.steps()
    if not steps or (step is not None and step not in steps):
      raise FileNotFoundError(
        f'config.init_from={init_from!r} holds no checkpoint'
        f'{f" at step {step}" if step is not None else ""} (saved steps: {steps or "none"}); '
        'name a training workdir, WORKDIR/checkpoints/STEP or a pretrained checkpoint.'
      )
    return checkpointer.first_readable([step] if step is not None else steps[::-1], read)
  finally:
    checkpointer.close()
