"""Trains every combination of some config overrides, each in its own sub-workdir; resumable.

  python sweep.py --config=configs/default.py --workdir=runs/study \
      --sweep=model.score=dot,scaled_dot,general,additive,cosine --sweep=seed=0,1,2
  python sweep.py --config=configs/study_scores.py --workdir=runs/study_scores  # its get_sweep()
  python compare.py runs/study

--config.FIELD=value flags apply to every run. Running the same command again skips finished runs
and resumes interrupted ones from their checkpoints.
"""

import importlib.util
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from training import sweep

_WORKDIR = flags.DEFINE_string('workdir', None, 'Study folder; each run gets a sub-workdir.')
_CONFIG = config_flags.DEFINE_config_file(
  'config', None, 'Experiment config file.', lock_config=True
)
_SWEEP = flags.DEFINE_multi_string(
  'sweep',
  [],
  'FIELD=v1,v2,... (repeatable); the runs are the product of all of them and of '
  "the config file's get_sweep() list.",
)
_PARALLEL = flags.DEFINE_integer('parallel', 1, 'Runs that train at the same time.')
flags.mark_flags_as_required(['workdir', 'config'])


def _config_sweep(config_file: str) -> list[dict] | None:
  """The config file's `get_sweep(arg)` list, or None when it defines none."""
  path, _, arg = config_file.partition(':')
  spec = importlib.util.spec_from_file_location('sweep_config', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  get_sweep = getattr(module, 'get_sweep', None)
  return get_sweep(arg or None) if get_sweep else None


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.INFO)
  config_file = flags.FLAGS['config'].config_filename
  try:
    if _PARALLEL.value < 1:
      raise ValueError(f'--parallel={_PARALLEL.value} must be at least 1.')
    runs = sweep.expand(_CONFIG.value, _SWEEP.value, _config_sweep(config_file))
    sweep.prepare_data(_CONFIG.value, runs)
  except (ValueError, FileNotFoundError) as error:
    sys.exit(f'sweep.py: {error}')
  logging.info('%d runs in %s: %s', len(runs), _WORKDIR.value, ', '.join(r.name for r in runs))
  base = config_flags.get_override_values(flags.FLAGS['config'])
  failed = sweep.run_sweep(
    _CONFIG.value, config_file, runs, _WORKDIR.value, base_overrides=base, parallel=_PARALLEL.value
  )
  if failed:
    sys.exit(f'sweep.py: {len(failed)} of {len(runs)} runs failed: {", ".join(failed)}.')
  logging.info(
    'All %d runs finished; compare them with: python compare.py %s', len(runs), _WORKDIR.value
  )


if __name__ == '__main__':
  app.run(main)
