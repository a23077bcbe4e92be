"""evaluate_checkpoint: the evaluation behind eval.py (metrics, samples, heatmaps)."""

import json
import os

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

import data
from training import evaluation, sharding
from training.checkpoints import Checkpointer
from training.heatmaps import save_heatmap, select_heads
from training.setup import build_state, max_decode_length
from training.steps import merge_model, shift_right

DECODERS = ('greedy', 'beam')


def load_config(workdir: str) -> ml_collections.ConfigDict:
  """The config a run in `workdir` was trained with (its config.json)."""
  path = os.path.join(workdir, 'config.json')
  if not os.path.exists(path):
    raise FileNotFoundError(f'{path} does not exist; is --workdir={workdir} a training workdir?')
  with open(path, encoding='utf-8') as f:
    return ml_collections.ConfigDict(json.load(f))


def evaluate_checkpoint(workdir: str, *, config=None, checkpoint_step: int | None = None,
                        split: str = 'test', decode: str = 'greedy', average_last: int = 1,
                        num_heatmaps: int = 4, heatmap_layer: int = -1, heatmap_head: int = -1,
                        max_examples: int = 0) -> dict:
  """Evaluates a checkpoint of `workdir` and writes WORKDIR/eval/{metrics.json, samples.txt, *.png}.

  Args:
    workdir: a training workdir.
    config: the config to build the model with; None = the workdir's config.json.
    checkpoint_step: the step to evaluate; None = the newest.
    split: the dataset split.
    decode: 'greedy' or 'beam' (config.beam_size, config.alpha).
    average_last: average the parameters of this many newest checkpoints (the paper used 5).
    num_heatmaps: cross-attention heatmaps to draw, for the first examples of the split.
    heatmap_layer: decoder layer whose cross-attention is drawn (negative counts from the end).
    heatmap_head: head to draw; -1 = the mean over heads.
    max_examples: decode only this many examples (0 = all).

  Returns:
    The metrics written to eval/metrics.json.
  """
  if decode not in DECODERS:
    raise ValueError(f'--decode={decode!r} is not one of {DECODERS}.')
  if average_last < 1:
    raise ValueError(f'--average_last={average_last} must be >= 1.')
  config = config or load_config(workdir)
  task = data.build_task(config.dataset, os.path.join(workdir, 'vocab'))
  mesh = sharding.make_mesh()
  state, step = _restore(config, task, mesh, workdir, checkpoint_step, average_last)

  batch_size = config.dataset.eval_batch_size
  metrics = evaluation.teacher_forced_metrics(state, task, split, batch_size=batch_size, mesh=mesh)
  samples = evaluation.decode_split(
      state, task, split, batch_size=batch_size, mesh=mesh, max_examples=max_examples,
      max_length=max_decode_length(config), beam_size=config.beam_size if decode == 'beam' else 1,
      alpha=config.alpha)
  metrics.update(evaluation.decoded_metrics(samples, config.dataset.target_vocab))
  metrics = {key: float(value) for key, value in metrics.items()}
  metrics.update(step=step, split=split, decode=decode, examples=len(samples))

  out_dir = os.path.join(workdir, 'eval')
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, 'metrics.json'), 'w', encoding='utf-8') as f:
    json.dump(metrics, f, indent=2)
  with open(os.path.join(out_dir, 'samples.txt'), 'w', encoding='utf-8') as f:
    f.write('source | reference | hypothesis\n')
    f.writelines(f'{s["source"]} | {s["reference"]} | {s["hypothesis"]}\n' for s in samples)
  _draw_heatmaps(state, task, samples[:num_heatmaps], out_dir, heatmap_layer, heatmap_head)
  _print_summary(metrics, out_dir)
  return metrics


def _restore(config, task, mesh, workdir, checkpoint_step, average_last):
  """The checkpoint's state (parameters averaged over the newest `average_last`) and its step."""
  like = sharding.replicate(build_state(config, task), mesh)
  checkpointer = Checkpointer(os.path.join(workdir, 'checkpoints'), max_to_keep=None)
  steps = checkpointer.steps()
  if not steps:
    raise FileNotFoundError(f'No checkpoint in {checkpointer.directory}; train first with '
                            f'python train.py --config=... --workdir={workdir}.')
  step = checkpoint_step if checkpoint_step is not None else steps[-1]
  state, _ = checkpointer.restore(like, step)
  chosen = [s for s in steps if s <= step][-average_last:]
  if len(chosen) > 1:
    # `step` is restored already; only the earlier checkpoints are read again.
    params = [checkpointer.restore(like, s)[0].params for s in chosen[:-1]] + [state.params]
    state = state.replace(params=jax.tree.map(lambda *p: sum(p) / len(p), *params))
    logging.info('Averaged the parameters of steps %s.', chosen)
  checkpointer.close()
  return state, int(jax.device_get(state.step))


def _draw_heatmaps(state, task, samples, out_dir, layer, head) -> None:
  """One PNG per sample: decoder cross-attention while producing its own hypothesis."""
  model = merge_model(state)
  for sample in samples:
    if not sample['output_ids']:
      continue
    inputs = jnp.asarray([sample['inputs']], jnp.int32)                  # [1, S]
    outputs = jnp.asarray([sample['output_ids']], jnp.int32)            # [1, T]
    _, attention = model(inputs, shift_right(outputs), deterministic=True, return_attention=True)
    weights = select_heads(np.asarray(attention['cross'][0]), layer, head)  # [T, S]
    which = 'mean over heads' if head < 0 else f'head {head}'
    save_heatmap(os.path.join(out_dir, f'attention_{sample["index"]:04d}.png'), weights,
                 task.source_tokenizer.tokens(sample['inputs']),
                 task.target_tokenizer.tokens(sample['output_ids']),
                 f'{sample["source"]} -> {sample["hypothesis"]}\n(layer {layer}, {which})')


def _print_summary(metrics: dict, out_dir: str) -> None:
  rows = [(key, f'{value:.4f}' if isinstance(value, float) else str(value))
          for key, value in metrics.items()]
  width = max(len(key) for key, _ in rows)
  print('\n'.join(f'{key:<{width}}  {value}' for key, value in rows))
  print(f'Wrote {out_dir}/metrics.json, samples.txt and attention heatmaps.')
