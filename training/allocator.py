"""Runs an entry point under mimalloc on Linux, so that XLA:CPU's buffers stay mapped.

XLA:CPU allocates its temporary buffer afresh at every execution of a compiled program (hundreds
of MB for a mid-sized train step) and glibc hands it back to the kernel when it is freed, so every
step faults the whole buffer in again: about 25,000 minor page faults per step at the default
size, 20-30% of a step's time. mimalloc with purging off keeps freed memory for the next step.
An allocator is chosen when the process starts (LD_PRELOAD), so the entry points call
`use_mimalloc()` first thing and the process re-executes itself once with it preloaded.

`ATTEND_ALLOCATOR=system` keeps the system allocator; without the `cmeel-mimalloc` package, or off
Linux, nothing changes.
"""

import importlib.metadata
import os
import sys

ENV = 'ATTEND_ALLOCATOR'
CHOICES = ('mimalloc', 'system')
LIBRARY = 'libmimalloc.so'


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
    MIMALLOC_PURGE_DELAY=environ.get('MIMALLOC_PURGE_DELAY', '-1'),
  )


def use_mimalloc() -> None:
  """Re-executes this process with mimalloc preloaded, unless it is there or not wanted.

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


def active() -> bool:
  """Whether mimalloc is loaded in this process (read from its memory map)."""
  try:
    with open('/proc/self/maps') as maps:
      return any(LIBRARY in line for line in maps)
  except OSError:
    return False


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
