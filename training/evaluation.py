"""Evaluation over a split, for any task: summed counts, then predictions of chosen examples."""

import functools
from typing import Any, Callable

import jax
from jax.experimental import multihost_utils
import numpy as np

from tasks import EvalOptions, Task
from training import sharding
from training.steps import TrainState, eval_step, merge_model


def _gather(array) -> np.ndarray:
  """A global array as one NumPy array on every host."""
  return np.asarray(multihost_utils.process_allgather(array, tiled=True))


# Module-level, with the task's counts function static, so every validation of a run reuses the
# compiled step (a fresh jit wrapper per call would recompile it each time).
_eval_step = jax.jit(eval_step, static_argnames='counts_fn')


def summed_counts(
  state: TrainState,
  task: Task,
  split: str,
  *,
  batch_size: int,
  mesh,
  step: Callable[[TrainState, Any], dict] | None = None,
  max_examples: int = 0,
) -> dict:
  """The task's counts summed over the split's batches, each batch's from `step(state, batch)`:
  by default the task's `eval_counts` (no dropout); a caller's own step may edit the model first
  (`interpret.split_sweep` zeroes heads). `max_examples` > 0: the first batches only, until
  they hold that many examples (`batches_holding` counts them)."""
  step = step or functools.partial(_eval_step, counts_fn=task.eval_counts)
  totals: dict[str, float] = {}
  for batch in batches_holding(task, split, batch_size, max_examples):
    add_counts(totals, step(state, sharding.shard_batch(batch, mesh)))
  return totals


def add_counts(totals: dict, counts: dict) -> None:
  """Adds a batch's counts (device arrays) into `totals`, key by key."""
  for key, value in jax.device_get(counts).items():
    totals[key] = totals.get(key, 0) + value


def batches_holding(task: Task, split: str, batch_size: int, max_examples: int = 0):
  """The split's batches in order, all of them, or with `max_examples` > 0 the first ones until
  they hold at least that many examples (padding rows, index -1, are none)."""
  seen = 0
  for batch in task.batches(split, batch_size=batch_size, shuffle=False, seed=0, num_epochs=1):
    if max_examples and seen >= max_examples:
      return
    seen += int(np.sum(np.asarray(batch['index']) >= 0))
    yield batch


def split_metrics(state: TrainState, task: Task, split: str, *, batch_size: int, mesh) -> dict:
  """The task's metrics of its counts summed over the whole split (no dropout), and those of
  each of the split's views (`Task.split_views`), their names suffixed ('loss@256')."""
  metrics = task.summarize(summed_counts(state, task, split, batch_size=batch_size, mesh=mesh))
  for suffix, view in task.split_views(split).items():
    totals = summed_counts(state, task, view, batch_size=batch_size, mesh=mesh)
    metrics.update({f'{key}{suffix}': value for key, value in task.summarize(totals).items()})
  return metrics


def predict_split(
  state: TrainState, task: Task, split: str, *, batch_size: int, mesh, options: EvalOptions
) -> list[dict[str, Any]]:
  """The task's records of the first `options.max_examples` examples of `split` (all if 0).

  Returns:
    One record per example (see `Task.sample`), in split order.
  """
  # Batches come sorted by length; choosing by index keeps the sample unbiased by length.
  batches = list(task.batches(split, batch_size=batch_size, shuffle=False, seed=0, num_epochs=1))
  kept = sorted(int(i) for batch in batches for i in batch['index'] if i >= 0)
  wanted = set(kept[: options.max_examples] if options.max_examples > 0 else kept)
  model, records = merge_model(state), []
  for batch in batches:
    if wanted.isdisjoint(batch['index'].tolist()):
      continue
    predictions = task.predict(model, sharding.shard_batch(batch, mesh), options)
    # This host's rows of the global batch (multi-host: each host reports on its own rows).
    rows = len(batch['index'])
    mine = slice(jax.process_index() * rows, (jax.process_index() + 1) * rows)
    predictions = {key: _gather(value)[mine] for key, value in predictions.items()}
    for row, index in enumerate(batch['index'].tolist()):
      if index in wanted:
        fields = {key: value[row] for key, value in {**batch, **predictions}.items()}
        records.append(task.sample(split, {**fields, 'index': index}))
  return sorted(records, key=lambda record: record['index'])


def evaluate(
  state: TrainState, task: Task, split: str, *, batch_size: int, mesh, options: EvalOptions | None
) -> tuple[dict, list[dict[str, Any]]]:
  """Metrics of the split's counts and, unless `options` is None, of its predictions.

  Returns:
    (metrics, the prediction records).
  """
  metrics = split_metrics(state, task, split, batch_size=batch_size, mesh=mesh)
  if options is None:
    return metrics, []
  records = predict_split(state, task, split, batch_size=batch_size, mesh=mesh, options=options)
  metrics.update(task.prediction_metrics(records))
  return metrics, records
