"""Trains an experiment config into a workdir, resuming from its newest checkpoint.

  python train.py --config=configs/default.py --workdir=runs/default
  python train.py --config=configs/default.py --config.model.num_layers=4 --workdir=runs/deeper
"""

import sys

from training import allocator

if __name__ == '__main__':
  allocator.use_mimalloc()  # first: the allocator is chosen at process start, before JAX loads

from absl import app, flags, logging
from ml_collections import config_flags

import training

_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory for checkpoints, metrics and vocab.')
_CONFIG = config_flags.DEFINE_config_file('config', 'configs/default.py',
                                          'Experiment config file.', lock_config=True)
_CACHE = flags.DEFINE_string('compilation_cache', training.DEFAULT_COMPILATION_CACHE,
                            "Directory of XLA's persistent compilation cache ('' = off).")
flags.mark_flag_as_required('workdir')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.INFO)
  training.quiet_library_logs()
  training.enable_compilation_cache(_CACHE.value)
  logging.info('Allocator: %s.', 'mimalloc' if allocator.active() else 'the system allocator')
  try:
    training.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  except (ValueError, FileNotFoundError) as error:
    # Bad input is reported in one sentence naming the field or path, not as a traceback.
    sys.exit(f'train.py: {error}')


if __name__ == '__main__':
  app.run(main)
