"""Metric writers (metrics.jsonl and TensorBoard events) and the live progress line."""

import importlib
import json
import logging as std_logging
import os
import sys
import time

from absl import logging
import jax

from training import layout


def _import_tensorboardx():
  """tensorboardX, kept from importing torch: where torch is installed (the test and bench extras
  install it) tensorboardX imports it at once, about 1.8 s of every train.py start on 2 CPU cores,
  only to accept torch tensors, and Attend writes Python floats."""
  hide = 'torch' not in sys.modules
  if hide:
    sys.modules['torch'] = None  # `import torch` raises ImportError, which tensorboardX allows
  try:
    return importlib.import_module('tensorboardX')
  finally:
    if hide:
      del sys.modules['torch']


tensorboardX = _import_tensorboardx()


class MetricsWriter:
  """Appends {'step', 'split', **values} lines to metrics.jsonl and scalars to TensorBoard.

  Only process 0 writes, so multi-host runs produce one file.
  """

  def __init__(self, workdir: str):
    self._enabled = jax.process_index() == 0
    if self._enabled:
      self._jsonl = open(os.path.join(workdir, layout.METRICS_FILE), 'a', encoding='utf-8')
      self._tensorboard = tensorboardX.SummaryWriter(os.path.join(workdir, layout.TENSORBOARD_DIR))

  def write(self, step: int, split: str, values: dict) -> None:
    if not self._enabled:
      return
    values = {key: float(value) for key, value in values.items()}
    self._jsonl.write(json.dumps(dict(step=step, split=split, **values)) + '\n')
    self._jsonl.flush()
    for key, value in values.items():
      self._tensorboard.add_scalar(f'{split}/{key}', value, step)
    self._tensorboard.flush()

  def close(self) -> None:
    if self._enabled:
      self._jsonl.close()
      self._tensorboard.close()


class Progress:
  """Logs 'step 120/3000 | loss 1.234 | 12.3 steps/s | 4,567 tokens/s | ETA 3m55s' lines.

  Time that is not training (the first step's compilation, evaluations: `pause`) is left out of
  the rates, so the ETA after the first steps is that of the steps to come. A slow run also gets
  a line every `EVERY_SECONDS` (`due`) between its `log_every_steps` lines.
  """

  EVERY_SECONDS = 30.0

  def __init__(self, first_step: int, last_step: int, unit: str):
    """Starts the clock; `unit` names what `update` counts (the task's, e.g. 'tokens')."""
    self._last_step, self._unit = last_step, unit
    self._step, self._time, self._paused, self._skipped = first_step, time.perf_counter(), 0.0, 0

  def pause(self, seconds: float, steps: int = 0) -> None:
    """Leaves `seconds` out of the current interval, with the `steps` they ran (a compiled
    step runs once inside its compilation's time)."""
    self._paused, self._skipped = self._paused + seconds, self._skipped + steps

  def due(self) -> bool:
    """Whether `EVERY_SECONDS` have passed since the last line."""
    return time.perf_counter() - self._time >= self.EVERY_SECONDS

  def update(self, step: int, count: int, values: dict) -> dict:
    """Logs and returns the rates since the last call, given the `count` of units since then."""
    now = time.perf_counter()
    steps = step - self._step - self._skipped
    elapsed = max(now - self._time - self._paused, 1e-9)
    timed = count * steps / max(step - self._step, 1)  # the units of the timed steps
    parts = [f'step {step}/{self._last_step}']
    parts += [f'{key} {value:.4g}' for key, value in values.items()]
    rates = {}
    if steps > 0:
      rates = {'steps_per_s': steps / elapsed, f'{self._unit}_per_s': timed / elapsed}
      eta = duration((self._last_step - step) * elapsed / steps)
      parts += [f'{steps / elapsed:.2f} steps/s', f'{timed / elapsed:,.0f} {self._unit}/s']
      parts.append(f'ETA {eta}')
    else:  # only the compiled step so far: no rate to tell yet
      parts.append('ETA after the next steps')
    logging.info('%s', ' | '.join(parts))
    self._step, self._time, self._paused, self._skipped = step, now, 0.0, 0
    return rates


def duration(seconds: float) -> str:
  """'3m55s', or '1h05m' from an hour on."""
  minutes, seconds = divmod(int(seconds), 60)
  hours, minutes = divmod(minutes, 60)
  return f'{hours}h{minutes:02d}m' if hours else f'{minutes}m{seconds:02d}s'


def quiet_library_logs() -> None:
  """Keeps the terminal readable: drops Orbax's per-save INFO chatter, shows a logged exception
  as its message line (the traceback goes to the run's log file, see training/workdir.py), and
  drops asyncio's notes on the writes Orbax abandoned after a failed save, which come at exit."""

  def keep(record) -> bool:
    if record.name == 'asyncio' and 'never retrieved' in record.getMessage():
      return False
    return record.levelno >= std_logging.WARNING or '/orbax/' not in record.pathname

  handler = logging.get_absl_handler()
  handler.addFilter(keep)
  handler.python_handler.setFormatter(_WithoutTraceback(handler.python_handler.formatter))


class _WithoutTraceback(std_logging.Formatter):
  """`formatter`'s lines without a record's traceback (other handlers still see it)."""

  def __init__(self, formatter: std_logging.Formatter):
    super().__init__()
    self._formatter = formatter

  def format(self, record) -> str:
    saved = record.exc_info, record.exc_text, record.stack_info
    record.exc_info = record.exc_text = record.stack_info = None
    try:
      return self._formatter.format(record)
    finally:
      record.exc_info, record.exc_text, record.stack_info = saved
