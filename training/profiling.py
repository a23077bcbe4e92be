"""A `jax.profiler` trace of chosen train steps, written into the workdir (`config.profile_steps`).

    python train.py --config=configs/tsv.py --workdir=runs/tsv --config.profile_steps=10:13

traces the steps that take the state from step 10 to step 13 into WORKDIR/profile/
(`plugins/profile/RUN/HOST.xplane.pb` for TensorBoard's profile plugin or XProf, and
`HOST.trace.json.gz`, which Perfetto opens). The first step a run makes also compiles the step
function: a range that starts later leaves compilation out. Whatever the loop does between the
traced steps (an evaluation, a checkpoint) is in the trace too.
"""

import os
import re

from absl import logging
import jax

PROFILE_DIR = 'profile'  # WORKDIR/profile/: the traces TensorBoard's profile plugin reads


def profile_dir(workdir: str) -> str:
  return os.path.join(workdir, PROFILE_DIR)


def parse_steps(spec: str) -> tuple[int, int] | None:
  """`(first, end)` of a step range 'FIRST:END' (END excluded); None for '' (no trace).

  Raises:
    ValueError: `spec` is not '' or two integers 0 <= FIRST < END.
  """
  if spec == '':
    return None
  match = re.fullmatch(r'\s*(\d+)\s*:\s*(\d+)\s*', spec)
  if not match or int(match[1]) >= int(match[2]):
    raise ValueError(
      f"config.profile_steps={spec!r} must be '' (off) or a step range 'FIRST:END' with "
      "0 <= FIRST < END, e.g. '10:13' for the steps from 10 to 13."
    )
  return int(match[1]), int(match[2])


class StepTrace:
  """Starts and stops `jax.profiler`'s trace around the train steps of `config.profile_steps`.

  The loop calls `step(step, state)` before each train step, with `step` the state's step before
  it, and `stop()` when it ends (also on an error).
  """

  def __init__(self, spec: str, workdir: str):
    self.steps = parse_steps(spec)
    self.directory = profile_dir(workdir)
    self.running = False

  def step(self, step: int, state) -> None:
    """Starts the trace before step FIRST (or the first step after it, for a resumed run), and
    stops it before step END, once `state`, step END's input, is computed."""
    if self.steps is None:
      return
    first, end = self.steps
    if not self.running and first <= step < end:
      logging.info('Tracing steps %d to %d into %s.', step, end, self.directory)
      jax.profiler.start_trace(self.directory)
      self.running = True
    elif self.running and step >= end:
      jax.block_until_ready(state)
      self.stop()

  def stop(self) -> None:
    """Writes the trace, if one is running."""
    if self.running:
      self.running = False
      jax.profiler.stop_trace()
      logging.info('Wrote the trace into %s.', self.directory)
