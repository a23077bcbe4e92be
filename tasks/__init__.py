"""Tasks: one file per kind of experiment, each owning examples -> batches -> loss -> evaluation.

`config.task` names one of `TASKS`. Adding a task is a file here with a `tasks.base.Task`
subclass, one entry below, and a config (see docs/extending.md, "Adding a task").
"""

from collections.abc import Iterator, Mapping
import importlib
from typing import Any

import models
from tasks.base import VOCAB_DIR, BatchIterator, EvalOptions, Task

# Each task's class and the module that defines it, imported when the task is first asked for:
# a task's module imports its data's (TFDS, sacrebleu, image readers), which a command that
# runs one task never needs (importing them all cost prompt.py about a second on 2 CPU cores).
_CLASSES = {
  'captioning': ('tasks.captioning', 'Captioning'),
  'classification': ('tasks.classification', 'Classification'),
  'copy': ('tasks.algorithmic', 'Copy'),
  'image_classification': ('tasks.image_classification', 'ImageClassification'),
  'language_modeling': ('tasks.language', 'LanguageModeling'),
  'question_answering': ('tasks.question_answering', 'QuestionAnswering'),
  'translation': ('tasks.translation', 'Translation'),
}


class _Tasks(Mapping[str, type[Task]]):
  """`config.task` names -> Task classes; a class's module is imported on first lookup."""

  def __getitem__(self, name: str) -> type[Task]:
    module, cls = _CLASSES[name]
    return getattr(importlib.import_module(module), cls)

  def __iter__(self) -> Iterator[str]:
    return iter(_CLASSES)

  def __len__(self) -> int:
    return len(_CLASSES)


TASKS: Mapping[str, type[Task]] = _Tasks()


def task_class(name: Any) -> type[Task]:
  """`TASKS[name]`; an unknown name raises ValueError listing the valid ones."""
  if name not in TASKS:
    raise ValueError(f'config.task={name!r} is not one of {sorted(TASKS)}.')
  return TASKS[name]


def check_fits(task: str, model: str) -> None:
  """Raises ValueError, before anything is built, unless model `model` fits task `task`."""
  interface = task_class(task).interface
  model_cls = models.model_class(model)
  if not issubclass(model_cls, interface):
    raise ValueError(
      f'config.model.name={model!r} ({model_cls.__name__}) does not fit '
      f'config.task={task!r}, which needs a {interface.__name__} model; models '
      f'that fit: {models.fitting(interface)}.'
    )


def build(config, workdir: str) -> Task:
  """The task `config.task` names, with its data prepared, after checking the model fits it."""
  check_fits(config.task, config.model.name)
  return task_class(config.task)(config, workdir)


__all__ = [
  'VOCAB_DIR',
  'BatchIterator',
  'EvalOptions',
  'TASKS',
  'Task',
  'build',
  'check_fits',
  'task_class',
]
