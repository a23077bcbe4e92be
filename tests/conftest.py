"""Test setup: CPU only, float32 matmuls at full precision, deterministic seeds."""

import os
import resource
import tempfile

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
# Set in the environment, not only in this process's config: the train.py subprocesses of the
# resume tests must multiply as the in-process runs they are compared with (on a GPU the default
# is TF32, and a resumed run then differs from a straight one in every parameter).
os.environ.setdefault('JAX_DEFAULT_MATMUL_PRECISION', 'highest')
# On a GPU, scatter-adds (embedding gradients) and some reductions use atomics, whose order varies
# from run to run; the resume tests compare runs bit for bit. (Verified on an H100: with both
# settings the two resume tests pass; with either alone they fail.) No effect on a CPU.
if '--xla_gpu_deterministic_ops' not in os.environ.get('XLA_FLAGS', ''):
  os.environ['XLA_FLAGS'] = (
    os.environ.get('XLA_FLAGS', '') + ' --xla_gpu_deterministic_ops=true'
  ).strip()
# The suite's programs are tiny and compiled once or twice each, so XLA:CPU's LLVM optimisation
# costs more than it saves: without it the suite's compilation takes about half the CPU time.
# XLA:CPU's older elemental emitters instead of its fusion emitters compile a tiny train step in
# about 28% less CPU time (three compilations of the default config's tiny step: 11.0 s -> 7.9 s
# on 2 cores). One LLVM module per program instead of several compiled in parallel, and no
# verification of the emitted IR, take a further ~30% off that compilation (1.58 s -> 1.12 s of
# CPU per tiny step, four compilations each). Numerics stay IEEE float32 (tests compare with
# tolerances, and resume tests compare processes that all inherit these flags). Training and
# benchmarks keep XLA's defaults. Only where the suite runs on the CPU: a GPU run's jax may not
# know the XLA:CPU flags (an unknown flag in XLA_FLAGS aborts the process).
for flag in (
  '--xla_backend_optimization_level=0',
  '--xla_llvm_disable_expensive_passes=true',
  '--xla_cpu_use_fusion_emitters=false',
  '--xla_cpu_parallel_codegen_split_count=1',
  '--xla_cpu_emitter_verification_level=0',
):
  if os.environ['JAX_PLATFORMS'] == 'cpu' and flag.split('=')[0] not in os.environ.get(
    'XLA_FLAGS', ''
  ):
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' ' + flag).strip()
# Tests (and the train.py/eval.py subprocesses they start) compile the same tiny programs many
# times; a persistent cache for the session turns the repeats into disk reads, every program
# however quick to compile (the suite's are mostly well under the usual threshold).
os.environ.setdefault(
  'JAX_COMPILATION_CACHE_DIR',
  os.path.join(tempfile.gettempdir(), f'attend-jax-cache-{os.getuid()}'),
)
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import models  # noqa: E402
from training import setup  # noqa: E402

# The suite's processes (and the train.py / eval.py ones they start, through
# training.enable_compilation_cache) share one cache: each entry is renamed in whole.
setup.write_cache_entries_whole()


def pytest_collection_modifyitems(items):
  """The files that hold tests marked slow run first, their slow tests leading: with two workers,
  a long test started near the end would keep one worker busy while the other sits idle. Each
  file's tests stay together, so its module-scoped fixtures are built once per worker."""
  slow = {item.module for item in items if item.get_closest_marker('slow')}
  first = {}
  for index, item in enumerate(items):
    first.setdefault(item.module, index)
  items.sort(
    key=lambda item: (
      item.module not in slow,
      first[item.module],
      not item.get_closest_marker('slow'),
    )
  )


def pytest_addoption(parser):
  parser.addoption(
    '--cpu-durations',
    type=int,
    default=0,
    metavar='N',
    help='Print the N tests that took the most CPU time: user + sys, of the test process and of '
    'the processes it started, setup and teardown included (what a 2-core machine pays for).',
  )


def _cpu_seconds() -> float:
  """User + sys seconds of this process and of the children it has waited for."""
  usages = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
  return sum(usage.ru_utime + usage.ru_stime for usage in usages)


_CPU_START = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  item.stash[_CPU_START] = _cpu_seconds()
  yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
  """The teardown report carries the test's CPU seconds, so that pytest-xdist brings them from
  its workers to the terminal summary."""
  report = (yield).get_result()
  if call.when == 'teardown' and item.config.getoption('--cpu-durations'):
    report.user_properties.append(('cpu_seconds', _cpu_seconds() - item.stash[_CPU_START]))


def pytest_terminal_summary(terminalreporter, config):
  count = config.getoption('--cpu-durations')
  if not count:
    return
  seconds = {
    report.nodeid: value
    for reports in terminalreporter.stats.values()
    for report in reports
    for key, value in getattr(report, 'user_properties', ())
    if key == 'cpu_seconds'
  }
  terminalreporter.write_sep('=', f'{count} tests with the most CPU time (user + sys)')
  for nodeid, cpu in sorted(seconds.items(), key=lambda pair: -pair[1])[:count]:
    terminalreporter.write_line(f'{cpu:7.2f}s {nodeid}')
  total = sum(seconds.values())
  terminalreporter.write_line(f'{total:7.2f}s in all, over {len(seconds)} tests')


@pytest.fixture(scope='session')
def tfds_dir(tmp_path_factory):
  """One TFDS data dir per test worker: each dataset the tests read is prepared once, not once per
  module or test (preparing number_words alone takes about 8 s of CPU). A prepared dataset is
  named by its builder, config and version and generated deterministically, so sharing the
  folder changes no test's data."""
  path = tmp_path_factory.getbasetemp() / 'tfds'
  path.mkdir(exist_ok=True)  # some tests write their own files there before any dataset
  return path


@pytest.fixture
def rng() -> np.random.Generator:
  """A NumPy generator with a fixed seed, fresh for every test."""
  return np.random.default_rng(0)


def build_model(name: str, *, rngs, **kwargs):
  """`models.build` from flat keyword arguments, as a model was once constructed: the fields of
  `config.model` (including those of its `stack`) beside the data's arguments (vocabulary sizes,
  special ids, image shapes), told apart by `models.default_config`."""
  fields = set(models.default_config(name))
  config = {key: value for key, value in kwargs.items() if key in fields}
  data = {key: value for key, value in kwargs.items() if key not in fields}
  return models.build(dict(name=name, **config), rngs=rngs, **data)
