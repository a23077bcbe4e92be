"""Orbax checkpoints of the train state as a flat dict of plain arrays, plus JSON metadata."""

import os

from absl import logging
import jax
import numpy as np
import orbax.checkpoint as ocp

from training.steps import TrainState


class CheckpointMismatchError(ValueError):
  """A checkpoint's arrays differ from what the config builds (another model config)."""


def _flat(state: TrainState) -> dict:
  """{'params.encoder...kernel.value': array, 'opt_state...': array, 'step': array}."""
  tree = dict(step=state.step, params=state.params, opt_state=state.opt_state)
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {jax.tree_util.keystr(path, simple=True, separator='.'): leaf for path, leaf in leaves}


def _unflat(flat: dict, like: TrainState) -> TrainState:
  """The inverse of `_flat`, using `like` (possibly abstract) for the tree structure."""
  tree = dict(step=like.step, params=like.params, opt_state=like.opt_state)
  paths, treedef = jax.tree_util.tree_flatten_with_path(tree)
  keys = [jax.tree_util.keystr(path, simple=True, separator='.') for path, _ in paths]
  tree = jax.tree.unflatten(treedef, [flat[key] for key in keys])
  return like.replace(**tree)


class Checkpointer:
  """Saves and restores train states under WORKDIR/checkpoints, keeping the last `max_to_keep`."""

  def __init__(self, directory, *, max_to_keep: int):
    self.directory = os.path.abspath(directory)  # Orbax refuses relative paths
    self._manager = ocp.CheckpointManager(
        self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
        item_handlers=dict(state=ocp.StandardCheckpointHandler(),
                           meta=ocp.JsonCheckpointHandler()))

  def steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  def save(self, state: TrainState, meta: dict) -> None:
    """Saves `state` at its step (asynchronously) with JSON-able `meta` (e.g. the data position)."""
    self._manager.check_for_errors()  # a failed earlier (asynchronous) save stops the run here
    step = int(jax.device_get(state.step))
    if step in self._manager.all_steps():
      return
    self._manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(_flat(state)), meta=ocp.args.JsonSave(meta)), force=True)

  def restore(self, like: TrainState, step: int | None = None):
    """Restores the newest readable checkpoint (or `step`) into the structure of `like`.

    An unreadable checkpoint is skipped with a warning in favour of the one before it; a
    checkpoint whose arrays do not match `like` (another model config) is an error.

    Args:
      like: a train state, possibly of jax.ShapeDtypeStruct leaves, giving structure and shapes.
      step: the step to restore; None = the newest readable one.

    Returns:
      (state, meta), or None when the directory holds no checkpoint.

    Raises:
      CheckpointMismatchError: the checkpoint's arrays differ from `like` in names or shapes.
      ValueError: `step` is not a saved step.
      RuntimeError: no checkpoint could be read.
    """
    steps = self.steps()
    if not steps:
      return None
    if step is not None and step not in steps:
      raise ValueError(f'--checkpoint_step={step} is not in {self.directory}; saved steps: {steps}.')
    wanted = _abstract(_flat(like))
    for candidate in [step] if step is not None else steps[::-1]:
      try:
        saved = self._manager.item_metadata(candidate)['state']
        _check_matches(saved, wanted, candidate)
        restored = self._manager.restore(candidate, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(wanted), meta=ocp.args.JsonRestore()))
      except CheckpointMismatchError:
        raise
      except Exception as error:  # pylint: disable=broad-except
        # Orbax raises many types for a damaged directory; any of them means "try the older one".
        logging.warning('Checkpoint %d in %s is unreadable (%s: %s); trying the previous one.',
                        candidate, self.directory, type(error).__name__, error)
        continue
      return _unflat(restored['state'], like), dict(restored['meta'])
    raise RuntimeError(f'No readable checkpoint in {self.directory} (tried steps {steps}).')

  def wait(self) -> None:
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.close()


def _abstract(flat: dict) -> dict:
  def spec(x):
    sharding = getattr(x, 'sharding', None)
    return jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=sharding)
  return {key: spec(value) for key, value in flat.items()}


def _check_matches(saved, wanted: dict, step: int) -> None:
  """Raises one readable ValueError when saved and wanted arrays differ in names or shapes."""
  saved = {key: tuple(meta.shape) for key, meta in saved.items()}
  missing = sorted(set(wanted) - set(saved))
  extra = sorted(set(saved) - set(wanted))
  params_first = lambda key: (not key.startswith('params'), key)
  shapes = [f'{key} is {saved[key]} in the checkpoint but {tuple(wanted[key].shape)} here'
            for key in sorted(set(saved) & set(wanted), key=params_first)
            if saved[key] != tuple(wanted[key].shape)]
  if missing or extra or shapes:
    problems = shapes[:3] + [f'missing in the checkpoint: {missing[:3]}'] * bool(missing) + [
        f'not in this config: {extra[:3]}'] * bool(extra)
    raise CheckpointMismatchError(f'The checkpoint at step {step} does not match this config.model '
                     f'(was it trained with another config?): {"; ".join(problems)}.')
