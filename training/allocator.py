"""Runs an entry point under mimalloc on Linux, so that XLA:CPU's buffers stay mapped.

XLA:CPU allocates its temporary buffer afresh at every execution of a compiled program (hundreds
of MB for a mid-sized train step) and glibc hands it back to the kernel when it is freed, so every
step faults the whole buffer in again: about 25,000 minor page faults per step at the default
size, 20-30% of a step's time. mimalloc with purging off keeps freed memory for the next step.
An allocator is chosen when the process starts (LD_PRELOAD), so the entry points call
`use_mimalloc()` first thing and the process re-executes itself once with it preloaded.

`ATTEND_ALLOCATOR=system` keeps the system allocator; without the `cmeel-mimalloc` package, or off
Linux, nothing changes.

Compiling and evaluating are the exceptions (`purging`): XLA frees hundreds of MB of its own
working memory across its threads' heaps, and an evaluation allocates buffers the train step
never reuses, which with purging off would stay resident for the rest of the run, so the first
(compiling) call of a train step and every evaluation run with purging on.
"""

import contextlib
import ctypes
import importlib.metadata
import os
import sys

ENV = 'ATTEND_ALLOCATOR'
CHOICES = ('mimalloc', 'system')
LIBRARY = 'libmimalloc.so'
PURGE_DELAY = 'MIMALLOC_PURGE_DELAY'
# mi_option_purge_delay's index in mimalloc 3.x's mi_option_t; `purging` checks that it holds
# the value the process started with before it changes anything.
PURGE_DELAY_OPTION = 15


def library_path() -> str | None:
  """The mimalloc shared library the `cmeel-mimalloc` package installs, or None."""
  try:
    files = importlib.metadata.distribution('cmeel-mimalloc').files or []
  except importlib.metadata.PackageNotFoundError:
    return None
  for file in files:
    if file.name == LIBRARY and os.path.exists(file.locate()):
      return os.path.realpath(file.locate())
  return None


def preload_environment(environ: dict[str, str], library: str | None) -> dict[str, str] | None:
  """The environment to re-execute with, or None when the process is to run as it is.

  Raises:
    ValueError: `ATTEND_ALLOCATOR` is not one of `CHOICES`.
  """
  choice = environ.get(ENV, CHOICES[0])
  if choice not in CHOICES:
    raise ValueError(f'{ENV}={choice!r} must be one of {", ".join(map(repr, CHOICES))}.')
  preloaded = environ.get('LD_PRELOAD', '')
  if (
    choice == 'system'
    or not sys.platform.startswith('linux')
    or library is None
    or library in preloaded.split(':')
  ):
    return None
  # Purging off: freed pages stay with the process, which is the point (a step's buffer is
  # needed again within milliseconds).
  return dict(
    environ,
    LD_PRELOAD=':'.join(filter(None, (library, preloaded))),
    **{PURGE_DELAY: environ.get(PURGE_DELAY, '-1')},
  )


def use_mimalloc() -> None:
  """Re-executes this process with mimalloc preloaded, unless it is there or not wanted; under
  mimalloc, XLA:CPU then runs computations on the calling thread (`run_inline`).

  Call it before JAX is imported: the new process starts from the same command line.
  """
  try:
    environ = preload_environment(dict(os.environ), library_path())
  except ValueError as error:
    sys.exit(str(error))
  if environ is not None:
    sys.stdout.flush()
    sys.stderr.flush()
    try:
      os.execve(sys.executable, sys.orig_argv, environ)
    except OSError as error:  # the run goes on, only slower
      print(
        f'Could not re-execute under mimalloc ({error}); using the system allocator.',
        file=sys.stderr,
      )
  elif active():
    run_inline()


def run_inline() -> None:
  """XLA:CPU runs each computation on the thread that calls it, not dispatched to another.

  Dispatched, a program's temporary buffer was not always taken back by mimalloc before the next
  call allocated one (freed, it seems, on a thread other than the one that allocated it): in 2
  of 5 processes SmolLM2's train step (8 x 128 tokens) kept its 1.96 GB buffer twice, a 6.5 GB
  peak instead of 4.5 (`benchmarks.finetune_peer --memory`). Inline, 4 processes of 4 peaked
  at 4.41-4.43 GB. Call it before JAX's CPU backend starts.
  """
  import jax  # here, not above: the allocator is chosen before JAX loads

  jax.config.update('jax_cpu_enable_async_dispatch', False)


def active() -> bool:
  """Whether mimalloc is loaded in this process (read from its memory map)."""
  try:
    with open('/proc/self/maps') as maps:
      return any(LIBRARY in line for line in maps)
  except OSError:
    return False


@contextlib.contextmanager
def purging():
  """Within the block, mimalloc returns freed memory to the system at once; after it, the
  purge delay is the process's again, and what was freed inside has been returned.

  For a program's first (compiling) call: SmolLM2's train step at 8 x 128 tokens then peaks at
  4,729 MiB instead of 4,986 (`benchmarks.finetune_peer --memory`), and the steps after it run
  as before. Does nothing without mimalloc, or where its option `PURGE_DELAY_OPTION` is not the
  purge delay the process started with (another mimalloc's layout).
  """
  started = os.environ.get(PURGE_DELAY, '')
  number = started.removeprefix('-').isdigit()
  library = ctypes.CDLL(None) if number and active() else None
  option = getattr(library, 'mi_option_get', None)
  if option is None or option(PURGE_DELAY_OPTION) != int(started):
    yield
    return
  library.mi_option_set(PURGE_DELAY_OPTION, 0)
  try:
    yield
  finally:
    library.mi_collect(True)
    library.mi_option_set(PURGE_DELAY_OPTION, int(started))


def main(argv: list[str]) -> None:
  """`python -m training.allocator MODULE [ARGS...]`: `python -m MODULE ARGS...` under mimalloc.

  For programs that are not Attend's entry points, e.g. the test suite (`make test` runs pytest
  so: its XLA compilations, and its workers', run about a third faster).
  """
  if not argv:
    sys.exit('usage: python -m training.allocator MODULE [ARGS...]')
  try:
    environ = preload_environment(dict(os.environ), library_path())
  except ValueError as error:
    sys.exit(str(error))
  os.execve(sys.executable, [sys.executable, '-m', *argv], environ or dict(os.environ))


if __name__ == '__main__':
  main(sys.argv[1:])
