"""Input pipeline speed: batches/s of the default experiment's training iterator vs its train step.

    python -m benchmarks.data_bench                       # batch 64, prepares the data on first use
    python -m benchmarks.data_bench --batch_size=256 --json=/tmp/data_bench.json

Reports the one-off costs (preparing the TFDS dataset, which is skipped when `--data_dir`
already holds it; building the tokenizers; tokenizing the train split) and then the steady
state of `task.batches('train', shuffle=True)`: median batches/s over `--repeats` runs of
`--batches` batches, with the share of padding in inputs and targets. Finally it times the
train step of configs/default.py (compiled beforehand on every batch shape it meets) on
`--train_steps` of those batches: the pipeline must be >= 10x faster than the step it feeds.
"""

from training import allocator

if __name__ == '__main__':
  allocator.use_mimalloc()  # first: the allocator is chosen at process start, before JAX loads

import argparse
import functools
import json
import os
import statistics
import tempfile
import time

from absl import logging
import jax
import numpy as np

from configs import default
import tasks
from training.setup import build_state
from training.steps import train_step


def _timed(fn):
  start = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - start


def run(args: argparse.Namespace) -> dict:
  """Builds the task and times its training iterator; returns the figures."""
  experiment = default.get_config()
  config = experiment.dataset
  config.data_dir = args.data_dir
  config.batch_size = args.batch_size
  with tempfile.TemporaryDirectory() as workdir:
    task, build_s = _timed(lambda: tasks.build(experiment, workdir))
  it, tokenize_s = _timed(
    lambda: task.batches(config.train_split, batch_size=args.batch_size, shuffle=True, seed=0)
  )
  next(it)  # The first batch also computes the epoch's plan; the loop below includes later ones.
  rates, pads = [], []
  for _ in range(args.repeats):
    batches, seconds = _timed(lambda: [next(it) for _ in range(args.batches)])
    rates.append(args.batches / seconds)
    pads.append(
      [float(np.mean([(b[key] == 0).mean() for b in batches])) for key in ('inputs', 'targets')]
    )
  rate = statistics.median(rates)
  steps_per_s = _train_steps_per_s(experiment, task, batches[: args.train_steps])
  return {
    'train_steps_per_s': steps_per_s,
    'pipeline_over_train_step': rate / steps_per_s,
    'task': task.data.name,
    'batch_size': args.batch_size,
    'examples': len(task.data.encoded('train')),
    'batches_per_epoch': it.batches_per_epoch,
    'build_task_s': build_s,
    'tokenize_s': tokenize_s,
    'batches_per_s': rate,
    'ms_per_batch': 1e3 / rate,
    'examples_per_s': rate * args.batch_size,
    'input_padding': pads[-1][0],
    'target_padding': pads[-1][1],
  }


def _train_steps_per_s(experiment, task, batches: list[dict]) -> float:
  """Steps/s of the default experiment's jitted train step on `batches` (compile excluded)."""
  step = jax.jit(functools.partial(train_step, loss_fn=task.loss))
  state = build_state(experiment, task)
  shapes = {}
  for batch in batches:  # compile once per bucket shape before timing
    shapes.setdefault((batch['inputs'].shape, batch['targets'].shape), batch)
  for batch in shapes.values():
    jax.block_until_ready(step(state, batch, jax.random.key(0)))
  start = time.perf_counter()
  for i, batch in enumerate(batches):
    state, metrics = step(state, batch, jax.random.key(i))
  jax.block_until_ready(metrics)
  return len(batches) / (time.perf_counter() - start)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--batch_size', type=int, default=64)
  parser.add_argument('--batches', type=int, default=2000, help='batches per timed run')
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--train_steps', type=int, default=50, help='train steps to time')
  parser.add_argument('--data_dir', default='', help="TFDS data dir ('' = ~/tensorflow_datasets)")
  parser.add_argument('--json', default='', help='also write the results to this JSON file')
  args = parser.parse_args()
  logging.set_verbosity(logging.WARNING)
  r = run(args)
  print(f'# input pipeline, {r["task"]}, {r["examples"]} train examples, {os.cpu_count()} CPUs')
  print(
    '| batch | batches/s | ms/batch | examples/s | input pad | target pad | build_task s | '
    'tokenize s |\n|---|---|---|---|---|---|---|---|'
  )
  print(
    f'| {r["batch_size"]} | {r["batches_per_s"]:.0f} | {r["ms_per_batch"]:.3f} | '
    f'{r["examples_per_s"]:.0f} | {r["input_padding"]:.1%} | {r["target_padding"]:.1%} | '
    f'{r["build_task_s"]:.1f} | {r["tokenize_s"]:.2f} |'
  )
  print(
    f'\nTrain step of configs/default.py: {r["train_steps_per_s"]:.2f} steps/s; the pipeline '
    f'is {r["pipeline_over_train_step"]:,.0f}x faster than the step it feeds.'
  )
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(r, f, indent=1)


if __name__ == '__main__':
  main()
