"""Orbax checkpoints of the train state as a flat dict of plain arrays, plus JSON metadata."""

import contextlib
import logging as std_logging
import os

from absl import logging
import jax
import numpy as np
import orbax.checkpoint as ocp

from models.pretrained.files import runs_of_bytes
from training.steps import TrainState


class CheckpointMismatchError(ValueError):
  """A checkpoint's arrays differ from what the config builds (another model config)."""


class UnreadableCheckpointError(RuntimeError):
  """No checkpoint of a directory can be read (all damaged or partial)."""


# (directory, step) of the damaged checkpoints this process has reported.
_REPORTED: set[tuple[str, int]] = set()

# Checkpoints written while the train state held NNX Variables name every parameter and moment
# with this suffix ('params.encoder...kernel.value'); they are read under today's names.
_LEGACY_SUFFIX = '.value'


def flatten(tree) -> dict:
  """`{'a.b.0.c': leaf}`: each leaf of a nested tree by its dotted path, as checkpoints name it."""
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {jax.tree_util.keystr(path, simple=True, separator='.'): leaf for path, leaf in leaves}


def flat_state(state: TrainState) -> dict:
  """{'params.encoder...kernel': array, 'opt_state...': array, 'step': array}."""
  return flatten(dict(step=state.step, params=state.params, opt_state=state.opt_state))


def from_flat(flat: dict, like: TrainState) -> TrainState:
  """The inverse of `flat_state`, using `like` (possibly abstract) for the tree structure."""
  tree = dict(step=like.step, params=like.params, opt_state=like.opt_state)
  paths, treedef = jax.tree_util.tree_flatten_with_path(tree)
  keys = [jax.tree_util.keystr(path, simple=True, separator='.') for path, _ in paths]
  tree = jax.tree.unflatten(treedef, [flat[key] for key in keys])
  return like.replace(**tree)


class Checkpointer:
  """Saves and restores train states under WORKDIR/checkpoints, keeping the last `max_to_keep`."""

  def __init__(
    self, directory, *, max_to_keep: int | None, create: bool = True, local: bool = False
  ):
    """`create=False` only reads: the directory is neither created nor written to. `local`: this
    process alone opens it (process 0 checking a workdir before the others read it), without
    the barriers Orbax otherwise holds with every process of the job."""
    self.directory = os.path.abspath(directory)  # Orbax refuses relative paths
    alone = ocp.options.MultiprocessingOptions(
      primary_host=jax.process_index(), active_processes={jax.process_index()}
    )
    with _orbax_quiet():  # it lists the steps, reading each one's metadata
      self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(
          max_to_keep=max_to_keep,
          create=create,
          **dict(multiprocessing_options=alone) if local else {},
        ),
        # The PyTree handler (what Orbax's standard one wraps, the same files) reads a part of
        # a checkpoint: the parameters without the optimizer's moments (`restore`). Written
        # uncompressed: float32 weights shrink about 12% under zstd (measured on random normal
        # ones of SmolLM2's shapes), while compressing holds every compressed array in memory
        # until the write (about 1 GB more peak memory for SmolLM2's 1.5 GB state) and takes
        # about 3x as long. Compressed checkpoints written before read as before (their
        # metadata says how they were written).
        item_handlers=dict(
          state=ocp.PyTreeCheckpointHandler(use_compression=False),
          meta=ocp.JsonCheckpointHandler(),
        ),
      )

  def steps(self) -> list[int]:
    """The saved steps, read from the directory (a save that failed midway is not one)."""
    with _orbax_quiet():  # a damaged step is reported when it is read (`first_readable`)
      self._manager.reload()
    return sorted(self._manager.all_steps())

  def save(self, state: TrainState, meta: dict) -> None:
    """Saves `state` at its step (asynchronously) with JSON-able `meta` (e.g. the data position)."""
    self._manager.check_for_errors()  # a failed earlier (asynchronous) save stops the run here
    step = int(jax.device_get(state.step))
    if step in self._manager.all_steps():
      return
    self._manager.save(
      step,
      args=ocp.args.Composite(
        state=ocp.args.PyTreeSave(flat_state(state)), meta=ocp.args.JsonSave(meta)
      ),
      force=True,
    )

  def restore(self, like: TrainState, step: int | None = None, *, host: bool = False):
    """Restores the newest readable checkpoint (or `step`) into the structure of `like`.

    An unreadable checkpoint is skipped with one logged line in favour of the one before it; a
    checkpoint whose arrays do not match `like` (another model config) is an error.

    Args:
      like: a train state, possibly of jax.ShapeDtypeStruct leaves, giving structure and shapes;
        with `opt_state` None (`training.setup.readable_state`) the step and parameters alone
        are read, and the optimizer's moments stay on disk.
      step: the step to restore; None = the newest readable one.
      host: every array read as a NumPy array in host memory, placed on no device (for a
        command that only reads the values, e.g. export: no device copy beside the host one).

    Returns:
      (state, meta), or None when the directory holds no checkpoint.

    Raises:
      CheckpointMismatchError: the checkpoint's arrays differ from `like` in names or shapes.
      ValueError: `step` is not a saved step.
      UnreadableCheckpointError: no checkpoint could be read.
    """
    steps = self.steps()
    if not steps:
      return None
    if step is not None and step not in steps:
      raise ValueError(
        f'--checkpoint_step={step} is not in {self.directory}; saved steps: {steps}.'
      )
    wanted = _abstract(flat_state(like))
    partial = like.opt_state is None

    def read_part(candidate: int, stored: dict, keys: list[str], partial: bool):
      item = {stored[k]: wanted[k] for k in keys}
      if host:
        arguments = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), item)
      else:
        arguments = ocp.checkpoint_utils.construct_restore_args(item)
      restored = self._manager.restore(
        candidate,
        args=ocp.args.Composite(
          state=ocp.args.PyTreeRestore(item, restore_args=arguments, partial_restore=partial),
          meta=ocp.args.JsonRestore(),
        ),
      )
      return {key: restored['state'][stored[key]] for key in keys}, dict(restored['meta'])

    def read(candidate: int):
      stored = self._check(candidate, wanted, partial=partial)
      if not host:
        return read_part(candidate, stored, list(wanted), partial)
      arrays = {}
      for keys in _in_parts(wanted, HOST_PART_BYTES):
        part, meta = read_part(candidate, stored, keys, partial=True)
        arrays.update(part)
      return arrays, meta

    _, (arrays, meta) = self.first_readable([step] if step is not None else steps[::-1], read)
    return from_flat(arrays, like), meta

  def newest_matching(self, like: TrainState) -> int | None:
    """The step `restore` would start from, checked against `like` from metadata alone (no
    array is read); None when there is no checkpoint.

    Raises:
      CheckpointMismatchError, UnreadableCheckpointError: as `restore`.
    """
    steps = self.steps()
    if not steps:
      return None
    wanted = _abstract(flat_state(like))
    return self.first_readable(steps[::-1], lambda step: self._check(step, wanted))[0]

  def first_readable(self, candidates: list[int], read):
    """`(step, read(step))` for the first of `candidates` that reads; each one that does not is
    skipped with one logged line naming it and why.

    Raises:
      CheckpointMismatchError: from `read`: a readable checkpoint of another config.
      UnreadableCheckpointError: none of them reads.
    """
    for candidate in candidates:
      try:
        with _orbax_quiet():
          return candidate, read(candidate)
      except CheckpointMismatchError:
        raise
      except Exception as error:  # pylint: disable=broad-except
        # Orbax raises many types for a damaged directory; any of them means "try the older one".
        if (self.directory, candidate) not in _REPORTED:  # checked, then read: one line
          _REPORTED.add((self.directory, candidate))
          logging.warning(
            'Skipping checkpoint %d in %s: %s.', candidate, self.directory, _reason(error)
          )
    raise UnreadableCheckpointError(
      f'No checkpoint in {self.directory} can be read (tried step(s) {candidates}); the log '
      'names the reason for each.'
    )

  def _check(self, step: int, wanted: dict, partial: bool = False) -> dict[str, str]:
    """{name: the name it is stored under} at `step`, after checking the shapes match; `partial`:
    the optimizer's moments are not wanted."""
    saved = self._saved(step)
    if partial:
      saved = {key: value for key, value in saved.items() if not key.startswith('opt_state')}
    _check_matches({key: tuple(meta.shape) for key, (_, meta) in saved.items()}, wanted, step)
    return {key: name for key, (name, _) in saved.items()}

  def _saved(self, step: int) -> dict[str, tuple[str, object]]:
    """{today's name: (the name it is stored under, its array metadata)} at `step`, read once
    from the metadata (see `_LEGACY_SUFFIX`)."""
    return {
      key.removesuffix(_LEGACY_SUFFIX): (key, meta)
      for key, meta in self._manager.item_metadata(step)['state'].items()
    }

  def shapes(self, step: int) -> dict[str, tuple[int, ...]]:
    """The flat names and shapes of the arrays saved at `step` (read from metadata only)."""
    return {key: tuple(meta.shape) for key, (_, meta) in self._saved(step).items()}

  def read_arrays(self, step: int) -> dict[str, np.ndarray]:
    """Every array saved at `step`, as NumPy, by flat name (parameters and optimizer moments).

    For taking some of a checkpoint's parameters (fine-tuning): simpler than a partial restore,
    and the models that are fine-tuned here are small.
    """
    metadata = self._manager.item_metadata(step)['state']
    target = {key: jax.ShapeDtypeStruct(meta.shape, meta.dtype) for key, meta in metadata.items()}
    restored = self._manager.restore(
      step,
      args=ocp.args.Composite(
        state=ocp.args.PyTreeRestore(
          target, restore_args=ocp.checkpoint_utils.construct_restore_args(target)
        )
      ),
    )
    return {key.removesuffix(_LEGACY_SUFFIX): value for key, value in restored['state'].items()}

  def delete(self, step: int) -> None:
    """Deletes the checkpoint of `step`."""
    self._manager.delete(step)

  def wait(self) -> None:
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.close()


# A host restore reads the arrays in parts of about this many bytes, one after the other: read
# all at once, Orbax's reading buffers stayed resident beside the arrays (SmolLM2's 513 MiB of
# parameters took the process 770-1,000 MiB above its imports; in parts, 560-600), and the memory
# a part frees serves the next.
HOST_PART_BYTES = 64 * 2**20


def _in_parts(wanted: dict, limit: int) -> list[list[str]]:
  """`wanted`'s keys in runs of at most `limit` bytes (an array larger than `limit` alone)."""
  sizes = {
    key: int(np.prod(spec.shape)) * np.dtype(spec.dtype).itemsize for key, spec in wanted.items()
  }
  return runs_of_bytes(sizes, limit)


def _abstract(flat: dict) -> dict:
  def spec(x):
    sharding = getattr(x, 'sharding', None)
    return jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=sharding)

  return {key: spec(value) for key, value in flat.items()}


@contextlib.contextmanager
def _orbax_quiet():
  """Drops Orbax's own log records (e.g. an ERROR quoting a damaged file) while checkpoints are
  listed or tried: a failure is told once, in `first_readable`'s line."""

  def keep(record) -> bool:
    return '/orbax/' not in record.pathname

  logger = std_logging.getLogger('absl')
  logger.addFilter(keep)
  try:
    yield
  finally:
    logger.removeFilter(keep)


def _reason(error: Exception) -> str:
  """The first line of an error, shortened: Orbax and TensorStore messages run to pages."""
  line = (str(error).strip().splitlines() or [''])[0]
  return f'{type(error).__name__}: {line[:200]}{"..." if len(line) > 200 else ""}'


def _check_matches(saved: dict[str, tuple[int, ...]], wanted: dict, step: int) -> None:
  """Raises one readable ValueError when saved and wanted arrays differ in names or shapes."""
  missing = sorted(set(wanted) - set(saved))
  extra = sorted(set(saved) - set(wanted))
  params_first = lambda key: (not key.startswith('params'), key)
  shapes = [
    f'{key} is {saved[key]} in the checkpoint but {tuple(wanted[key].shape)} here'
    for key in sorted(set(saved) & set(wanted), key=params_first)
    if saved[key] != tuple(wanted[key].shape)
  ]
  if missing or extra or shapes:
    problems = (
      shapes[:3]
      + [f'missing in the checkpoint: {missing[:3]}'] * bool(missing)
      + [f'not in this config: {extra[:3]}'] * bool(extra)
    )
    # The parameters agree and only the optimizer's moments differ: an optimizer field changed.
    model_ok = all(not key.startswith('params') for key in missing + extra) and not any(
      problem.startswith('params') for problem in shapes
    )
    what = (
      "this config's optimizer (was config.grad_clip switched on or off?)"
      if model_ok
      else 'this config.model (was it trained with another config?)'
    )
    raise CheckpointMismatchError(
      f'The checkpoint at step {step} does not match {what}: {"; ".join(problems)}.'
    )
