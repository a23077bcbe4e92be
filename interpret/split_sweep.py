"""A task's metrics over a split with each attention head zeroed in turn (eval.py --ablate_heads).

A head is ablated by zeroing its output (`<layer>/heads`, before the output projection), so the
layer goes on with the other heads' contributions only. Batch by batch, a clean pass keeps what
each block passes on (its `residual` tap); then each layer's heads run as one call of the
engine (`interpret.heads.program`: a mask per head, vmapped, driven by the engine's loop
`measure_rows`), the blocks below the layer's segment given their clean outputs, which XLA then
does not compute. A segment is a quarter of the layers: one compile each, where a program per
layer would trace the model once per layer.
"""

import functools
import json
import math
import os

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from interpret import figures
from interpret import heads as heads_lib
from models import interventions
from tasks import Task
from training import evaluation, sharding
from training.steps import TrainState, merge_model

MAIN_METRICS = ('accuracy', 'token_accuracy', 'sequence_accuracy', 'loss')  # the first present
JSON_FILE, PICTURE_FILE = 'head_ablation.json', 'head_ablation.png'
SEGMENTS = 4  # programs per sweep: the layers below a segment's first are not computed


@functools.partial(jax.jit, static_argnames='counts_fn')
def _clean(state: TrainState, batch, *, counts_fn):
  """The task's counts of a batch with no head ablated, and what each block passed on (its
  `residual` taps)."""
  model = merge_model(state)
  with interventions.editing(model) as run:
    counts = counts_fn(model, batch)
  return counts, {name: v for name, v in run.captured.items() if name.endswith('/residual')}


def sweep(
  state: TrainState, task: Task, split: str, *, batch_size: int, mesh, max_examples: int = 0
) -> dict:
  """The split's metrics with no head ablated and with each head of each layer ablated alone,
  with a progress line every `Progress.EVERY_SECONDS` (and at the end). `max_examples` > 0:
  over the split's first batches that hold that many examples, in batches of no more rows than
  that (rounded up to the data shards).

  Returns:
    `{'metric': the main one (the first of MAIN_METRICS the task reports), 'unablated': its
    value, 'examples': how many the metrics read, 'layers': {path: {head: value}},
    'all_metrics': the same with every metric}`.

  Raises:
    ValueError: the model has no multi-head attention layer.
  """
  model = merge_model(state)
  layers = heads_lib.heads_per_layer(model)
  if not layers:
    raise ValueError(
      '--ablate_heads needs a model with multi-head attention layers (the '
      'Transformer family); this one has none.'
    )
  paths, n = list(layers), max(layers.values())
  if max_examples:  # no rows past them: a head costs a pass over every row of a batch
    shards = sharding.batch_shards(dict(mesh.shape)) if mesh is not None else 1
    batch_size = min(batch_size, -(-max_examples // shards) * shards)
  batches = list(evaluation.batches_holding(task, split, batch_size, max_examples))
  examples = sum(int(np.sum(np.asarray(batch['index']) >= 0)) for batch in batches)
  heads_total = sum(layers.values())
  logging.info(
    'Head ablation: %d heads, each over %d examples of %s.', heads_total, examples, split
  )
  run = heads_lib.program(model, task.eval_counts)
  zeros = [jnp.zeros((1, 1, 1, 1))] * len(paths)
  every = math.ceil(len(paths) / SEGMENTS)
  rows = [[(layer, head)] for layer, heads in enumerate(layers.values()) for head in range(heads)]
  say = lambda line: logging.info('%s', line)  # a real model has 270 heads: lines as it goes
  pace = heads_lib.Pace(heads_total * len(batches), say, per=len(batches))  # heads over the split
  base_totals, totals = {}, {path: [{} for _ in range(heads)] for path, heads in layers.items()}
  for number, batch in enumerate(batches, 1):
    batch = sharding.shard_batch(batch, mesh)
    counts, residuals = _clean(state, batch, counts_fn=task.eval_counts)
    evaluation.add_counts(base_totals, counts)

    def measure(masks, batch=batch, residuals=residuals):  # a call's first layer's segment kept
      first = int(np.flatnonzero(masks.any(axis=(0, 2)))[0])
      kept = heads_lib.residuals_below(paths[first - first % every], residuals)
      return run(batch, masks, zeros, kept)

    def line(done, call, number=number):  # the layer the call reached
      path = paths[max(row[0][0] for row in call if row)]
      return f'Head ablation: batch {number}/{len(batches)}, {path}'

    counts = heads_lib.measure_rows(rows, (len(paths), n), measure, pace=pace, what=line)
    for row, ((layer, head),) in enumerate(rows):
      evaluation.add_counts(totals[paths[layer]][head], {k: v[row] for k, v in counts.items()})
  summarize = lambda counts: {k: float(v) for k, v in task.summarize(counts).items()}
  base = summarize(base_totals)
  metric = next(name for name in MAIN_METRICS if name in base)
  every_metric = {
    path: {str(head): summarize(counts) for head, counts in enumerate(heads)}
    for path, heads in totals.items()
  }
  return dict(
    metric=metric,
    unablated=base[metric],
    split=split,
    examples=examples,
    layers={
      path: {head: values[metric] for head, values in heads.items()}
      for path, heads in every_metric.items()
    },
    all_metrics=dict(unablated=base, layers=every_metric),
  )


def write(result: dict, out_dir: str) -> list[str]:
  """Writes `result` (from `sweep`) as head_ablation.json and its layers x heads PNG."""
  json_path = os.path.join(out_dir, JSON_FILE)
  with open(json_path, 'w', encoding='utf-8') as f:
    json.dump(result, f, indent=2)
  paths = list(result['layers'])
  width = max(len(heads) for heads in result['layers'].values())
  grid = np.full((len(paths), width), np.nan)
  for row, path in enumerate(paths):
    for head, value in result['layers'][path].items():
      grid[row, int(head)] = value
  picture = figures.save_head_map(
    os.path.join(out_dir, PICTURE_FILE),
    grid,
    title=f'{result["metric"]} with one head ablated (none: {result["unablated"]:.3g})',
    label=result['metric'],
    rows=paths,
    xlabel='head ablated',
    diverging=False,
  )
  return [json_path, picture]
