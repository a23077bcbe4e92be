"""train_and_evaluate: the training loop behind train.py."""

import contextlib
import functools
import os
import signal
import time

from absl import logging
import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import numpy as np

import tasks
from training import allocator, evaluation, layout, profiling, sharding
from training import init_from as init_from_lib
from training import workdir as workdir_lib
from training.checkpoints import Checkpointer
from training.config import swap_notes, validate
from training.metrics import MetricsWriter, Progress
from training.selection import Best, metric_for
from training.setup import abstract_state, build_state, shaped_state
from training.steps import parameter_count, train_step


class _StopRequest:
  """Turns SIGTERM/SIGINT into a flag the loop checks after each step (then saves and exits)."""

  def __init__(self):
    self.signal = None
    self._previous = {
      sig: signal.signal(sig, self._handle) for sig in (signal.SIGTERM, signal.SIGINT)
    }

  def _handle(self, signum, frame):
    del frame
    self.signal = signal.Signals(signum).name

  def restore(self):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)


def train_and_evaluate(config, workdir: str) -> dict:
  """Trains `config` in `workdir`, resuming from its newest checkpoint, and evaluates it.

  Nothing is written into `workdir` until the config has been checked against what it holds
  (its vocabulary and checkpoints, or `config.init_from`'s): a refused run leaves it as it was.
  Process 0 holds the workdir's lock for the job; its log, and the traceback of a failure once
  the run was accepted, go to WORKDIR/train.log.

  Args:
    config: the experiment config (see training/config.py for every field).
    workdir: where config.json, checkpoints/, metrics.jsonl, tensorboard/, train.log and what
      the task saves (e.g. vocab/) go.

  Returns:
    The last validation metrics.
  """
  sharding.initialize_distributed()  # a cluster launcher's job; before anything sees devices
  validate(config)
  with (
    workdir_lib.run_log() as log,
    workdir_lib.held(workdir) if jax.process_index() == 0 else contextlib.nullcontext(),
  ):
    task = _accept(config, workdir, log)
    return _train(config, workdir, task)


def _accept(config, workdir: str, log: workdir_lib.Log):
  """The task, once process 0 has checked `config` against the workdir and written its config,
  vocabulary and log there; the other processes then read the vocabulary it saved.

  Raises:
    FileNotFoundError: `config.init_from` is not a training workdir.
    CheckpointMismatchError: the workdir's (or `init_from`'s) checkpoint is of another model.
  """
  task = None
  if jax.process_index() == 0:
    with contextlib.ExitStack() as stack:
      sources = [workdir]
      if config.init_from:  # its vocabulary: its embeddings mean something with its ids only
        sources.append(stack.enter_context(init_from_lib.vocab_source(config.init_from)))
      staged = stack.enter_context(workdir_lib.staging(*sources))
      task = tasks.build(config, staged)
      like = abstract_state(config, task)
      reader = Checkpointer(
        layout.checkpoints_dir(workdir), max_to_keep=None, create=False, local=True
      )
      try:
        step = reader.newest_matching(like)
      finally:
        reader.close()
      trained = init_from_lib.trained_model_fields(config.init_from) if config.init_from else {}
      if step is None and config.init_from:
        pretrained_like = None
        if not init_from_lib.is_workdir(config.init_from):
          checkpoint_config = init_from_lib.checkpoint_config(config, config.init_from, trained)
          pretrained_like = abstract_state(checkpoint_config, task)
        init_from_lib.check_init_from(config, like, pretrained_like)
      for note in swap_notes(trained, config.model, config.dataset.get('seq_length')):
        logging.warning('%s', note)
      workdir_lib.record_config(workdir, config, step or 0)
      workdir_lib.commit_vocab(staged, workdir)
    log.to_file(os.path.join(workdir, layout.LOG_FILE))
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices('attend: data and vocabularies prepared')
  return task if task is not None else tasks.build(config, workdir)


def _train(config, workdir: str, task) -> dict:
  """The training loop of an accepted run: restore or initialise, train, checkpoint, evaluate."""
  mesh = sharding.make_mesh(config.mesh)
  checkpointer = Checkpointer(layout.checkpoints_dir(workdir), max_to_keep=config.keep_checkpoints)
  batches = task.batches(
    config.dataset.train_split, batch_size=config.dataset.batch_size, shuffle=True, seed=config.seed
  )
  best_checkpointer = Checkpointer(layout.best_dir(workdir), max_to_keep=1)
  best = Best(metric_for(config, task))
  # A resumed run reads its checkpoint straight into the state's shapes, a fine-tune its
  # init_from's parameters (init_from.initial_state): neither is initialised at random first.
  restored = checkpointer.restore(shaped_state(config, task, mesh))
  if restored:
    state, meta = restored
    batches.set_state(meta['data'])
    best = Best.from_meta(meta.get('best'), best.metric)
    logging.info(
      'Resumed from step %d in %s (best %s so far: %s).',
      int(state.step),
      checkpointer.directory,
      best.metric,
      f'{best.value:.4g} at step {best.step}' if best.step >= 0 else 'none',
    )
    _drop_skipped_newer(checkpointer, int(state.step))
  elif config.init_from:
    state = init_from_lib.initial_state(config, task, mesh)
  else:
    state = build_state(config, task, mesh)
  _forget_other_bests(best_checkpointer, best)

  step_fn = jit_train_step(config, task, state, mesh)
  # Every step gets this key and folds its state.step into it (training.steps.train_step).
  dropout_key = jax.random.key(config.seed + 1)
  writer = MetricsWriter(workdir)
  first_step = step = int(jax.device_get(state.step))
  progress, pending = Progress(first_step, config.num_train_steps, task.unit), []
  shown = 0  # how many of `pending` an interim progress line has counted
  stop = _StopRequest()
  eval_metrics = {}
  trace = profiling.StepTrace(config.profile_steps, workdir)  # config.profile_steps: '' = off

  def flush_train_metrics():
    """Fetches the pending step metrics; raises on the first non-finite step among them."""
    nonlocal shown
    fetched = jax.device_get(pending)
    pending.clear()
    shown = 0
    for offset, metrics in enumerate(fetched):
      if not metrics['finite']:
        bad_step = step - len(fetched) + offset + 1
        raise FloatingPointError(
          f'Non-finite loss or gradient at step {bad_step}; stopped without saving it '
          f'({_newest(checkpointer)}). Lower config.learning_rate or set config.grad_clip.'
        )
    return fetched

  try:
    if step == 0:
      writer.write(0, 'model', dict(parameters=parameter_count(state.params)))
      if config.eval_at_start:
        started = time.perf_counter()
        writer.write(0, config.dataset.eval_split, _evaluate(config, state, task, mesh))
        # What tracing the evaluation kept (jaxprs, lowered modules: about 200 MiB for SmolLM2)
        # would otherwise sit under every step; dropped before the step is traced, its memory
        # serves the step's tracing. The next evaluation traces again (about 6 s for SmolLM2).
        jax.clear_caches()
        progress.pause(time.perf_counter() - started)
    while (
      step < config.num_train_steps and stop.signal is None and not best.exhausted(config.patience)
    ):
      batch = next(batches)
      if step == first_step:
        _warn_if_batch_exceeds_split(config, batch)
        logging.info('Compiling the train step...')
        started = time.perf_counter()
      trace.before(step, state)
      # The first call compiles: XLA's working memory goes back to the system as it is freed.
      # Before an evaluation the step's buffer goes back too, so the evaluation's buffers do not
      # stack on it (one step in `eval_every_steps` faults its buffer in afresh).
      purged = step == first_step or _evaluates(config, step + 1)
      with allocator.purging() if purged else contextlib.nullcontext():
        state, metrics = step_fn(state, sharding.shard_batch(batch, mesh), dropout_key)
        if step == first_step:
          jax.block_until_ready(metrics)
      if step == first_step:
        compiled = time.perf_counter() - started
        logging.info('Compiled the train step in %.1f s.', compiled)
        progress.pause(compiled, steps=1)
      pending.append(metrics)
      step += 1
      trace.after(step, state)
      if (
        step % config.log_every_steps == 0
        or step == config.num_train_steps
        or (config.eval_at_start and step == 1)
      ):
        already = shown  # counted by an interim line
        fetched = flush_train_metrics()
        summary = _train_summary(task, fetched)
        counted = sum(m[task.unit] for m in fetched[already:])
        summary.update(progress.update(step, counted, summary))
        writer.write(step, 'train', summary)
      elif progress.due():  # a slow run's line between its logged steps: rates and ETA only
        progress.update(step, sum(m[task.unit] for m in jax.device_get(pending[shown:])), {})
        shown = len(pending)
      evaluated = _evaluates(config, step)
      if evaluated:  # before the checkpoint of this step, whose metadata holds the best so far
        started = time.perf_counter()
        eval_metrics = _evaluate(config, state, task, mesh)
        progress.pause(time.perf_counter() - started)
        best, improved = best.update(step, eval_metrics)
        if improved:
          flush_train_metrics()
          best_checkpointer.save(state, dict(data=batches.get_state(), best=best.to_meta()))
        writer.write(step, config.dataset.eval_split, {**eval_metrics, **best.line()})
        if best.exhausted(config.patience):
          logging.info(
            'No better %s in %d evaluations since step %d (config.patience): stopping at step %d.',
            best.metric,
            best.stale,
            best.step,
            step,
          )
      if (
        step % config.checkpoint_every_steps == 0
        or step == config.num_train_steps
        or (evaluated and best.exhausted(config.patience))
      ):
        flush_train_metrics()
        best_checkpointer.wait()  # the metadata below names the best: it is on disk first
        checkpointer.save(state, dict(data=batches.get_state(), best=best.to_meta()))
    if stop.signal is not None:
      flush_train_metrics()
      logging.info('%s received: saving step %d and exiting.', stop.signal, step)
      best_checkpointer.wait()
      checkpointer.save(state, dict(data=batches.get_state(), best=best.to_meta()))
    best_checkpointer.wait()
    checkpointer.wait()  # a failed last (asynchronous) save surfaces here
  except Exception as error:
    if workdir_lib.is_disk_full(error):
      raise workdir_lib.DiskFullError(
        f'The disk holding {workdir} is full (no space left on device) at step {step}; free '
        f'space and rerun the same command ({_newest(checkpointer)}).'
      ) from error
    raise
  finally:
    trace.stop()
    stop.restore()
    for close in (
      best_checkpointer.wait,
      best_checkpointer.close,
      checkpointer.wait,
      checkpointer.close,
      writer.close,
    ):
      try:
        close()
      except Exception as error:  # pylint: disable=broad-except
        # Failing already (e.g. the disk is full): the first error is the one to report.
        logging.warning('While stopping: %s: %s', type(error).__name__, error)
  return eval_metrics


def _evaluates(config, step: int) -> bool:
  """Whether the loop evaluates after `step` steps."""
  return bool(config.eval_every_steps and step % config.eval_every_steps == 0) or (
    step == config.num_train_steps
  )


def _forget_other_bests(best_checkpointer: Checkpointer, best: Best) -> None:
  """Deletes WORKDIR/best/ checkpoints other than `best`'s: a run killed after saving a new best
  but before the checkpoint that records it resumes from an older best, and trains again to it."""
  for step in best_checkpointer.steps():
    if step != best.step:
      logging.info(
        'Removing best/%d: the checkpoint resumed from records best step %s.',
        step,
        best.step if best.step >= 0 else 'none',
      )
      best_checkpointer.delete(step)


def _drop_skipped_newer(checkpointer: Checkpointer, resumed: int) -> None:
  """Deletes the checkpoints newer than the one resumed from: `restore` skipped them as
  unreadable, and a step is saved only once, so a damaged one left in place would outlive the
  run that trains through its step again."""
  for step in checkpointer.steps():
    if step > resumed:
      logging.info('Removing checkpoint %d: it could not be read; this run saves it afresh.', step)
      checkpointer.delete(step)


def _newest(checkpointer: Checkpointer) -> str:
  """Where a rerun of the same command resumes, as the end of a sentence."""
  with contextlib.suppress(Exception):
    checkpointer.wait()
  steps = checkpointer.steps()
  if not steps:
    return 'no checkpoint has been saved yet; a rerun starts from step 0'
  return f'the newest checkpoint is step {steps[-1]}; a rerun resumes from it'


def _warn_if_batch_exceeds_split(config, batch) -> None:
  """A train split smaller than one batch repeats its examples within each batch; say so."""
  examples = len({int(i) for i in batch['index'] if i >= 0})
  size = config.dataset.batch_size
  if examples < len(batch['index']):
    logging.warning(
      'config.dataset.batch_size=%d is larger than the %d example(s) of the %s split '
      '(on this host): every batch repeats them.',
      size,
      examples,
      config.dataset.train_split,
    )


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


def _train_summary(task, fetched: list[dict]) -> dict:
  """Mean loss and gradient norm over the logged steps, and the task's metrics of their counts."""
  counts = {
    key: sum(m[key] for m in fetched)
    for key in fetched[0]
    if key not in ('loss', 'grad_norm', 'finite')
  }
  return dict(
    loss=float(np.mean([m['loss'] for m in fetched])),
    **task.summarize(counts),
    grad_norm=float(np.mean([m['grad_norm'] for m in fetched])),
  )


def _evaluate(config, state, task, mesh) -> dict:
  """Validation metrics: counts over the split, predictions on its first examples."""
  split = config.dataset.eval_split
  options = tasks.EvalOptions(max_examples=config.num_eval_decode, beam_size=1)
  # Its programs and buffers are not the train step's: what they free goes back to the system
  # (SmolLM2's evaluation at the start left 680 MiB resident under the steps otherwise).
  with allocator.purging():
    metrics, _ = evaluation.evaluate(
      state,
      task,
      split,
      batch_size=config.dataset.eval_batch_size,
      mesh=mesh,
      options=options if config.num_eval_decode else None,
    )
  logging.info('%s: %s', split, ' | '.join(f'{k} {v:.4g}' for k, v in metrics.items()))
  return metrics
