"""Evaluates a trained workdir with its task: metrics, predicted samples, attention pictures.

  python eval.py --workdir=runs/default
  python eval.py --workdir=runs/default --decode=beam --average_last=3 --num_heatmaps=8
  python eval.py --workdir=runs/gpt_text --eval_length=256,512

Metrics cover the whole split except those of predictions with --max_examples (metrics.json names
each metric's examples). Reads a workdir while train.py trains it; writes WORKDIR/eval/ only.
"""

from training import allocator

if __name__ == '__main__':
  allocator.use_mimalloc()  # first: the allocator is chosen at process start, before JAX loads

from absl import app, flags, logging
from ml_collections import config_flags

from reports import run_eval
import training
from training import layout

_WORKDIR = flags.DEFINE_string('workdir', None, 'A training workdir.')
with training.failures.flag_errors('eval.py'):  # the config file is read here
  _CONFIG = config_flags.DEFINE_config_file(
    'config', None, "Config to build the model with (default: the workdir's config.json)."
  )
_CHECKPOINT = flags.DEFINE_string(
  'checkpoint',
  '',
  "'best' (chosen on validation by config.selection_metric), 'latest' or a "
  'step (default: the best where the workdir has one, else the latest).',
)
_STEP = flags.DEFINE_integer('checkpoint_step', None, 'Checkpoint step (= --checkpoint=STEP).')
_SPLIT = flags.DEFINE_string('split', 'test', 'Dataset split to evaluate.')
_DECODE = flags.DEFINE_enum(
  'decode', 'greedy', ['greedy', 'beam'], 'Decoding method, for tasks that generate sequences.'
)
_AVERAGE = flags.DEFINE_integer('average_last', 1, 'Average the newest K checkpoints.')
_HEATMAPS = flags.DEFINE_integer('num_heatmaps', 4, 'Attention pictures (PNG) to write.')
_LAYER = flags.DEFINE_integer('heatmap_layer', -1, 'Layer whose attention is drawn (-1 = last).')
_HEAD = flags.DEFINE_integer('heatmap_head', -1, 'Head to plot (-1 = mean over heads).')
_EVAL_LENGTH = flags.DEFINE_list(
  'eval_length',
  [],
  'Language models: also evaluate on rows of these lengths (tokens), past '
  "the training length included; metrics named 'loss@N', 'bits_per_char@N'.",
)
_ABLATE = flags.DEFINE_bool(
  'ablate_heads',
  False,
  'Also measure the main metric with each attention head ablated in '
  'turn: eval/head_ablation.json and .png (docs/interventions.md); with --max_examples, over '
  'the first batches holding that many examples.',
)
_EXPLORER = flags.DEFINE_integer(
  'explorer_examples',
  None,
  'Examples in eval/explorer.html, the interactive attention '
  'explorer (default: --num_heatmaps; docs/explorer.md).',
)
_OUTPUT = flags.DEFINE_string(
  'output',
  layout.EVAL_DIR,
  "The workdir's folder to write: 'eval', or 'eval_NAME' to keep another evaluation (a beam "
  'search, averaged checkpoints, one chosen example) beside it.',
)
_PROFILE = flags.DEFINE_bool(
  'profile',
  False,
  "Also write a jax.profiler trace of the evaluation's metrics and predictions into "
  'OUTPUT/profile/ (TensorBoard, Perfetto; docs/benchmarks.md).',
)
_MAX_EXAMPLES = flags.DEFINE_integer('max_examples', 0, 'Predict at most this many (0 = all).')
_CACHE = flags.DEFINE_string(
  'compilation_cache',
  training.DEFAULT_COMPILATION_CACHE,
  training.COMPILATION_CACHE_HELP,
)
flags.mark_flag_as_required('workdir')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.INFO)
  training.quiet_library_logs()
  training.enable_compilation_cache(_CACHE.value)
  training.failures.run('eval.py', lambda: run_eval.evaluate(_request()))


def _request() -> run_eval.Request:
  """What the flags ask for (checked as the request is made)."""
  return run_eval.Request(
    _WORKDIR.value,
    config=_CONFIG.value,
    checkpoint=_CHECKPOINT.value if _STEP.value is None else str(_STEP.value),
    split=_SPLIT.value,
    decode=_DECODE.value,
    average_last=_AVERAGE.value,
    num_heatmaps=_HEATMAPS.value,
    heatmap_layer=_LAYER.value,
    heatmap_head=_HEAD.value,
    max_examples=_MAX_EXAMPLES.value,
    eval_lengths=tuple(_EVAL_LENGTH.value),
    ablate_heads=_ABLATE.value,
    explorer_examples=_EXPLORER.value,
    output=_OUTPUT.value,
    profile=_PROFILE.value,
  )


if __name__ == '__main__':
  app.run(main, flags_parser=training.failures.parse_flags)
