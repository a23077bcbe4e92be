"""Fine-tuning from another run (`config.init_from`): the parameters of its checkpoint that
match the new model by name and shape, checked before anything is written.

`config.init_from` is a training workdir (its newest readable checkpoint) or one step of it,
WORKDIR/checkpoints/STEP (`layout.checkpoint_step`).
"""

from absl import logging
import jax
import numpy as np

from training import layout
from training.checkpoints import (
  Checkpointer,
  CheckpointMismatchError,
  flat_state,
  from_flat,
)
from training.steps import TrainState


def check_init_from(like: TrainState, init_from: str) -> int:
  """The step of `init_from` a fine-tuning run would load, checked from metadata alone by this
  process alone.

  Args:
    like: the new run's train state, possibly of jax.ShapeDtypeStruct leaves.
    init_from: `config.init_from`, a training workdir or WORKDIR/checkpoints/STEP.

  Raises:
    FileNotFoundError, CheckpointMismatchError, UnreadableCheckpointError: as
      `load_matching_params`.
  """
  return _read_init_from(like, init_from, arrays=False)[0]


def load_matching_params(
  state: TrainState, init_from: str
) -> tuple[TrainState, list[str], list[str]]:
  """`state` with the parameters of `init_from`'s checkpoint that match by name and shape.

  The optimizer state and step stay fresh: fine-tuning starts a new run from those weights. A
  damaged newest checkpoint of a workdir is skipped for the one before it.

  Args:
    state: a freshly initialised train state.
    init_from: `config.init_from`, a training workdir or WORKDIR/checkpoints/STEP.

  Returns:
    `(state, loaded names, initialised names)`: the parameter arrays taken from the checkpoint,
    and those it does not have (kept as initialised).

  Raises:
    FileNotFoundError: `init_from` holds no checkpoint (or not that step).
    CheckpointMismatchError: a parameter of both has different shapes (another model size).
    UnreadableCheckpointError: no checkpoint of `init_from` can be read.
  """
  step, (saved, restored) = _read_init_from(state, init_from, arrays=True)
  flat = flat_state(state)
  wanted = [key for key in flat if key.startswith('params.')]
  loaded = sorted(key for key in wanted if key in saved)
  for key in loaded:
    flat[key] = jax.device_put(
      np.asarray(restored[key], flat[key].dtype), getattr(flat[key], 'sharding', None)
    )
  initialised = sorted(key for key in wanted if key not in saved)
  logging.info(
    'init_from %s step %d: loaded %d parameter arrays: %s; initialised %d: %s',
    layout.checkpoint_step(init_from)[0],
    step,
    len(loaded),
    loaded,
    len(initialised),
    initialised or 'none',
  )
  return from_flat(flat, state), loaded, initialised


def _read_init_from(like: TrainState, init_from: str, *, arrays: bool):
  """`(step, (saved shapes, saved arrays or None))` of the checkpoint `init_from` names (the
  newest readable one of a workdir), its parameters' shapes checked against `like`'s."""
  workdir, step = layout.checkpoint_step(init_from)
  checkpointer = Checkpointer(
    layout.checkpoints_dir(workdir), max_to_keep=None, create=False, local=not arrays
  )
  wanted = {
    key: tuple(np.shape(value))
    for key, value in flat_state(like).items()
    if key.startswith('params.')
  }

  def read(candidate: int):
    saved = checkpointer.shapes(candidate)
    differ = [
      f'{key} is {saved[key]} there but {shape} here'
      for key, shape in wanted.items()
      if key in saved and saved[key] != shape
    ]
    if differ:
      raise CheckpointMismatchError(
        f'config.init_from={init_from!r}: {len(differ)} parameter(s) have other shapes than in '
        f'this config.model (another model size?): {"; ".join(differ[:3])}.'
      )
    return saved, checkpointer.read_arrays(candidate) if arrays else None

  try:
    steps = checkpointer.steps()
    if not steps or (step is not None and step not in steps):
      raise FileNotFoundError(
        f'config.init_from={init_from!r} holds no checkpoint'
        f'{f" at step {step}" if step is not None else ""} (saved steps: {steps or "none"}); '
        'name a training workdir or WORKDIR/checkpoints/STEP.'
      )
    return checkpointer.first_readable([step] if step is not None else steps[::-1], read)
  finally:
    checkpointer.close()
