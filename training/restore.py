"""Which checkpoint of a workdir a command reads, and the train state restored from it.

A command asks for 'best' (WORKDIR/best/, chosen on validation), 'latest' or a step, possibly
averaging the newest few (`choose`, `check_has_checkpoint`), then reads its parameters straight
into the model's shapes (`read_state`). A damaged newest checkpoint is skipped for the one before
it (`Checkpointer.first_readable`). A checkpoint reference becomes a source in sources/, which
calls these; a fine-tune's conversions are training/init_from.py's.
"""

import dataclasses
import os

from absl import logging
import jax
import ml_collections

import tasks
from training import layout, sharding
from training.checkpoints import Checkpointer
from training.config import validate
from training.steps import TrainState

CHOICES = ('best', 'latest')  # or a step number


@dataclasses.dataclass(frozen=True)
class Restored:
  """A workdir's run rebuilt for evaluation: its config (as evaluated), device mesh, and the
  train state of the chosen checkpoint (`checkpoint`: 'best', 'latest' or a step): its
  parameters, restored straight into the model's shapes, and no optimizer state."""

  config: ml_collections.ConfigDict
  mesh: jax.sharding.Mesh
  state: TrainState
  step: int
  checkpoint: str


def reader(directory: str) -> Checkpointer:
  """A Checkpointer that only reads `directory` (creates and writes nothing)."""
  return Checkpointer(directory, max_to_keep=None, create=False)


def choose(workdir: str, checkpoint: str, average_last: int = 1) -> str:
  """'best', 'latest' or a step (as text): what `checkpoint` asks for in `workdir`; '' = the
  best where the workdir has one and nothing is averaged, else the latest.

  Raises:
    ValueError: `checkpoint` is none of them, or 'best' where there is none or with averaging.
  """
  best_dir = layout.best_dir(workdir)
  has_best = os.path.isdir(best_dir) and bool(reader(best_dir).steps())
  if not checkpoint:
    return 'best' if has_best and average_last == 1 else 'latest'
  if checkpoint == 'best':
    if average_last > 1:
      raise ValueError(
        f'--average_last={average_last} averages the newest checkpoints; use it '
        'with --checkpoint=latest or a step, not --checkpoint=best.'
      )
    if not has_best:
      raise ValueError(
        f'--checkpoint=best: {workdir} has no {layout.BEST_DIR}/ checkpoint (trained '
        'before model selection, or not yet evaluated); use --checkpoint=latest.'
      )
    return checkpoint
  if checkpoint not in CHOICES and not checkpoint.isdigit():
    raise ValueError(f"--checkpoint={checkpoint!r} must be 'best', 'latest' or a step number.")
  return checkpoint


def check_has_checkpoint(workdir: str, chosen: str) -> None:
  """FileNotFoundError unless `workdir` holds the checkpoint `choose` chose (a run stopped before
  its first regular checkpoint may have a best one only)."""
  if chosen == 'best':
    return
  checkpoints = reader(layout.checkpoints_dir(workdir))
  try:
    steps = checkpoints.steps()
  finally:
    checkpoints.close()
  if not steps:
    raise FileNotFoundError(
      f'No checkpoint in {checkpoints.directory}; train first (python train.py '
      f'--config=CONFIG --workdir={workdir}) or convert a checkpoint into it (convert.py).'
    )
  if chosen.isdigit() and int(chosen) not in steps:
    raise FileNotFoundError(
      f'{workdir} holds no checkpoint at step {chosen} (saved steps: {steps}).'
    )


def read_state(workdir: str, chosen: str, like, *, average_last: int = 1, host: bool = False):
  """`(state, step)`: the checkpoint `chosen` ('best', 'latest' or a step) of `workdir` read into
  `like`'s shapes (`setup.readable_state`: no optimizer state), its parameters averaged over the
  `average_last` newest checkpoints up to it; with `host`, as NumPy arrays on no device.

  Raises:
    ValueError: too few checkpoints to average.
    CheckpointMismatchError: the checkpoint is of another model than `like`'s.
  """
  if chosen == 'best':
    best = reader(layout.best_dir(workdir))
    try:
      state, _ = best.restore(like, host=host)
    finally:
      best.close()
    step = int(jax.device_get(state.step))
  else:
    checkpoints = reader(layout.checkpoints_dir(workdir))
    try:
      step = None if chosen == 'latest' else int(chosen)
      state, step = averaged(like, checkpoints, step, average_last, host=host)
    finally:
      checkpoints.close()
  logging.info('Evaluating step %d (--checkpoint=%s).', step, chosen)
  return state, step


def averaged(
  like, checkpoints: Checkpointer, step: int | None, average_last: int, *, host: bool = False
):
  """The state of `step` (default: the newest readable checkpoint), its parameters averaged with
  those of the `average_last - 1` checkpoints before it, and its step.

  Raises:
    ValueError: fewer than `average_last` checkpoints up to that step.
  """
  state, _ = checkpoints.restore(like, step, host=host)
  step = int(jax.device_get(state.step))
  chosen = [s for s in checkpoints.steps() if s <= step][-average_last:]
  if len(chosen) < average_last:
    raise ValueError(
      f'--average_last={average_last}, but {checkpoints.directory} holds '
      f'{len(chosen)} checkpoint(s) up to step {step}: {chosen}.'
    )
  if len(chosen) > 1:
    # `step` is restored already; only the earlier checkpoints are read again.
    params = [checkpoints.restore(like, s, host=host)[0].params for s in chosen[:-1]]
    params += [state.params]
    state = state.replace(params=jax.tree.map(lambda *p: sum(p) / len(p), *params))
    logging.info('Averaged the parameters of steps %s.', chosen)
  return state, step


def eval_config(config: ml_collections.ConfigDict, eval_lengths=()) -> ml_collections.ConfigDict:
  """`config` fixed for evaluating here, then validated: `eval_lengths` (token counts, or their
  strings) replace a language model's `dataset.eval_lengths`, and a training mesh that does not
  fit these devices (a multi-host run evaluated on one machine) is replaced by every device along
  'data' (a checkpoint restores into any mesh).

  Raises:
    ValueError: `eval_lengths` for a task without them, or not token counts; a bad config.
  """
  if eval_lengths:
    if 'eval_lengths' not in tasks.task_class(config.task).dataset_config():
      raise ValueError(
        f"--eval_length applies to language models; this run's task is {config.task!r}."
      )
    try:
      lengths = tuple(int(n) for n in eval_lengths)
    except ValueError as error:
      raise ValueError(
        f'--eval_length={",".join(map(str, eval_lengths))} must be token counts.'
      ) from error
    with config.unlocked():
      config.dataset.eval_lengths = lengths
  try:
    sharding.mesh_shape(config.mesh, jax.device_count(), jax.local_device_count())
  except ValueError as error:
    logging.warning('%s Evaluating with every device on the data axis instead.', error)
    with config.unlocked():
      config.mesh = sharding.mesh_config()
  validate(config)
  return config
