"""train_and_evaluate: the training loop behind train.py."""

import functools
import json
import os
import shutil
import signal

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

import tasks
from training import evaluation, sharding
from training.checkpoints import Checkpointer, init_from_workdir, load_matching_params
from training.compare import flatten
from training.config import validate
from training.metrics import MetricsWriter, Progress
from training.setup import build_state
from training.steps import parameter_count, train_step


class _StopRequest:
  """Turns SIGTERM/SIGINT into a flag the loop checks after each step (then saves and exits)."""

  def __init__(self):
    self.signal = None
    self._previous = {sig: signal.signal(sig, self._handle)
                      for sig in (signal.SIGTERM, signal.SIGINT)}

  def _handle(self, signum, frame):
    del frame
    self.signal = signal.Signals(signum).name

  def restore(self):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)


def train_and_evaluate(config, workdir: str) -> dict:
  """Trains `config` in `workdir`, resuming from its newest checkpoint, and evaluates it.

  Args:
    config: the experiment config (see training/config.py for every field).
    workdir: where config.json, checkpoints/, metrics.jsonl, tensorboard/ and what the task
      saves (e.g. vocab/) go.

  Returns:
    The last validation metrics.
  """
  sharding.initialize_distributed()  # a cluster launcher's job; before anything sees devices
  validate(config)
  os.makedirs(workdir, exist_ok=True)
  if jax.process_index() == 0:
    _warn_if_config_changed(workdir, config)
    with open(os.path.join(workdir, 'config.json'), 'w', encoding='utf-8') as f:
      f.write(config.to_json_best_effort(indent=2))

  task = _build_task(config, workdir)
  mesh = sharding.make_mesh(config.mesh)
  state = build_state(config, task, mesh)
  checkpointer = Checkpointer(os.path.join(workdir, 'checkpoints'),
                              max_to_keep=config.keep_checkpoints)
  batches = task.batches(config.dataset.train_split, batch_size=config.dataset.batch_size,
                         shuffle=True, seed=config.seed)
  restored = checkpointer.restore(state)
  if restored:
    state, meta = restored
    batches.set_state(meta['data'])
    logging.info('Resumed from step %d in %s.', int(state.step), checkpointer.directory)
  elif config.init_from:
    state, _, _ = load_matching_params(state, config.init_from)

  step_fn = jit_train_step(config, task, state, mesh)
  dropout_key = jax.random.key(config.seed + 1)
  writer = MetricsWriter(workdir)
  first_step = step = int(jax.device_get(state.step))
  progress, pending = Progress(first_step, config.num_train_steps, task.unit), []
  stop = _StopRequest()
  eval_metrics = {}

  def flush_train_metrics():
    """Fetches the pending step metrics; raises on the first non-finite step among them."""
    fetched = jax.device_get(pending)
    pending.clear()
    for offset, metrics in enumerate(fetched):
      if not metrics['finite']:
        bad_step = step - len(fetched) + offset + 1
        raise FloatingPointError(
            f'Non-finite loss or gradient at step {bad_step}; stopped without saving it (the last '
            f'checkpoint is step {max(checkpointer.steps(), default=0)}). Lower '
            'config.learning_rate or set config.grad_clip.')
    return fetched

  try:
    if step == 0:
      writer.write(0, 'model', dict(parameters=parameter_count(state.params)))
      if config.eval_at_start:
        writer.write(0, config.dataset.eval_split, _evaluate(config, state, task, mesh))
    while step < config.num_train_steps and stop.signal is None:
      batch = sharding.shard_batch(next(batches), mesh)
      state, metrics = step_fn(state, batch, jax.random.fold_in(dropout_key, step))
      pending.append(metrics)
      step += 1
      if (step % config.log_every_steps == 0 or step == config.num_train_steps
          or (config.eval_at_start and step == 1)):
        fetched = flush_train_metrics()
        summary = _train_summary(task, fetched)
        summary.update(progress.update(step, sum(m[task.unit] for m in fetched), summary))
        writer.write(step, 'train', summary)
      if step % config.checkpoint_every_steps == 0 or step == config.num_train_steps:
        flush_train_metrics()
        checkpointer.save(state, dict(data=batches.get_state()))
      if (config.eval_every_steps and step % config.eval_every_steps == 0) or (
          step == config.num_train_steps):
        eval_metrics = _evaluate(config, state, task, mesh)
        writer.write(step, config.dataset.eval_split, eval_metrics)
    if stop.signal is not None:
      flush_train_metrics()
      logging.info('%s received: saving step %d and exiting.', stop.signal, step)
      checkpointer.save(state, dict(data=batches.get_state()))
  finally:
    stop.restore()
    checkpointer.wait()
    checkpointer.close()
    writer.close()
  return eval_metrics


def jit_train_step(config, task, state, mesh):
  """`train_step` for `task`, jitted as the loop runs it: `(state, batch, rng) -> (state,
  metrics)`, the state donated and kept in the shardings it has (`build_state` placed it: with
  FSDP the parameters and moments stay split), the metrics replicated on `mesh`."""
  state_shardings = jax.tree.map(lambda x: x.sharding, state)   # as build_state placed it
  return jax.jit(functools.partial(train_step, loss_fn=task.loss, dtype=jnp.dtype(config.dtype)),
                 out_shardings=(state_shardings, sharding.replicated(mesh)), donate_argnums=0)


def _build_task(config, workdir: str):
  """The task, its data prepared and vocabularies saved by process 0 before the others read them.

  Processes of one job share the workdir (and usually the data directory); preparing in turn
  keeps them from writing the same files at once.
  """
  task = None
  if jax.process_index() == 0:
    if config.init_from:
      _inherit_vocabulary(config.init_from, workdir)
    task = tasks.build(config, workdir)
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices('attend: data and vocabularies prepared')
  return task if task is not None else tasks.build(config, workdir)


def _inherit_vocabulary(init_from: str, workdir: str) -> None:
  """Copies the vocabulary of the run `init_from` names into `workdir`, unless it has one.

  A pretrained model's embeddings are only meaningful with the ids it was trained on.

  Raises:
    FileNotFoundError: `init_from` is not a training workdir (no checkpoints there).
  """
  source_workdir, _ = init_from_workdir(init_from)
  if not os.path.isdir(os.path.join(source_workdir, 'checkpoints')):
    raise FileNotFoundError(f'config.init_from={init_from!r} is not a training workdir (it has no '
                            'checkpoints/); train the model to start from first.')
  source = os.path.join(source_workdir, tasks.VOCAB_DIR)
  target = os.path.join(workdir, tasks.VOCAB_DIR)
  if os.path.isdir(source) and not os.path.exists(target):
    shutil.copytree(source, target)
    logging.info('Copied the vocabulary of %s into %s.', source_workdir, target)


def _warn_if_config_changed(workdir: str, config) -> None:
  """Logs the fields in which `config` differs from the one the workdir was last trained with.

  Resuming is allowed (e.g. more steps), but a run that resumes another experiment's checkpoint
  by mistake should say so.
  """
  path = os.path.join(workdir, 'config.json')
  if not os.path.exists(path):
    return
  with open(path, encoding='utf-8') as f:
    old = flatten(json.load(f))
  new = flatten(json.loads(config.to_json_best_effort()))
  changed = sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))
  if changed:
    logging.warning('This run differs from the config.json of %s in: %s.', workdir,
                    ', '.join(f'{key} {old.get(key)!r} -> {new.get(key)!r}' for key in changed))


def _train_summary(task, fetched: list[dict]) -> dict:
  """Mean loss and gradient norm over the logged steps, and the task's metrics of their counts."""
  counts = {key: sum(m[key] for m in fetched) for key in fetched[0]
            if key not in ('loss', 'grad_norm', 'finite')}
  return dict(loss=float(np.mean([m['loss'] for m in fetched])),
              **task.summarize(counts),
              grad_norm=float(np.mean([m['grad_norm'] for m in fetched])))


def _evaluate(config, state, task, mesh) -> dict:
  """Validation metrics: counts over the split, predictions on its first examples."""
  split = config.dataset.eval_split
  options = tasks.EvalOptions(max_examples=config.num_eval_decode, beam_size=1)
  metrics, _ = evaluation.evaluate(state, task, split, batch_size=config.dataset.eval_batch_size,
                                   mesh=mesh, options=options if config.num_eval_decode else None)
  logging.info('%s: %s', split, ' | '.join(f'{k} {v:.4g}' for k, v in metrics.items()))
  return metrics
