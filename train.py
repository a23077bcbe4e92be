"""Trains an experiment config into a workdir, resuming from its newest checkpoint.

  python train.py --config=configs/default.py --workdir=runs/default
  python train.py --config=configs/default.py --config.model.num_layers=4 --workdir=runs/deeper

Several processes (hosts) train one model together: start the same command on each, with
--coordinator_address=HOST:PORT (process 0's), --num_processes and its --process_id (a cluster
launcher such as SLURM or Open MPI is detected without them; see the README).

Config fields (override any with --config.FIELD=VALUE): the training fields, each with its default
and meaning, are in training/config.py; config.model's are the model's constructor arguments
(models/, listed by models.default_config(name)); config.dataset's are the task's data schema
(e.g. data/translation.py). One run at a time holds a workdir; its log is WORKDIR/train.log.
"""

from training import allocator

if __name__ == '__main__':
  allocator.use_mimalloc()  # first: the allocator is chosen at process start, before JAX loads

from absl import app, flags, logging
from ml_collections import config_flags

import sources
import training

_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory for checkpoints, metrics and vocab.')
with training.failures.flag_errors('train.py'):  # the config file is read here
  _CONFIG = config_flags.DEFINE_config_file(
    'config', 'configs/default.py', 'Experiment config file.', lock_config=True
  )
_CACHE = flags.DEFINE_string(
  'compilation_cache',
  training.DEFAULT_COMPILATION_CACHE,
  training.COMPILATION_CACHE_HELP,
)
_COORDINATOR = flags.DEFINE_string(
  'coordinator_address',
  None,
  "Multi-process runs: process 0's HOST:PORT (default: "
  'JAX_COORDINATOR_ADDRESS, or what a cluster launcher sets).',
)
_NUM_PROCESSES = flags.DEFINE_integer(
  'num_processes', None, 'Multi-process runs: how many processes form the job.'
)
_PROCESS_ID = flags.DEFINE_integer(
  'process_id', None, 'Multi-process runs: this process, 0 .. num_processes-1.'
)
flags.mark_flag_as_required('workdir')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.INFO)
  training.quiet_library_logs()
  training.enable_compilation_cache(_CACHE.value)
  training.initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  logging.info('Allocator: %s.', 'mimalloc' if allocator.active() else 'the system allocator')
  training.failures.run('train.py', lambda: _train(_CONFIG.value, _WORKDIR.value))


def _train(config, workdir: str) -> None:
  """`config.init_from` resolved once, here (nothing is written before), then the run."""
  training.train_and_evaluate(config, workdir, sources.resolve_init_from(config))


if __name__ == '__main__':
  app.run(main, flags_parser=training.failures.parse_flags)
