"""Model selection: which validation metric decides the best checkpoint, which way, and when a
run stops early.

The metric is `config.selection_metric`, or the task's own (`Task.selection_metric`: accuracy for
classifiers and question answering, teacher-forced exact match for translation and captioning,
sequence accuracy for copying, the loss for language models). Its direction is derived from its
name here and nowhere else: losses, perplexities, bits and error rates are lowered, everything
else (accuracy, F1, exact match, BLEU) is raised. The best so far travels in every checkpoint's
metadata, so a resumed run keeps it, and its parameters are saved in WORKDIR/best/ (see
`training.loop`).
"""

import dataclasses
import math

_LOWER_IS_BETTER = ('loss', 'perplexity', 'bits_per_char', 'bits', 'error')


def lower_is_better(metric: str) -> bool:
  """Whether smaller values of `metric` are better ('loss@512' and 'loss' alike)."""
  name = metric.split('@')[0].rsplit('/', 1)[-1]
  return any(
    name == word or name.endswith('_' + word) or name.startswith(word + '_')
    for word in _LOWER_IS_BETTER
  )


def metric_for(config, task) -> str:
  """The metric that selects checkpoints: `config.selection_metric`, or the task's."""
  return config.selection_metric or task.selection_metric


@dataclasses.dataclass(frozen=True)
class Best:
  """The best evaluation so far.

  Attributes:
    metric: the selection metric.
    step: the step of the best evaluation (-1 = none yet).
    value: its value (NaN = none yet).
    stale: evaluations since the best one (for `patience`).
  """

  metric: str
  step: int = -1
  value: float = math.nan
  stale: int = 0

  def update(self, step: int, metrics: dict) -> tuple['Best', bool]:
    """`(the best after the evaluation `metrics` at `step`, whether it is the new best)`.

    Raises:
      ValueError: the metric is not among `metrics` (naming config.selection_metric).
    """
    if self.metric not in metrics:
      raise ValueError(
        f'config.selection_metric={self.metric!r} is not a validation metric of '
        f'this task; valid: {sorted(metrics)}.'
      )
    value = float(metrics[self.metric])
    improved = self.step < 0 or (
      value < self.value if lower_is_better(self.metric) else value > self.value
    )
    if improved:
      return Best(self.metric, step, value, 0), True
    return dataclasses.replace(self, stale=self.stale + 1), False

  def exhausted(self, patience: int) -> bool:
    """Whether `patience` evaluations (0 = never) have passed without improvement."""
    return patience > 0 and self.stale >= patience

  def to_meta(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_meta(cls, meta: dict | None, metric: str) -> 'Best':
    """The best recorded in a checkpoint's metadata; a fresh one when it has none or another
    metric was selected on (a resumed run that changed config.selection_metric starts afresh)."""
    if not meta or meta.get('metric') != metric:
      return cls(metric)
    return cls(metric, int(meta['step']), float(meta['value']), int(meta['stale']))

  def line(self) -> dict:
    """The metrics.jsonl values of the best so far: its step and value."""
    return {'best_step': self.step, f'best_{self.metric}': self.value}
