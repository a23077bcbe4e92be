"""The phases of an accepted run's training loop (training/loop.py's `_train`): its start
(resume, fine-tune or initialise), a step, its log line, an evaluation with model selection, a
checkpoint, and the closing of its files."""

import contextlib
import signal
import time

from absl import logging
import jax
import numpy as np

import tasks
from training import allocator, evaluation, layout, profiling, sharding
from training import init_from as init_from_lib
from training.checkpoints import Checkpointer
from training.metrics import MetricsWriter, Progress
from training.selection import Best, metric_for
from training.setup import build_state, shaped_state
from training.steps import TrainState, parameter_count


class StopRequest:
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


class Run:
  """An accepted run's live parts, and the phases of its loop (`_train`): its checkpointers,
  batches, best checkpoint so far, metrics writer, progress line and stop request."""

  def __init__(self, config, workdir: str, task):
    self.config, self.task = config, task
    self.mesh = sharding.make_mesh(config.mesh)
    self.checkpointer = Checkpointer(
      layout.checkpoints_dir(workdir), max_to_keep=config.keep_checkpoints
    )
    self.best_checkpointer = Checkpointer(layout.best_dir(workdir), max_to_keep=1)
    self.batches = task.batches(
      config.dataset.train_split,
      batch_size=config.dataset.batch_size,
      shuffle=True,
      seed=config.seed,
    )
    self.best = Best(metric_for(config, task))
    self.writer = MetricsWriter(workdir)
    self.stop = StopRequest()
    self.trace = profiling.StepTrace(config.profile_steps, workdir)  # '' = off
    self.eval_metrics = {}
    self.pending = []  # the step metrics not fetched yet
    self.shown = 0  # how many of `pending` an interim progress line has counted
    self.step_done = 0
    self.progress = None

  def start(self, init_from) -> TrainState:
    """The first state: the workdir's checkpoint (resumed), the source's parameters (a
    fine-tune: init_from.initial_state) or a fresh one. The first two are read straight into
    the state's shapes: neither is initialised at random first."""
    config, task, mesh = self.config, self.task, self.mesh
    restored = self.checkpointer.restore(shaped_state(config, task, mesh))
    if restored:
      state, meta = restored
      self.batches.set_state(meta['data'])
      self.best = Best.from_meta(meta.get('best'), self.best.metric)
      best = self.best
      logging.info(
        'Resumed from step %d in %s (best %s so far: %s).',
        int(state.step),
        self.checkpointer.directory,
        best.metric,
        f'{best.value:.4g} at step {best.step}' if best.step >= 0 else 'none',
      )
      _drop_skipped_newer(self.checkpointer, int(state.step))
    elif init_from is not None:
      state = init_from_lib.initial_state(config, task, mesh, init_from)
    else:
      state = build_state(config, task, mesh)
    _forget_other_bests(self.best_checkpointer, self.best)
    self.step_done = int(jax.device_get(state.step))
    self.progress = Progress(self.step_done, config.num_train_steps, task.unit)
    return state

  def begin(self, state: TrainState) -> None:
    """Step 0 of a new run: its parameter count and, with config.eval_at_start, the metrics of
    the model it starts from."""
    config = self.config
    self.writer.write(0, 'model', dict(parameters=parameter_count(state.params)))
    if config.eval_at_start:
      started = time.perf_counter()
      metrics = _evaluate(config, state, self.task, self.mesh)
      self.writer.write(0, config.dataset.eval_split, metrics)
      # What tracing the evaluation kept (jaxprs, lowered modules: about 200 MiB for SmolLM2)
      # would otherwise sit under every step; dropped before the step is traced, its memory
      # serves the step's tracing. The next evaluation traces again (about 6 s for SmolLM2).
      jax.clear_caches()
      self.progress.pause(time.perf_counter() - started)

  def step(self, state, step: int, first: bool, step_fn, dropout_key):
    """One train step on the next batch; the first compiles, timed apart from the rates."""
    config = self.config
    batch = next(self.batches)
    if first:
      _warn_if_batch_exceeds_split(config, batch)
      logging.info('Compiling the train step...')
      started = time.perf_counter()
    self.trace.before(step, state)
    # The first call compiles: XLA's working memory goes back to the system as it is freed.
    # Before an evaluation the step's buffer goes back too, so the evaluation's buffers do not
    # stack on it (one step in `eval_every_steps` faults its buffer in afresh).
    purged = first or evaluates(config, step + 1)
    with allocator.purging() if purged else contextlib.nullcontext():
      state, metrics = step_fn(state, sharding.shard_batch(batch, self.mesh), dropout_key)
      if first:
        jax.block_until_ready(metrics)
    if first:
      compiled = time.perf_counter() - started
      logging.info('Compiled the train step in %.1f s.', compiled)
      self.progress.pause(compiled, steps=1)
    self.pending.append(metrics)
    step += 1
    self.step_done = step
    self.trace.after(step, state)
    return state, step

  def log(self, step: int) -> None:
    """The train metrics of the steps since the last line, when a line is due."""
    config, task = self.config, self.task
    if (
      step % config.log_every_steps == 0
      or step == config.num_train_steps
      or (config.eval_at_start and step == 1)
    ):
      already = self.shown  # counted by an interim line
      fetched = self.flush()
      summary = _train_summary(task, fetched)
      counted = sum(m[task.unit] for m in fetched[already:])
      summary.update(self.progress.update(step, counted, summary))
      self.writer.write(step, 'train', summary)
    elif self.progress.due():  # a slow run's line between its logged steps: rates and ETA only
      pending = jax.device_get(self.pending[self.shown :])
      self.progress.update(step, sum(m[task.unit] for m in pending), {})
      self.shown = len(self.pending)

  def flush(self) -> list[dict]:
    """Fetches the pending step metrics; raises on the first non-finite step among them."""
    fetched = jax.device_get(self.pending)
    self.pending.clear()
    self.shown = 0
    for offset, metrics in enumerate(fetched):
      if not metrics['finite']:
        bad_step = self.step_done - len(fetched) + offset + 1
        raise FloatingPointError(
          f'Non-finite loss or gradient at step {bad_step}; stopped without saving it '
          f'({newest_sentence(self.checkpointer)}). Lower config.learning_rate or set '
          'config.grad_clip.'
        )
    return fetched

  def evaluate(self, state, step: int) -> None:
    """Validation metrics; a better model saved as the best; patience counted."""
    config, best = self.config, self.best
    started = time.perf_counter()
    self.eval_metrics = _evaluate(config, state, self.task, self.mesh)
    self.progress.pause(time.perf_counter() - started)
    self.best, improved = best.update(step, self.eval_metrics)
    if improved:
      self.flush()
      self.best_checkpointer.save(state, self._meta())
    self.writer.write(step, config.dataset.eval_split, {**self.eval_metrics, **self.best.line()})
    if self.best.exhausted(config.patience):
      logging.info(
        'No better %s in %d evaluations since step %d (config.patience): stopping at step %d.',
        self.best.metric,
        self.best.stale,
        self.best.step,
        step,
      )

  def save(self, state) -> None:
    """A checkpoint of `state`, after the best it names is on disk."""
    self.flush()
    self.best_checkpointer.wait()
    self.checkpointer.save(state, self._meta())

  def _meta(self) -> dict:
    return dict(data=self.batches.get_state(), best=self.best.to_meta())

  def finish(self) -> None:
    """Waits for the last (asynchronous) saves: a failed one surfaces here."""
    self.best_checkpointer.wait()
    self.checkpointer.wait()

  def close(self) -> None:
    """Stops the trace and the signal handling and closes the files, reporting (not raising) a
    failure while closing: a run failing already reports its first error."""
    self.trace.stop()
    self.stop.restore()
    for close in (
      self.best_checkpointer.wait,
      self.best_checkpointer.close,
      self.checkpointer.wait,
      self.checkpointer.close,
      self.writer.close,
    ):
      try:
        close()
      except Exception as error:  # pylint: disable=broad-except
        logging.warning('While stopping: %s: %s', type(error).__name__, error)


def evaluates(config, step: int) -> bool:
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


def newest_sentence(checkpointer: Checkpointer) -> str:
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
