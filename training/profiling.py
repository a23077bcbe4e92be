"""A `jax.profiler` trace of chosen train steps, written into the workdir (`config.profile_steps`).

    python train.py --config=configs/tsv.py --workdir=runs/tsv --config.profile_steps=10:13

traces the steps that take the state from step 10 to step 13 into WORKDIR/profile/
(`plugins/profile/RUN/HOST.xplane.pb` for TensorBoard's profile plugin or XProf, and
`HOST.trace.json.gz`, which Perfetto opens); what the loop does between them (logging, an
evaluation, a checkpoint at step 11 or 12) is in it too, what it does after step 13 is not. A
step whose batch has a shape the run has not met before (the first step, and with bucketed
batches the first of each bucket) compiles the step function again: the compilation is in the
trace, on the Python thread, apart from the XLA ops that run the step.
"""

import re

from absl import logging
import jax

from training import layout


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

  The loop calls `before(step, state)` before each train step, with `step` the state's step
  before it, `after(step, state)` once the step has counted it, and `stop()` when it ends (also
  on an error), so that what it does between steps at the range's ends (a final evaluation, a
  checkpoint) stays out of the trace.
  """

  def __init__(self, spec: str, workdir: str):
    self.steps = parse_steps(spec)
    self.directory = layout.profile_dir(workdir)
    self.running = False

  def before(self, step: int, state) -> None:
    """Starts the trace before step FIRST (or the first step after it, for a resumed run), once
    `state`, its input, is computed: the step before it runs on while the loop goes on."""
    if self.steps and not self.running and self.steps[0] <= step < self.steps[1]:
      jax.block_until_ready(state)
      logging.info('Tracing steps %d to %d into %s.', step, self.steps[1], self.directory)
      jax.profiler.start_trace(self.directory)
      self.running = True

  def after(self, step: int, state) -> None:
    """Stops the trace once the state has reached step END and `state` is computed."""
    if self.running and step >= self.steps[1]:
      jax.block_until_ready(state)
      self.stop()

  def stop(self) -> None:
    """Writes the trace, if one is running."""
    if self.running:
      self.running = False
      jax.profiler.stop_trace()
      logging.info('Wrote the trace into %s.', self.directory)
