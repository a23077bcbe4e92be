"""Head ablation: the task's metrics over a split with each attention head zeroed in turn.

A head is ablated by zeroing its output (`<layer>/heads`, before the output projection, see
`models.interventions`), so the layer goes on with the other heads' contributions only. Batch by
batch, a clean pass keeps what each block passes on (its `residual` tap); a head of layer i then
runs from layer i on, the blocks below replaced by their clean outputs, which XLA then does not
compute. Which heads are kept is an argument of the step, compiled once per layer.
"""

from collections.abc import Mapping
import functools
import json
import os
import time

from absl import logging
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from models import interventions
from models.attention_layer import MultiHeadAttention
from tasks import Task
from tasks.pictures import new_figure
from training import evaluation, sharding
from training.metrics import Progress, duration
from training.steps import TrainState, merge_model

MAIN_METRICS = ('accuracy', 'token_accuracy', 'sequence_accuracy', 'loss')  # the first present
JSON_FILE, PICTURE_FILE = 'head_ablation.json', 'head_ablation.png'


def attention_layers(model: nnx.Module) -> dict[str, int]:
  """`{path: heads}` of the model's multi-head attention layers, in the model's order."""
  return {
    interventions.module_paths(model)[id(module)]: module.num_heads
    for _, module in nnx.iter_modules(model)
    if isinstance(module, MultiHeadAttention)
  }


def head_edits(keep: Mapping[str, jax.Array]) -> dict[str, interventions.Edit]:
  """The edits (`models.interventions`) that scale each layer's heads by `keep[path] [N]` (0
  zeroes a head, 1 keeps it), `{path: mask}` -> `{'<path>/heads': edit}`."""
  scale = lambda mask, heads: heads * mask[:, None, None].astype(heads.dtype)  # [B, N, T, H]
  return {f'{path}/heads': functools.partial(scale, mask) for path, mask in keep.items()}


@functools.partial(jax.jit, static_argnames='counts_fn')
def _clean(state: TrainState, batch, *, counts_fn):
  """The task's counts of a batch with no head ablated, and what each block passed on (its
  `residual` taps)."""
  model = merge_model(state)
  with interventions.editing(model) as run:
    counts = counts_fn(model, batch)
  return counts, {name: v for name, v in run.captured.items() if name.endswith('/residual')}


@functools.partial(jax.jit, static_argnames=('counts_fn', 'below'))
def _counts(state: TrainState, batch, keep, residuals, *, counts_fn, below: tuple[str, ...]):
  """The task's counts of a batch with each layer's heads scaled by `keep[path] [N]` (0 or 1),
  the blocks `below` the ablated layer replaced by their clean outputs `residuals`: nothing
  then reads what those blocks compute, and XLA drops it, so a head of layer i costs the
  layers from i on."""
  model = merge_model(state)
  edits = {**head_edits(keep), **{name: residuals[name] for name in below}}
  with interventions.editing(model, edits):
    return counts_fn(model, batch)


def _below(path: str, residuals: Mapping[str, jax.Array]) -> tuple[str, ...]:
  """The residual taps of the blocks before attention layer `path` ('layers/3/self_attn' ->
  'layers/0/residual' .. 'layers/2/residual') in the same stack; none where the model has no
  such taps (then the whole model runs)."""
  parts = path.split('/')
  if len(parts) < 3 or not parts[-2].isdigit():
    return ()
  stack = '/'.join(parts[:-2])
  names = tuple(f'{stack}/{j}/residual' for j in range(int(parts[-2])))
  return names if all(name in residuals for name in names) else ()


def sweep(
  state: TrainState, task: Task, split: str, *, batch_size: int, mesh, max_examples: int = 0
) -> dict:
  """The split's metrics with no head ablated and with each head of each layer ablated alone,
  with a progress line every `Progress.EVERY_SECONDS` (and at the end). `max_examples` > 0:
  over the split's first batches that hold that many examples.

  Batch by batch: one clean pass keeps what each block passed on, then each head of layer i
  runs the layers from i on only (`_counts`): SmolLM2's 30 layers cost about half the passes of
  ablating through the whole model.

  Returns:
    `{'metric': the main one (the first of MAIN_METRICS the task reports), 'unablated': its
    value, 'examples': how many the metrics read, 'layers': {path: {head: value}},
    'all_metrics': the same with every metric}`.

  Raises:
    ValueError: the model has no multi-head attention layer.
  """
  layers = attention_layers(merge_model(state))
  if not layers:
    raise ValueError(
      '--ablate_heads needs a model with multi-head attention layers (the '
      'Transformer family); this one has none.'
    )
  batches = list(evaluation.batches_holding(task, split, batch_size, max_examples))
  examples = sum(int(np.sum(np.asarray(batch['index']) >= 0)) for batch in batches)
  heads_total = sum(layers.values())
  logging.info(
    'Head ablation: %d heads, each over %d examples of %s.', heads_total, examples, split
  )
  ones = {path: jnp.ones((heads,)) for path, heads in layers.items()}
  base_totals, totals = {}, {path: [{} for _ in range(n)] for path, n in layers.items()}
  total, done, started, last = heads_total * len(batches), 0, time.perf_counter(), 0.0
  for number, batch in enumerate(batches, 1):
    batch = sharding.shard_batch(batch, mesh)
    counts, residuals = _clean(state, batch, counts_fn=task.eval_counts)
    evaluation.add_counts(base_totals, counts)
    for path, heads in layers.items():
      below = _below(path, residuals)
      kept = {name: residuals[name] for name in below}
      for head in range(heads):
        keep = {**ones, path: ones[path].at[head].set(0.0)}
        counts = _counts(state, batch, keep, kept, counts_fn=task.eval_counts, below=below)
        evaluation.add_counts(totals[path][head], counts)
        done, now = done + 1, time.perf_counter()
        if now - last >= Progress.EVERY_SECONDS or done == total:  # a real model has 270 heads
          rate, last = done / (now - started), now
          eta = duration((total - done) / rate)
          line = (
            f'Head ablation: batch {number}/{len(batches)}, {path} head {head} | '
            f'{rate / len(batches):.2f} heads/s'
          )
          logging.info('%s | ETA %s', line, eta)
  summarize = lambda counts: {k: float(v) for k, v in task.summarize(counts).items()}
  base = summarize(base_totals)
  metric = next(name for name in MAIN_METRICS if name in base)
  every = {
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
      for path, heads in every.items()
    },
    all_metrics=dict(unablated=base, layers=every),
  )


def save_picture(
  path: str, values: np.ndarray, layers: list[str], *, metric: str, unablated: float
) -> str:
  """Writes `values [L, N]`, the metric with each head ablated (rows attention layers, columns
  heads), as an annotated PNG with a colour bar; returns `path`."""
  rows, heads = values.shape
  figure = new_figure(figsize=(max(4.0, 0.7 * heads + 3.5), max(2.5, 0.45 * rows + 1.5)))
  axes = figure.subplots()
  image = axes.imshow(values, cmap='viridis', aspect='auto')
  axes.set_xticks(range(heads), [str(h) for h in range(heads)], fontsize=8)
  axes.set_yticks(range(rows), layers, fontsize=8)
  axes.set_xlabel('head ablated')
  middle = (np.nanmin(values) + np.nanmax(values)) / 2
  for (i, j), value in np.ndenumerate(values):
    axes.text(
      j,
      i,
      f'{value:.3g}',
      ha='center',
      va='center',
      fontsize=8,
      color='black' if value > middle else 'white',
    )
  axes.set_title(f'{metric} with one head ablated (none: {unablated:.3g})', fontsize=9)
  figure.colorbar(image, ax=axes, fraction=0.04, label=metric)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  return path


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
  picture = save_picture(
    os.path.join(out_dir, PICTURE_FILE),
    grid,
    paths,
    metric=result['metric'],
    unablated=result['unablated'],
  )
  return [json_path, picture]
