"""eval.py's evaluation of a workdir: a `Request` (what its flags say) and `evaluate`, which
resolves the workdir (sources.resolve), restores the chosen checkpoint, runs the task's metrics
and predictions, and writes the outputs: metrics, samples, pictures, the explorer page and the
head ablation.
"""

from contextlib import nullcontext
import dataclasses
import json
import os

import jax
from ml_collections import ConfigDict

from attention import get_press
from interpret import split_sweep
from reports import explorer
import sources
import tasks
from training import evaluation, layout, restore
from training import workdir as workdir_lib
from training.steps import merge_model

DECODERS = ('greedy', 'beam')


@dataclasses.dataclass(frozen=True)
class Request:
  """One evaluation of a workdir: eval.py's flags, checked when the request is made.

  Attributes:
    workdir: a training workdir.
    config: the config to build the model with; None = the workdir's config.json.
    checkpoint: 'best' (WORKDIR/best/, chosen on validation by config.selection_metric),
      'latest' or a step number; '' = the best where the workdir has one and `average_last` is
      1, else the latest. The choice is logged and written to metrics.json ('checkpoint').
    split: the dataset split.
    decode: 'greedy' or 'beam' (config.beam_size, config.alpha).
    average_last: average the parameters of this many newest checkpoints (the paper used 5).
    num_heatmaps: attention pictures to draw, for the first examples of the split.
    heatmap_layer: layer whose attention is drawn (negative counts from the end).
    heatmap_head: head to draw; -1 = the mean over heads.
    max_examples: decode only this many examples (0 = all); the head ablation sweep, too, reads
      only the first batches that hold them.
    eval_lengths: language models: also evaluate on rows of these lengths ('loss@N'); replaces
      the config's `dataset.eval_lengths`.
    ablate_heads: also write the split's main metric with each attention head ablated in turn
      (eval/head_ablation.json and .png, `interpret.split_sweep`), over the split or the first
      batches holding `max_examples`.
    explorer_examples: the first examples shown in eval/explorer.html (`reports.explorer`);
      None = `num_heatmaps`.
    output: the workdir's folder written instead of eval/: 'eval' or 'eval_NAME' (a beam-search
      or averaged evaluation kept beside the greedy one).
    profile: also write a `jax.profiler` trace of the metrics and predictions into
      OUTPUT/profile/ (TensorBoard's profile plugin, Perfetto).
  """

  workdir: str
  config: ConfigDict | None = None
  checkpoint: str = ''
  split: str = 'test'
  decode: str = 'greedy'
  average_last: int = 1
  num_heatmaps: int = 4
  heatmap_layer: int = -1
  heatmap_head: int = -1
  max_examples: int = 0
  eval_lengths: tuple = ()
  ablate_heads: bool = False
  explorer_examples: int | None = None
  output: str = layout.EVAL_DIR
  profile: bool = False

  def __post_init__(self):
    """Raises ValueError naming the first flag whose value eval.py cannot honour."""
    layout.check_eval_output(self.output)
    if self.decode not in DECODERS:
      raise ValueError(f'--decode={self.decode!r} is not one of {DECODERS}.')
    if self.average_last < 1:
      raise ValueError(f'--average_last={self.average_last} must be >= 1.')
    if self.num_heatmaps < 0:
      raise ValueError(f'--num_heatmaps={self.num_heatmaps} must be >= 0 (0 = no pictures).')
    if self.max_examples < 0:
      raise ValueError(f'--max_examples={self.max_examples} must be >= 0 (0 = every example).')
    if self.explorer_examples is not None and self.explorer_examples < 0:
      raise ValueError(f'--explorer_examples={self.explorer_examples} must be >= 0 (0 = none).')


def evaluate(request: Request) -> dict:
  """Evaluates a checkpoint of `request.workdir`; writes WORKDIR/eval/ (or `request.output`):
  metrics.json, config.json (the config evaluated), the task's samples file and samples.jsonl,
  pictures, explorer.html, eval.log, and nothing anywhere else.

  metrics.json names the examples each metric was computed on ('population'): the counted ones
  (loss, token accuracy) cover the split, the predicted ones (exact match, BLEU) the predicted
  examples. What is predicted, measured and drawn is the task's (`config.task`).

  Returns:
    The metrics written to metrics.json.
  """
  with workdir_lib.run_log() as log:
    source = sources.resolve(
      request.workdir,
      config=request.config,
      checkpoint=request.checkpoint,
      average_last=request.average_last,
      eval_lengths=request.eval_lengths,
    )
    task = source.task  # its data read first: a bad split fails before the parameters are read
    run = source.restore()
    out_dir = os.path.join(request.workdir, request.output)
    os.makedirs(out_dir, exist_ok=True)
    log.to_file(os.path.join(out_dir, layout.EVAL_LOG_FILE))
    options = _options(request, run.config)
    traced = jax.profiler.trace(layout.profile_dir(out_dir)) if request.profile else nullcontext()
    with traced:
      metrics, samples = _measure(request, run, task, options)
    _write(out_dir, run, task, metrics, samples)
    model = merge_model(run.state)
    drawn = task.draw(model, samples, out_dir, options)
    shown = request.num_heatmaps if request.explorer_examples is None else request.explorer_examples
    name = os.path.basename(os.path.abspath(request.workdir))
    explorer.write(
      out_dir,
      task.explore(model, samples[:shown], options),
      metrics=metrics,
      title=f'{run.config.task}, {name}, step {run.step}, {request.split}',
    )
    if request.ablate_heads:
      batch_size = run.config.dataset.eval_batch_size
      sweep = split_sweep.sweep(
        run.state,
        task,
        request.split,
        batch_size=batch_size,
        mesh=run.mesh,
        max_examples=request.max_examples,
      )
      split_sweep.write(sweep, out_dir)
    _print_summary(metrics, out_dir, task.samples_file, pictures=len(drawn or ()))
  return metrics


def _options(request: Request, config) -> tasks.EvalOptions:
  return tasks.EvalOptions(
    max_examples=request.max_examples,
    beam_size=config.beam_size if request.decode == 'beam' else 1,
    alpha=config.alpha,
    num_pictures=request.num_heatmaps,
    layer=request.heatmap_layer,
    head=request.heatmap_head,
    temperatures=tuple(config.temperatures),
    top_k=config.top_k,
    top_p=config.top_p,
    seed=config.seed,
    press=(get_press(config.press), config.press_ratio) if config.get('press') else None,
  )


def _measure(
  request: Request, run: restore.Restored, task: tasks.Task, options
) -> tuple[dict, list[dict]]:
  """The split's counted metrics, its predicted examples and their metrics, with what each
  metric was computed on ('population') and what was evaluated."""
  split, batch_size = request.split, run.config.dataset.eval_batch_size
  metrics = evaluation.split_metrics(run.state, task, split, batch_size=batch_size, mesh=run.mesh)
  samples = evaluation.predict_split(
    run.state, task, split, batch_size=batch_size, mesh=run.mesh, options=options
  )
  predicted = task.prediction_metrics(samples)
  # The counted metrics cover the whole split, the predicted ones only what was predicted.
  population = {key: f'all of {split}' for key in metrics}
  subset = f'the first {len(samples)} examples of {split}' if request.max_examples else None
  population.update({key: subset or f'all of {split}' for key in predicted})
  metrics = {key: float(value) for key, value in {**metrics, **predicted}.items()}
  metrics.update(
    step=run.step,
    checkpoint=run.checkpoint,
    split=split,
    decode=request.decode,
    examples=len(samples),
    population=population,
  )
  if signatures := task.metric_signatures():
    metrics['signatures'] = signatures
  return metrics, samples


def _write(
  out_dir: str, run: restore.Restored, task: tasks.Task, metrics: dict, samples: list[dict]
) -> None:
  """metrics.json, config.json (what was evaluated: --config, --eval_length), the task's samples
  file, and samples.jsonl: the same records for programs (text fields are not split on '|')."""
  with open(os.path.join(out_dir, layout.EVAL_METRICS_FILE), 'w', encoding='utf-8') as f:
    json.dump(metrics, f, indent=2)
  with open(os.path.join(out_dir, layout.CONFIG_FILE), 'w', encoding='utf-8') as f:
    f.write(run.config.to_json_best_effort(indent=2))
  with open(os.path.join(out_dir, task.samples_file), 'w', encoding='utf-8') as f:
    f.write(task.samples_header + '\n')
    f.writelines(sample['line'] + '\n' for sample in samples)
  with open(os.path.join(out_dir, layout.SAMPLES_JSONL), 'w', encoding='utf-8') as f:
    for sample in samples:
      fields = {k: v for k, v in sample.items() if isinstance(v, (str, int, float)) and k != 'line'}
      f.write(json.dumps(fields, ensure_ascii=False) + '\n')


def _print_summary(metrics: dict, out_dir: str, samples_file: str, *, pictures: int) -> None:
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
  drawn = f'{pictures} attention picture{"s" * (pictures != 1)} and ' if pictures else ''
  written = f'{layout.EVAL_METRICS_FILE}, {samples_file}, {drawn}explorer.html'
  print(f'Wrote {out_dir}/{written}.')
