"""What a run may do to its workdir: one train.py at a time (a lock), nothing written before its
config is accepted, the configs it was trained with kept, and its log with any traceback.

A run builds its task in a staging directory (a copy of the vocabulary it will use), checks the
config against what the workdir holds, and only then `accept`s: a refused run leaves the workdir
byte for byte as it was.
"""

import contextlib
import errno
import fcntl
import filecmp
import json
import logging as std_logging
from logging import handlers as std_handlers
import os
import shutil
import socket
import sys
import tempfile
import traceback

from absl import logging

from training.config_fields import flatten
from training.layout import CONFIG_FILE, HISTORY_DIR, LOCK_FILE, VOCAB_DIR


class WorkdirBusyError(RuntimeError):
  """Another live train.py holds the workdir."""


class DiskFullError(OSError):
  """A write failed for want of space; the message says where a rerun resumes."""


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # someone else's process
    return True
  return True


class Lock:
  """WORKDIR/train.lock, naming its holder's host and pid, held with flock while the run lives.

  The kernel drops a flock when its process dies, so a lock file left by a killed run is taken
  over (with a message); the host and pid guard filesystems whose flock is local to one host.
  """

  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, LOCK_FILE)
    self._fd = None

  def acquire(self) -> None:
    """Takes the lock; raises WorkdirBusyError naming the holder if another run has it."""
    while self._fd is None:
      fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        raise WorkdirBusyError(self._busy(holder)) from None
      if os.fstat(fd).st_ino != getattr(_stat(self.path), 'st_ino', None):
        os.close(fd)  # its holder released (removed) it meanwhile: lock the new file
        continue
      holder = _read_holder(fd)
      if holder and holder.get('host') != socket.gethostname():
        os.close(fd)
        raise WorkdirBusyError(
          self._busy(holder) + f' If no run is left there, delete {self.path}.'
        )
      if holder and _alive(holder.get('pid', -1)) and holder.get('pid') != os.getpid():
        os.close(fd)
        raise WorkdirBusyError(self._busy(holder))
      if holder:
        logging.warning(
          'Took over the lock of %s from pid %s, which is no longer running.',
          os.path.dirname(self.path),
          holder.get('pid'),
        )
      os.ftruncate(fd, 0)
      os.write(fd, json.dumps(dict(host=socket.gethostname(), pid=os.getpid())).encode())
      self._fd = fd

  def _busy(self, holder: dict) -> str:
    return (
      f'{os.path.dirname(self.path)} is in use by train.py (pid {holder.get("pid", "?")} '
      f'on {holder.get("host", "?")}); wait for it to finish, or choose another --workdir.'
    )

  def release(self) -> None:
    if self._fd is not None:
      with contextlib.suppress(FileNotFoundError):
        os.remove(self.path)
      os.close(self._fd)
      self._fd = None


def _stat(path: str):
  with contextlib.suppress(FileNotFoundError):
    return os.stat(path)
  return None


def _read_holder(fd: int) -> dict:
  os.lseek(fd, 0, os.SEEK_SET)
  try:
    return json.loads(os.read(fd, 4096) or b'{}')
  except ValueError:
    return {}


@contextlib.contextmanager
def held(workdir: str):
  """The workdir, created if need be and locked; a refused run removes the empty one it made."""
  created = not os.path.isdir(workdir)
  os.makedirs(workdir, exist_ok=True)
  lock = Lock(workdir)
  try:
    lock.acquire()
    yield lock
  finally:
    lock.release()
    if created and not os.listdir(workdir):
      os.rmdir(workdir)


@contextlib.contextmanager
def staging(*vocab_sources: str):
  """A temporary stand-in workdir for building a task: its vocab/ is a copy of that of the first
  of `vocab_sources` (workdirs) that has one, so whatever the task builds or saves stays out of
  the real workdir until the run is accepted (`commit_vocab`)."""
  with tempfile.TemporaryDirectory(prefix='attend-staging-') as directory:
    for source in vocab_sources:
      if os.path.isdir(os.path.join(source, VOCAB_DIR)):
        shutil.copytree(os.path.join(source, VOCAB_DIR), os.path.join(directory, VOCAB_DIR))
        break
    yield directory


def commit_vocab(staged: str, workdir: str) -> None:
  """Copies the staged vocabulary files that the workdir lacks or holds otherwise into it."""
  source = os.path.join(staged, VOCAB_DIR)
  if not os.path.isdir(source):
    return
  target, copied = os.path.join(workdir, VOCAB_DIR), []
  for root, _, names in os.walk(source):
    for name in names:
      path = os.path.join(root, name)
      dest = os.path.join(target, os.path.relpath(path, source))
      if not os.path.exists(dest) or not filecmp.cmp(path, dest, shallow=False):
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(path, dest + '.tmp')
        os.replace(dest + '.tmp', dest)
        copied.append(os.path.relpath(dest, target))
  if copied:
    logging.info('Saved the vocabulary (%s) in %s.', ', '.join(sorted(copied)), target)


def record_config(workdir: str, config, step: int) -> None:
  """Writes `config` as WORKDIR/config.json; a different one there before is kept as
  config_history/config.STEP.json (the config the run used up to `step`), its changes logged."""
  path = os.path.join(workdir, CONFIG_FILE)
  text = config.to_json_best_effort(indent=2)
  if os.path.exists(path):
    with open(path, encoding='utf-8') as f:
      old = f.read()
    changed = changed_fields(json.loads(old), json.loads(text))
    if not changed:
      return
    history = os.path.join(workdir, HISTORY_DIR)
    os.makedirs(history, exist_ok=True)
    kept, n = os.path.join(history, f'config.{step}.json'), 1
    while os.path.exists(kept):
      kept, n = os.path.join(history, f'config.{step}.{n}.json'), n + 1
    shutil.copyfile(path, kept)
    logging.warning(
      'This run differs from the config.json of %s in: %s (the previous one is kept as %s).',
      workdir,
      changed,
      kept,
    )
  with open(path + '.tmp', 'w', encoding='utf-8') as f:
    f.write(text)
  os.replace(path + '.tmp', path)


def changed_fields(old: dict, new: dict) -> str:
  """'model.num_layers 2 -> 3, schedule ...' for the fields in which two configs differ."""
  old, new = flatten(old), flatten(new)
  keys = sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))
  return ', '.join(f'{key} {old.get(key)!r} -> {new.get(key)!r}' for key in keys)


class _QuietFileHandler(std_logging.FileHandler):
  """A log file that gives up quietly when it cannot be written (a full disk): what it copies
  is on the terminal, and the failure is reported once, by the run."""

  def handleError(self, record):
    del record


class Log:
  """The run's log lines, kept in memory until the run has a file to write them to (`to_file`),
  then appended there; `traceback` adds an exception's traceback to the file only."""

  def __init__(self):
    # Every record: a run logs a few hundred lines before it is accepted.
    self._memory = std_handlers.MemoryHandler(capacity=100_000, flushLevel=std_logging.CRITICAL + 1)
    self._file = None
    std_logging.getLogger().addHandler(self._memory)

  def to_file(self, path: str) -> None:
    self._file = _QuietFileHandler(path, encoding='utf-8')
    self._file.setFormatter(logging.PythonFormatter())
    self._memory.setTarget(self._file)
    self._memory.flush()
    std_logging.getLogger().removeHandler(self._memory)
    std_logging.getLogger().addHandler(self._file)
    # Tracebacks that libraries' threads print (Orbax's after a failed write) go here too.
    self._excepthook, sys.excepthook = sys.excepthook, self._print_to_file

  def _print_to_file(self, kind, error, trace) -> None:
    with contextlib.suppress(OSError):
      self._file.stream.write(''.join(traceback.format_exception(kind, error, trace)))

  def traceback(self, error: BaseException) -> str | None:
    """Writes `error`'s traceback into the log file; returns its path (None: no file yet)."""
    if self._file is None:
      return None
    try:
      self._file.stream.write(''.join(traceback.format_exception(error)))
      self._file.flush()
    except OSError:  # e.g. the disk is full: the error itself is still reported
      return None
    return self._file.baseFilename

  def close(self) -> None:
    if self._file is not None:
      sys.excepthook = self._excepthook
    for handler in (self._memory, self._file):
      if handler is not None:
        std_logging.getLogger().removeHandler(handler)
        with contextlib.suppress(OSError):  # a full disk fails the last flush
          handler.close()


def is_disk_full(error: BaseException) -> bool:
  """Whether `error`, or one it was raised from, is 'No space left on device' (or a quota)."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
      return True
    if 'No space left on device' in str(error):
      return True
    error = error.__cause__ or error.__context__
  return False


@contextlib.contextmanager
def run_log():
  """A `Log` for the block: an exception leaving it has its traceback written to the log file,
  if the block gave it one, and says where (`traceback_log`)."""
  log = Log()
  try:
    yield log
  except BaseException as error:
    path = log.traceback(error)
    if path:
      error.traceback_log = path
    raise
  finally:
    log.close()


def traceback_log(error: BaseException) -> str | None:
  """The log file holding `error`'s traceback, if one does (see `run_log`)."""
  return getattr(error, 'traceback_log', None)
