"""How train.py and eval.py end on a failure: a failure the user can cause or act on is one
sentence on stderr naming the field, file or step, with exit status 1; a traceback goes to the
run's log file (WORKDIR/train.log, WORKDIR/eval/eval.log), not the terminal.

A run refused before it was accepted keeps no log (it writes nothing into the workdir): its
sentence is the whole account. An unexpected error before that is a bug, and keeps its traceback.
"""

import contextlib
import os
import re
import sys
from typing import Callable

from absl import flags

from training.checkpoints import UnreadableCheckpointError
from training.workdir import DiskFullError, WorkdirBusyError, is_disk_full, traceback_log

# What a user's input, data or machine causes; each is raised with a sentence that names it.
USER_ERRORS = (
  ValueError,
  FileNotFoundError,
  FloatingPointError,
  WorkdirBusyError,
  DiskFullError,
  UnreadableCheckpointError,
)
_HELP = ('--help', '-help', '-h', '-?', '--helpshort', '--helpfull')


def run(program: str, body: Callable[[], object]) -> None:
  """Runs `body`; exits with one sentence for what went wrong (see the module docstring)."""
  try:
    body()
  except USER_ERRORS as error:
    sys.exit(f'{program}: {_first_line(error)}')
  except Exception as error:  # pylint: disable=broad-except
    if is_disk_full(error):
      where = getattr(error, 'filename', None) or 'a file'
      sys.exit(
        f'{program}: the disk is full (no space left on device writing {where}); free '
        'space and rerun the same command.'
      )
    log = traceback_log(error)
    if log is None:
      raise
    sys.exit(
      f'{program}: stopped by an unexpected {type(error).__name__}: {_first_line(error)} '
      f'(the traceback is in {log}).'
    )


@contextlib.contextmanager
def flag_errors(program: str):
  """Turns a failure to parse the command line inside into one sentence naming the argument.

  ml_collections reads --config and its overrides from sys.argv as soon as the config flag is
  defined, so the entry points define it inside this.
  """
  try:
    yield
  except Exception as error:  # pylint: disable=broad-except
    sys.exit(f'{program}: {_flag_error(error, sys.argv)}')


def parse_flags(argv: list[str], flag_values: flags.FlagValues = flags.FLAGS) -> list[str]:
  """absl's flag parsing for `app.run(main, flags_parser=parse_flags)`: help exits with status
  0, and a bad flag or --config (file, argument, field or value) is one sentence."""
  with flag_errors(os.path.basename(argv[0])):
    try:
      remaining = flag_values(argv)
    except SystemExit:
      if set(argv[1:]) & set(_HELP):
        sys.exit(0)  # absl exits with 1 after printing the help it was asked for
      raise
    config = flag_values['config'].value if 'config' in flag_values else None
    if config is not None:
      config.keys  # pylint: disable=pointless-statement  # a config that failed to load raises
    return remaining


def _flag_error(error: Exception, argv: list[str]) -> str:
  """One sentence for a flag parsing failure, naming the argument."""
  # ml_collections' KeyError holds its message as a quoted repr ('\'scroe\'\nDid you mean...').
  message = str(error).replace('\\n', '\n').strip()
  for arg in argv[1:]:
    if arg.startswith('--config='):
      path = arg.split('=', 1)[1].split(':', 1)[0]
      if not os.path.exists(path):
        return f'{arg}: no such config file.'
  if isinstance(error, (AttributeError, KeyError)):
    field = re.match(r'[\W]*(\w+)', message)
    for arg in argv[1:]:
      name = arg.split('=', 1)[0].lstrip('-')
      parts = name.split('.')
      if field and parts[0] == 'config' and field.group(1) in parts[1:]:
        parent = '.'.join(parts[: parts.index(field.group(1), 1)])
        suggestion = re.search(r'Did you mean "(\w+)"', message)
        hint = f'; did you mean {parent}.{suggestion.group(1)}?' if suggestion else '.'
        return f'--{name}: {parent} has no field {field.group(1)!r}{hint}'
  lines = [line.strip() for line in message.splitlines() if line.strip()]
  if 'Traceback' in message:  # a config file's get_config raised: its last line says why
    return re.sub(r'^[\w.]+(Error|Exception): ', '', lines[-1])
  return lines[0] if lines else type(error).__name__


def _first_line(error: BaseException) -> str:
  lines = str(error).strip().splitlines()
  return lines[0] if lines else type(error).__name__
