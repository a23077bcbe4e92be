"""train_and_evaluate: the training loop behind train.py (its phases: training/run_phases.py)."""

import contextlib
import functools
import os

from absl import logging
import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp

import tasks
from training import init_from as init_from_lib
from training import layout, run_phases, sharding
from training import workdir as workdir_lib
from training.checkpoints import Checkpointer
from training.config import swap_notes, validate
from training.setup import abstract_state
from training.steps import train_step


def train_and_evaluate(config, workdir: str, init_from=None) -> dict:
  """Trains `config` in `workdir`, resuming from its newest checkpoint, and evaluates it.

  Nothing is written into `workdir` until the config has been checked against what it holds
  (its vocabulary and checkpoints, or `init_from`'s): a refused run leaves it as it was.
  Process 0 holds the workdir's lock for the job; its log, and the traceback of a failure once
  the run was accepted, go to WORKDIR/train.log.

  Args:
    config: the experiment config (see training/config.py for every field).
    workdir: where config.json, checkpoints/, metrics.jsonl, tensorboard/, train.log and what
      the task saves (e.g. vocab/) go.
    init_from: `config.init_from` resolved into a source (`sources.resolve`, as train.py does),
      whose parameters a new run starts from; None when `config.init_from` is ''.

  Returns:
    The last validation metrics.
  """
  sharding.initialize_distributed()  # a cluster launcher's job; before anything sees devices
  validate(config)
  if bool(config.init_from) != (init_from is not None):
    raise ValueError(
      f'config.init_from={config.init_from!r} and the source given disagree; resolve it with '
      'sources.resolve_init_from(config), as train.py does.'
    )
  with (
    workdir_lib.run_log() as log,
    workdir_lib.held(workdir) if jax.process_index() == 0 else contextlib.nullcontext(),
  ):
    task = _accept(config, workdir, log, init_from)
    return _train(config, workdir, task, init_from)


def _accept(config, workdir: str, log: workdir_lib.Log, init_from):
  """The task, once process 0 has checked `config` against the workdir and written its config,
  vocabulary and log there; the other processes then read the vocabulary it saved.

  Raises:
    FileNotFoundError: `init_from` holds no checkpoint.
    CheckpointMismatchError: the workdir's (or `init_from`'s) checkpoint is of another model.
  """
  task = None
  if jax.process_index() == 0:
    with contextlib.ExitStack() as stack:
      vocabularies = [workdir]
      if init_from is not None:  # its vocabulary: its embeddings mean something with its ids only
        vocabularies.append(stack.enter_context(init_from.vocabulary()))
      staged = stack.enter_context(workdir_lib.staging(*vocabularies))
      task = tasks.build(config, staged)
      like = abstract_state(config, task)
      reader = Checkpointer(
        layout.checkpoints_dir(workdir), max_to_keep=None, create=False, local=True
      )
      try:
        step = reader.newest_matching(like)
      finally:
        reader.close()
      if step is None and init_from is not None:
        init_from_lib.check(config, like, init_from)
      trained = init_from.model_fields if init_from is not None else {}
      for note in swap_notes(trained, config.model, config.dataset.get('seq_length')):
        logging.warning('%s', note)
      workdir_lib.record_config(workdir, config, step or 0)
      workdir_lib.commit_vocab(staged, workdir)
    log.to_file(os.path.join(workdir, layout.LOG_FILE))
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices('attend: data and vocabularies prepared')
  return task if task is not None else tasks.build(config, workdir)


def _train(config, workdir: str, task, init_from) -> dict:
  """The training loop of an accepted run: start (resume, fine-tune or initialise), then steps,
  each logged, evaluated and checkpointed when due, until the last step, a stop signal or the
  patience runs out."""
  run = run_phases.Run(config, workdir, task)
  try:
    state = run.start(init_from)
    step_fn = jit_train_step(config, task, state, run.mesh)
    # Every step gets this key and folds its state.step into it (training.steps.train_step).
    dropout_key = jax.random.key(config.seed + 1)
    first_step = step = int(jax.device_get(state.step))
    if step == 0:
      run.begin(state)
    while (
      step < config.num_train_steps
      and run.stop.signal is None
      and not run.best.exhausted(config.patience)
    ):
      state, step = run.step(state, step, step == first_step, step_fn, dropout_key)
      run.log(step)
      evaluated = run_phases.evaluates(config, step)
      if evaluated:  # before the checkpoint of this step, whose metadata holds the best so far
        run.evaluate(state, step)
      if (
        step % config.checkpoint_every_steps == 0
        or step == config.num_train_steps
        or (evaluated and run.best.exhausted(config.patience))
      ):
        run.save(state)
    if run.stop.signal is not None:
      logging.info('%s received: saving step %d and exiting.', run.stop.signal, step)
      run.save(state)
    run.finish()
  except Exception as error:
    if workdir_lib.is_disk_full(error):
      raise workdir_lib.DiskFullError(
        f'The disk holding {workdir} is full (no space left on device) at step {run.step_done}; '
        f'free space and rerun the same command ({run_phases.newest_sentence(run.checkpointer)}).'
      ) from error
    raise
  finally:
    run.close()
  return run.eval_metrics


def jit_train_step(config, task, state, mesh):
  """`train_step` for `task`, jitted as the loop runs it: `(state, batch, dropout_key) -> (state,
  metrics)`, the run's one key at every step (the step folds in its step number), the state
  donated and kept in the shardings it has (`build_state` placed it: with FSDP the parameters and
  moments stay split), the metrics replicated on `mesh`."""
  state_shardings = jax.tree.map(lambda x: x.sharding, state)  # as build_state placed it
  return jax.jit(
    functools.partial(train_step, loss_fn=task.loss, dtype=jnp.dtype(config.dtype)),
    out_shardings=(state_shardings, sharding.replicated(mesh)),
    donate_argnums=0,
  )
