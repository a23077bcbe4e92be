"""Tasks: one file per kind of experiment, each owning examples -> batches -> loss -> evaluation.

`config.task` names one of `TASKS`. Adding a task is a file here with a `tasks.base.Task`
subclass, one entry below, and a config (see docs/extending.md, "Adding a task").
"""

from typing import Any

import models
from tasks.algorithmic import Copy
from tasks.base import VOCAB_DIR, BatchIterator, EvalOptions, Task
from tasks.captioning import Captioning
from tasks.classification import Classification
from tasks.image_classification import ImageClassification
from tasks.language import LanguageModeling
from tasks.question_answering import QuestionAnswering
from tasks.translation import Translation

TASKS: dict[str, type[Task]] = {
  'captioning': Captioning,
  'classification': Classification,
  'copy': Copy,
  'image_classification': ImageClassification,
  'language_modeling': LanguageModeling,
  'question_answering': QuestionAnswering,
  'translation': Translation,
}


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
  'Captioning',
  'Classification',
  'Copy',
  'EvalOptions',
  'ImageClassification',
  'LanguageModeling',
  'QuestionAnswering',
  'TASKS',
  'Task',
  'Translation',
  'build',
  'check_fits',
  'task_class',
]
