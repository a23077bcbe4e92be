"""Which checkpoint of a workdir a command reads, and the train state restored from it.

eval.py asks for 'best' (WORKDIR/best/, chosen on validation), 'latest' or a step, possibly
averaging the newest few (`for_evaluation`): the choice and the run's config and task are
resolved first (`resolve`, a `Source` a command checks its request against), then its
parameters are read (`restored`); the studies read the newest (`newest`). A damaged
newest checkpoint is skipped for the one before it (`Checkpointer.first_readable`). Fine-tuning
from another run (`config.init_from`) is in training/init_from.py.
"""

import dataclasses
import os

from absl import logging
import jax
import ml_collections

import tasks
from training import layout, sharding
from training import workdir as workdir_lib
from training.checkpoints import Checkpointer
from training.config import read_config, swap_notes, validate
from training.setup import readable_state
from training.steps import TrainState

CHOICES = ('best', 'latest')  # or a step number


@dataclasses.dataclass(frozen=True)
class Restored:
  """A workdir's run rebuilt for evaluation: its config (as evaluated), task, device mesh, and
  the train state of the chosen checkpoint (`checkpoint`: 'best', 'latest' or a step): its
  parameters, restored straight into the model's shapes, and no optimizer state."""

  config: ml_collections.ConfigDict
  task: tasks.Task
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


@dataclasses.dataclass(frozen=True)
class Source:
  """A workdir's checkpoint chosen and its run's config and task built, no array read yet: what
  a command checks a request against (a prompt's tokens, a head's number) before the slow load
  (`restored`)."""

  workdir: str
  config: ml_collections.ConfigDict
  task: tasks.Task
  checkpoint: str  # 'best', 'latest' or a step, as `choose` resolved it
  average_last: int = 1


def resolve(
  workdir: str,
  config: ml_collections.ConfigDict | None = None,
  *,
  checkpoint: str = '',
  average_last: int = 1,
  eval_lengths=(),
) -> Source:
  """The checkpoint of `workdir` a command reads (see `choose`) and the run's config and task.
  Nothing is written to the workdir: the task is built in a staging copy of its vocabulary.

  Args:
    workdir: a training workdir.
    config: the config to build the model with; None = the workdir's (`read_config`).
    checkpoint: 'best', 'latest', a step or '' (see `choose`).
    average_last: how many newest checkpoints to average (1 = none).
    eval_lengths: language models: also evaluate rows of these lengths (see `eval_config`).

  Raises:
    FileNotFoundError: `workdir` is not a directory or holds no checkpoint.
    ValueError: a bad choice, a config that does not validate.
  """
  if not os.path.isdir(workdir):
    raise FileNotFoundError(f'--workdir={workdir} does not exist; give a training workdir.')
  chosen = choose(workdir, checkpoint, average_last)
  # A run stopped before its first regular checkpoint may have a best one only.
  if chosen != 'best':
    checkpoints = reader(layout.checkpoints_dir(workdir))
    try:
      if not checkpoints.steps():
        raise FileNotFoundError(
          f'No checkpoint in {checkpoints.directory}; train first with '
          f'python train.py --config=... --workdir={workdir}.'
        )
    finally:
      checkpoints.close()
  trained = read_config(workdir)
  config = eval_config(config or trained, eval_lengths)
  for note in swap_notes(trained.model, config.model, config.dataset.get('seq_length')):
    logging.warning('%s', note)
  with workdir_lib.staging(workdir) as staged:  # eval.py writes into eval/ only
    task = tasks.build(config, staged)
  return Source(workdir, config, task, chosen, average_last)


def restored(source: Source, *, host: bool = False) -> Restored:
  """`source`'s checkpoint read straight into the model's shapes (`readable_state`: no random
  init, no optimizer state), its parameters averaged over the `average_last` newest checkpoints
  up to it; with `host`, as NumPy arrays on no device (`Checkpointer.restore`).

  Raises:
    ValueError: too few checkpoints to average.
    CheckpointMismatchError: the checkpoint is of another model than the config's.
  """
  config, chosen = source.config, source.checkpoint
  mesh = sharding.make_mesh(config.mesh)
  like = readable_state(config, source.task, mesh)
  if chosen == 'best':
    best = reader(layout.best_dir(source.workdir))
    try:
      state, _ = best.restore(like, host=host)
    finally:
      best.close()
    step = int(jax.device_get(state.step))
  else:
    checkpoints = reader(layout.checkpoints_dir(source.workdir))
    try:
      step = None if chosen == 'latest' else int(chosen)
      state, step = averaged(like, checkpoints, step, source.average_last, host=host)
    finally:
      checkpoints.close()
  logging.info('Evaluating step %d (--checkpoint=%s).', step, chosen)
  return Restored(config, source.task, mesh, state, step, chosen)


def for_evaluation(
  workdir: str,
  config: ml_collections.ConfigDict | None,
  *,
  checkpoint: str = '',
  average_last: int = 1,
  eval_lengths=(),
) -> Restored:
  """The run of `workdir` rebuilt and restored at `checkpoint`: `restored(resolve(...))`, for a
  command with nothing to check in between."""
  return restored(
    resolve(
      workdir,
      config,
      checkpoint=checkpoint,
      average_last=average_last,
      eval_lengths=eval_lengths,
    )
  )


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


def newest(workdir: str):
  """`(task, train state, mesh)` of the newest readable checkpoint of a training workdir (its
  parameters: no optimizer state)."""
  config = read_config(workdir)
  with workdir_lib.staging(workdir) as staged:
    task = tasks.build(config, staged)
  mesh = sharding.make_mesh(config.mesh)
  checkpoints = reader(layout.checkpoints_dir(workdir))
  try:
    state, _ = checkpoints.restore(readable_state(config, task, mesh))
  finally:
    checkpoints.close()
  return task, state, mesh
