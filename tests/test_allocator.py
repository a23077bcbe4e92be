"""training.allocator: when an entry point re-executes under mimalloc, and what that buys."""

import os
import subprocess
import sys

import pytest

from training import allocator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARY = '/site/cmeel.prefix/lib/libmimalloc.so.3.4'


def test_the_default_preloads_the_library_with_purging_off():
  env = allocator.preload_environment({'LD_PRELOAD': '/other.so', 'HOME': '/h'}, LIBRARY)
  assert env == {'LD_PRELOAD': f'{LIBRARY}:/other.so', 'HOME': '/h', 'MIMALLOC_PURGE_DELAY': '-1'}
  kept = allocator.preload_environment({'MIMALLOC_PURGE_DELAY': '10'}, LIBRARY)
  assert kept['MIMALLOC_PURGE_DELAY'] == '10' and kept['LD_PRELOAD'] == LIBRARY


@pytest.mark.parametrize(
  'environ, library',
  [
    ({'ATTEND_ALLOCATOR': 'system'}, LIBRARY),  # turned off
    ({}, None),  # cmeel-mimalloc not installed
    ({'LD_PRELOAD': f'/x.so:{LIBRARY}'}, LIBRARY),  # already there: no second re-execution
  ],
)
def test_no_re_execution(environ, library):
  assert allocator.preload_environment(environ, library) is None


def test_an_unknown_choice_is_one_sentence():
  with pytest.raises(
    ValueError,
    match=r"ATTEND_ALLOCATOR='tcmalloc' must be one of 'mimalloc', "
    r"'system'\.",
  ):
    allocator.preload_environment({'ATTEND_ALLOCATOR': 'tcmalloc'}, LIBRARY)


# A jitted program whose XLA:CPU temporaries (16 MB arrays) are freed after every call: minor page
# faults per call after the warm-up, whether mimalloc is loaded and whether XLA:CPU dispatches
# computations to another thread.
_FAULTS = """
import resource
from training import allocator
allocator.use_mimalloc()
import jax, jax.numpy as jnp
f = jax.jit(lambda x: jnp.sort(jnp.sin(x) @ x.T, axis=0).sum())
x = jnp.ones((2000, 2000))
f(x).block_until_ready(); f(x).block_until_ready()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
  f(x).block_until_ready()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5
print(allocator.active(), faults, jax.config.values['jax_cpu_enable_async_dispatch'])
"""


def _run(choice):
  # ROOT goes first, beside (not instead of) any PYTHONPATH that holds the installed packages.
  path = os.pathsep.join(filter(None, (ROOT, os.environ.get('PYTHONPATH'))))
  # On the CPU also on a GPU machine: what is measured are XLA:CPU's temporaries.
  env = dict(os.environ, ATTEND_ALLOCATOR=choice, PYTHONPATH=path, JAX_PLATFORMS='cpu')
  env.pop('LD_PRELOAD', None)
  return subprocess.Popen(
    [sys.executable, '-c', _FAULTS],
    env=env,
    cwd=ROOT,
    text=True,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
  )


@pytest.mark.skipif(
  not sys.platform.startswith('linux') or allocator.library_path() is None,
  reason='mimalloc is preloaded on Linux, with cmeel-mimalloc installed',
)
@pytest.mark.slow
def test_under_mimalloc_the_temporaries_stop_faulting_and_run_inline():
  runs = {choice: _run(choice) for choice in ('mimalloc', 'system')}
  results = {}
  for choice, process in runs.items():
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    active, faults, dispatched = out.split()
    results[choice] = (active == 'True', float(faults), dispatched == 'True')
  assert results['mimalloc'][0] and not results['system'][0]
  # Under mimalloc computations run on the calling thread (`allocator.run_inline`).
  assert not results['mimalloc'][2] and results['system'][2]
  # glibc gives the 16 MB buffers back and faults them in again (thousands per call); mimalloc
  # keeps them (a handful).
  assert results['system'][1] > 1000 and results['mimalloc'][1] < results['system'][1] / 20


def test_a_bad_choice_stops_the_entry_point_with_one_line():
  env = dict(os.environ, ATTEND_ALLOCATOR='jemalloc')
  result = subprocess.run(
    [sys.executable, 'train.py', '--workdir=unused'],
    env=env,
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert result.returncode == 1
  assert result.stderr.strip() == "ATTEND_ALLOCATOR='jemalloc' must be one of 'mimalloc', 'system'."
  assert not os.path.exists(os.path.join(ROOT, 'unused'))


_PURGING = """
import ctypes, os
from training import allocator
get = ctypes.CDLL(None).mi_option_get
before = get(allocator.PURGE_DELAY_OPTION)
with allocator.purging():
  inside = get(allocator.PURGE_DELAY_OPTION)
print(allocator.active(), before, inside, get(allocator.PURGE_DELAY_OPTION))
"""


@pytest.mark.skipif(
  not sys.platform.startswith('linux') or allocator.library_path() is None,
  reason='mimalloc is preloaded on Linux, with cmeel-mimalloc installed',
)
def test_purging_turns_the_purge_delay_to_zero_inside_and_back_after():
  """The option `purging` sets is the one MIMALLOC_PURGE_DELAY sets (an unusual value, 123, to
  tell it apart from the others): 0 inside the block, 123 again after it."""
  path = os.pathsep.join(filter(None, (ROOT, os.environ.get('PYTHONPATH'))))
  env = dict(os.environ, PYTHONPATH=path, MIMALLOC_PURGE_DELAY='123')
  env.pop('LD_PRELOAD', None)
  env = allocator.preload_environment(env, allocator.library_path())
  done = subprocess.run(
    [sys.executable, '-c', _PURGING],
    env=env,
    cwd=ROOT,
    text=True,
    capture_output=True,
    check=False,
  )
  assert done.returncode == 0, done.stderr
  assert done.stdout.split() == ['True', '123', '0', '123']
