"""Head ablation: the task's metrics over a split with each attention head zeroed in turn.

A head is ablated by zeroing its output (`<layer>/heads`, before the output projection, see
`models.interventions`), so the layer goes on with the other heads' contributions only. Every
ablation runs through one compiled step: which heads are kept is an argument of it.
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
from training import evaluation
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
def _counts(state: TrainState, batch, keep: dict[str, jax.Array], *, counts_fn):
  """The task's counts of a batch with each layer's heads scaled by `keep[path] [N]` (0 or 1)."""
  model = merge_model(state)
  with interventions.editing(model, head_edits(keep)):
    return counts_fn(model, batch)


def _metrics(
  state, task: Task, split: str, keep, *, batch_size: int, mesh, max_examples: int
) -> dict[str, float]:
  step = functools.partial(_counts, keep=keep, counts_fn=task.eval_counts)
  totals = evaluation.summed_counts(
    state, task, split, batch_size=batch_size, mesh=mesh, step=step, max_examples=max_examples
  )
  return {key: float(value) for key, value in task.summarize(totals).items()}


def sweep(
  state: TrainState, task: Task, split: str, *, batch_size: int, mesh, max_examples: int = 0
) -> dict:
  """The split's metrics with no head ablated and with each head of each layer ablated alone,
  with a progress line every `Progress.EVERY_SECONDS` (and at the end). `max_examples` > 0:
  over the split's first batches that hold that many examples (each head costs a pass over
  what is read: a real model's 270 heads over a whole split take hours).

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
  ones = {path: jnp.ones((heads,)) for path, heads in layers.items()}
  run = functools.partial(
    _metrics, state, task, split, batch_size=batch_size, mesh=mesh, max_examples=max_examples
  )
  read = evaluation.batches_holding(task, split, batch_size, max_examples)
  examples = sum(int(np.sum(np.asarray(batch['index']) >= 0)) for batch in read)
  logging.info(
    'Head ablation: %d heads, each over %d examples of %s.', sum(layers.values()), examples, split
  )
  base = run(ones)
  metric = next(name for name in MAIN_METRICS if name in base)
  every, total, started, last = {}, sum(layers.values()), time.perf_counter(), 0.0
  for path, heads in layers.items():
    every[path] = {}
    for head in range(heads):
      every[path][str(head)] = run({**ones, path: ones[path].at[head].set(0.0)})
      done, now = sum(map(len, every.values())), time.perf_counter()
      if now - last >= Progress.EVERY_SECONDS or done == total:  # a real model has 270 heads
        rate, last = done / (now - started), now
        eta = duration((total - done) / rate)
        line = f'Head ablation: {done}/{total} heads ({path}, head {head}) | {rate:.2f} heads/s'
        logging.info('%s | ETA %s', line, eta)
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
