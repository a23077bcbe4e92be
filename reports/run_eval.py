"""evaluate_checkpoint: the evaluation behind eval.py (metrics, samples, attention pictures)."""

import json
import os
import re

from absl import logging
import jax
import ml_collections

from reports import explorer, head_ablation
import tasks
from training import evaluation, sharding
from training import workdir as workdir_lib
from training.checkpoints import Checkpointer
from training.config import add_missing_fields, validate
from training.selection import BEST_DIR
from training.setup import build_state
from training.steps import merge_model

DECODERS = ('greedy', 'beam')
LOG_FILE = 'eval.log'  # in WORKDIR/eval/ (or --output's folder), the only one eval.py writes
EVAL_DIR = 'eval'  # eval.py's folder; --output=eval_NAME keeps another evaluation beside it
SAMPLES_JSONL = 'samples.jsonl'  # every predicted example's text fields, one JSON object a line


def load_config(workdir: str) -> ml_collections.ConfigDict:
  """The config a run in `workdir` was trained with (its config.json)."""
  path = os.path.join(workdir, 'config.json')
  if not os.path.exists(path):
    raise FileNotFoundError(f'{path} does not exist; is --workdir={workdir} a training workdir?')
  with open(path, encoding='utf-8') as f:
    config = ml_collections.ConfigDict(json.load(f))
  added = add_missing_fields(config)
  if added:
    logging.info('%s predates the training field(s) %s; using their defaults.', path, added)
  return config


def evaluate_checkpoint(
  workdir: str,
  *,
  config=None,
  checkpoint: str = '',
  checkpoint_step: int | None = None,
  split: str = 'test',
  decode: str = 'greedy',
  average_last: int = 1,
  num_heatmaps: int = 4,
  heatmap_layer: int = -1,
  heatmap_head: int = -1,
  max_examples: int = 0,
  eval_lengths=(),
  ablate_heads: bool = False,
  explorer_examples: int | None = None,
  output: str = EVAL_DIR,
) -> dict:
  """Evaluates a checkpoint of `workdir`; writes WORKDIR/eval/{metrics.json, config.json (the
  config evaluated), the task's samples file (samples.txt, predictions.txt) and samples.jsonl
  (the same records' text and number fields), pictures, eval.log}, and nothing anywhere else.

  metrics.json names the examples each metric was computed on ('population'): the counted ones
  (loss, token accuracy) cover the split, the predicted ones (exact match, BLEU) the predicted
  examples. A damaged newest checkpoint is skipped for the one before it.

  What is predicted, measured and drawn is the task's (`config.task`); translation decodes,
  scores exact match and sacreBLEU, and draws decoder cross-attention heatmaps.

  Args:
    workdir: a training workdir.
    config: the config to build the model with; None = the workdir's config.json.
    checkpoint: 'best' (WORKDIR/best/, chosen on validation by config.selection_metric),
      'latest' or a step number; '' = the best where the workdir has one and `average_last` is
      1, else the latest. The choice is logged and written to metrics.json ('checkpoint').
    checkpoint_step: the step to evaluate (the same as `checkpoint=str(step)`).
    split: the dataset split.
    decode: 'greedy' or 'beam' (config.beam_size, config.alpha).
    average_last: average the parameters of this many newest checkpoints (the paper used 5).
    num_heatmaps: attention pictures to draw, for the first examples of the split.
    heatmap_layer: layer whose attention is drawn (negative counts from the end).
    heatmap_head: head to draw; -1 = the mean over heads.
    max_examples: decode only this many examples (0 = all).
    eval_lengths: language models: also evaluate on rows of these lengths ('loss@N'); replaces
      the config's `dataset.eval_lengths`.
    ablate_heads: also write the split's main metric with each attention head ablated in turn
      (eval/head_ablation.json and .png, `reports.head_ablation`).
    explorer_examples: the first examples shown in eval/explorer.html (`reports.explorer`);
      None = `num_heatmaps`.
    output: the workdir's folder written instead of eval/: `EVAL_DIR` or `EVAL_DIR` + '_NAME'
      (a beam-search or averaged evaluation kept beside the greedy one).

  Returns:
    The metrics written to eval/metrics.json.
  """
  _check_flags(decode, average_last, num_heatmaps, max_examples, output)
  if checkpoint_step is not None:
    checkpoint = str(checkpoint_step)
  if explorer_examples is not None and explorer_examples < 0:
    raise ValueError(f'--explorer_examples={explorer_examples} must be >= 0 (0 = none).')
  checkpoints = Checkpointer(os.path.join(workdir, 'checkpoints'), max_to_keep=None, create=False)
  with workdir_lib.run_log() as log:
    try:
      if not os.path.isdir(workdir):
        raise FileNotFoundError(f'--workdir={workdir} does not exist; give a training workdir.')
      chosen = _choose(workdir, checkpoint, average_last)
      # Before anything is built, so nothing is written; a run stopped before its first regular
      # checkpoint may have a best one only.
      if chosen != 'best' and not checkpoints.steps():
        raise FileNotFoundError(
          f'No checkpoint in {checkpoints.directory}; train first with '
          f'python train.py --config=... --workdir={workdir}.'
        )
      config = config or load_config(workdir)
      if eval_lengths:
        set_eval_lengths(config, eval_lengths)
      _fit_mesh(config)
      validate(config)
      with workdir_lib.staging(workdir) as staged:  # eval.py writes into eval/ only
        task = tasks.build(config, staged)
      mesh = sharding.make_mesh(config.mesh)
      like = build_state(config, task, mesh)
      if chosen == 'best':
        best = Checkpointer(os.path.join(workdir, BEST_DIR), max_to_keep=None, create=False)
        try:
          state, _ = best.restore(like)
        finally:
          best.close()
        step = int(jax.device_get(state.step))
      else:
        state, step = _restore(
          like, checkpoints, None if chosen == 'latest' else int(chosen), average_last
        )
      logging.info('Evaluating step %d (--checkpoint=%s).', step, chosen)
    finally:
      checkpoints.close()
    out_dir = os.path.join(workdir, output)
    os.makedirs(out_dir, exist_ok=True)
    log.to_file(os.path.join(out_dir, LOG_FILE))

    options = tasks.EvalOptions(
      max_examples=max_examples,
      beam_size=config.beam_size if decode == 'beam' else 1,
      alpha=config.alpha,
      num_pictures=num_heatmaps,
      layer=heatmap_layer,
      head=heatmap_head,
      temperatures=tuple(config.temperatures),
      top_k=config.top_k,
      top_p=config.top_p,
      seed=config.seed,
    )
    batch_size = config.dataset.eval_batch_size
    metrics = evaluation.split_metrics(state, task, split, batch_size=batch_size, mesh=mesh)
    samples = evaluation.predict_split(
      state, task, split, batch_size=batch_size, mesh=mesh, options=options
    )
    predicted = task.prediction_metrics(samples)
    # The counted metrics cover the whole split, the predicted ones only what was predicted.
    population = {key: f'all of {split}' for key in metrics}
    population.update(
      {
        key: f'the first {len(samples)} examples of {split}' if max_examples else f'all of {split}'
        for key in predicted
      }
    )
    metrics = {key: float(value) for key, value in {**metrics, **predicted}.items()}
    metrics.update(
      step=step,
      checkpoint=chosen,
      split=split,
      decode=decode,
      examples=len(samples),
      population=population,
    )
    if signatures := task.metric_signatures():
      metrics['signatures'] = signatures

    with open(os.path.join(out_dir, 'metrics.json'), 'w', encoding='utf-8') as f:
      json.dump(metrics, f, indent=2)
    with open(os.path.join(out_dir, 'config.json'), 'w', encoding='utf-8') as f:
      f.write(config.to_json_best_effort(indent=2))  # what was evaluated (--config, --eval_length)
    with open(os.path.join(out_dir, task.samples_file), 'w', encoding='utf-8') as f:
      f.write(task.samples_header + '\n')
      f.writelines(sample['line'] + '\n' for sample in samples)
    # The same records for programs (reports.length_buckets): text fields are not split on '|'.
    with open(os.path.join(out_dir, SAMPLES_JSONL), 'w', encoding='utf-8') as f:
      for sample in samples:
        fields = {
          k: v for k, v in sample.items() if isinstance(v, (str, int, float)) and k != 'line'
        }
        f.write(json.dumps(fields, ensure_ascii=False) + '\n')
    model = merge_model(state)
    task.draw(model, samples, out_dir, options)
    shown = num_heatmaps if explorer_examples is None else explorer_examples
    explorer.write(
      out_dir,
      task.explore(model, samples[:shown], options),
      metrics=metrics,
      title=f'{config.task}, {os.path.basename(os.path.abspath(workdir))}, step {step}, {split}',
    )
    if ablate_heads:
      head_ablation.write(
        head_ablation.sweep(state, task, split, batch_size=batch_size, mesh=mesh), out_dir
      )
    _print_summary(metrics, out_dir, task.samples_file)
  return metrics


def _choose(workdir: str, checkpoint: str, average_last: int) -> str:
  """'best', 'latest' or a step (as text): what `checkpoint` asks for in `workdir`.

  Raises:
    ValueError: `checkpoint` is none of them, or 'best' where there is none or with averaging.
  """
  best_dir = os.path.join(workdir, BEST_DIR)
  has_best = os.path.isdir(best_dir) and bool(
    Checkpointer(best_dir, max_to_keep=None, create=False).steps()
  )
  if not checkpoint:
    return 'best' if has_best and average_last == 1 else 'latest'
  if checkpoint == 'best':
    if average_last > 1:
      raise ValueError(
        f'--average_last={average_last} averages the newest checkpoints; use it '
        'with --checkpoint=latest or a step, not --checkpoint=best.'
      )
    if not has_best:
      raise ValueError(
        f'--checkpoint=best: {workdir} has no {BEST_DIR}/ checkpoint (trained '
        'before model selection, or not yet evaluated); use --checkpoint=latest.'
      )
    return checkpoint
  if checkpoint != 'latest' and not checkpoint.isdigit():
    raise ValueError(f"--checkpoint={checkpoint!r} must be 'best', 'latest' or a step number.")
  return checkpoint


def _check_flags(
  decode: str, average_last: int, num_heatmaps: int, max_examples: int, output: str
) -> None:
  """Raises ValueError naming the first flag whose value eval.py cannot honour."""
  if not re.fullmatch(rf'{EVAL_DIR}(_[\w.-]+)?', output):
    raise ValueError(
      f"--output={output!r} must be '{EVAL_DIR}' or '{EVAL_DIR}_NAME' (letters, digits, '_.-'): "
      'a folder of the workdir beside its checkpoints, which it never replaces.'
    )
  if decode not in DECODERS:
    raise ValueError(f'--decode={decode!r} is not one of {DECODERS}.')
  if average_last < 1:
    raise ValueError(f'--average_last={average_last} must be >= 1.')
  if num_heatmaps < 0:
    raise ValueError(f'--num_heatmaps={num_heatmaps} must be >= 0 (0 = no pictures).')
  if max_examples < 0:
    raise ValueError(f'--max_examples={max_examples} must be >= 0 (0 = every example).')


def _restore(like, checkpointer: Checkpointer, checkpoint_step, average_last):
  """The state of `checkpoint_step` (default: the newest readable checkpoint), its parameters
  averaged with those of the `average_last - 1` checkpoints before it, and its step.

  Raises:
    ValueError: fewer than `average_last` checkpoints up to that step.
  """
  state, _ = checkpointer.restore(like, checkpoint_step)
  step = int(jax.device_get(state.step))
  chosen = [s for s in checkpointer.steps() if s <= step][-average_last:]
  if len(chosen) < average_last:
    raise ValueError(
      f'--average_last={average_last}, but {checkpointer.directory} holds '
      f'{len(chosen)} checkpoint(s) up to step {step}: {chosen}.'
    )
  if len(chosen) > 1:
    # `step` is restored already; only the earlier checkpoints are read again.
    params = [checkpointer.restore(like, s)[0].params for s in chosen[:-1]] + [state.params]
    state = state.replace(params=jax.tree.map(lambda *p: sum(p) / len(p), *params))
    logging.info('Averaged the parameters of steps %s.', chosen)
  return state, step


def set_eval_lengths(config, lengths) -> None:
  """Sets `config.dataset.eval_lengths` from --eval_length values (ints or their strings)."""
  if 'eval_lengths' not in tasks.task_class(config.task).dataset_config():
    raise ValueError(
      f"--eval_length applies to language models; this run's task is {config.task!r}."
    )
  try:
    lengths = tuple(int(n) for n in lengths)
  except ValueError as error:
    raise ValueError(
      f'--eval_length={",".join(map(str, lengths))} must be token counts.'
    ) from error
  with config.unlocked():
    config.dataset.eval_lengths = lengths


def _fit_mesh(config) -> None:
  """Evaluates on every device along 'data' when the training mesh does not fit these devices
  (e.g. a multi-host run evaluated on one machine); the checkpoint restores into any mesh."""
  try:
    sharding.mesh_shape(config.mesh, jax.device_count(), jax.local_device_count())
  except ValueError as error:
    logging.warning('%s Evaluating with every device on the data axis instead.', error)
    with config.unlocked():
      config.mesh = sharding.mesh_config()


def _print_summary(metrics: dict, out_dir: str, samples_file: str) -> None:
  rows = [
    (key, f'{value:.4f}' if isinstance(value, float) else str(value))
    for key, value in metrics.items()
    if key not in ('population', 'signatures')
  ]
  width = max(len(key) for key, _ in rows)
  print('\n'.join(f'{key:<{width}}  {value}' for key, value in rows))
  partial = sorted({value for value in metrics['population'].values() if value.startswith('the')})
  for subset in partial:
    keys = [key for key, value in metrics['population'].items() if value == subset]
    print(f'{", ".join(keys)}: on {subset} (--max_examples); the others on the whole split.')
  for key, signature in metrics.get('signatures', {}).items():
    print(f'{key}: {signature}')
  print(f'Wrote {out_dir}/metrics.json, {samples_file}, attention pictures and explorer.html.')
