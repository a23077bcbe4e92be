"""What is in a workdir: every folder and file name a run keeps there, once.

  WORKDIR/
    config.json             the config the run trains with (`CONFIG_FILE`)
    config_history/         config.STEP.json: the config used up to STEP, when a rerun changed it
    checkpoints/STEP/       Orbax checkpoints of the train state (`CHECKPOINTS_DIR`)
    best/STEP/              the best checkpoint on validation (`BEST_DIR`, training.selection)
    vocab/                  the task's tokenizers, built by the task (`VOCAB_DIR`, tasks.base)
    metrics.jsonl           one JSON object per logged step and validation (`METRICS_FILE`)
    tensorboard/            the same metrics as TensorBoard events
    train.log, train.lock   the run's log; the lock held by the live train.py
    pretrained.json         convert.py's workdirs: what was loaded from the checkpoint
    profile/                jax.profiler traces of chosen train steps (config.profile_steps)
    eval/                   eval.py's outputs (`EVAL_DIR`): metrics.json, config.json (the config
                            evaluated), samples.jsonl, the task's samples file, eval.log,
                            pictures, explorer.html, profile/ (--profile); eval_NAME/ keeps
                            another beside it

A run's config is read back by `training.config.read_config`; which checkpoint a command reads,
and how, is training/restore.py's.
"""

import os
import re

from tasks import VOCAB_DIR

CONFIG_FILE = 'config.json'
HISTORY_DIR = 'config_history'
CHECKPOINTS_DIR = 'checkpoints'
BEST_DIR = 'best'
METRICS_FILE = 'metrics.jsonl'
TENSORBOARD_DIR = 'tensorboard'
LOG_FILE = 'train.log'
LOCK_FILE = 'train.lock'
PRETRAINED_FILE = 'pretrained.json'
PROFILE_DIR = 'profile'  # the traces TensorBoard's profile plugin and Perfetto read
EVAL_DIR = 'eval'  # --output=eval_NAME keeps another evaluation beside it
EVAL_METRICS_FILE = 'metrics.json'  # in eval/, with the config evaluated as CONFIG_FILE
EVAL_LOG_FILE = 'eval.log'  # in eval/, the only log eval.py writes
SAMPLES_JSONL = 'samples.jsonl'  # in eval/: every predicted example's fields, one object a line


def checkpoints_dir(workdir: str) -> str:
  return os.path.join(workdir, CHECKPOINTS_DIR)


def holds_checkpoints(path: str) -> bool:
  """Whether `path` is a training workdir (it has checkpoints/), not a pretrained checkpoint."""
  return os.path.isdir(checkpoints_dir(path))


def best_dir(workdir: str) -> str:
  return os.path.join(workdir, BEST_DIR)


def vocab_dir(workdir: str) -> str:
  return os.path.join(workdir, VOCAB_DIR)


def profile_dir(workdir: str) -> str:
  return os.path.join(workdir, PROFILE_DIR)


def checkpoint_step(path: str) -> tuple[str, int | None]:
  """`(workdir, step)` of a path `WORKDIR/checkpoints/STEP`; `(path, None)` for anything else."""
  path = os.path.normpath(path)
  parent, name = os.path.split(path)
  if name.isdigit() and os.path.basename(parent) == CHECKPOINTS_DIR:
    return os.path.dirname(parent), int(name)
  return path, None


def has_step(workdir: str, step: int) -> bool:
  """Whether checkpoint `step` is complete (Orbax renames a step's folder when it is)."""
  return os.path.isdir(os.path.join(checkpoints_dir(workdir), str(step)))


def check_eval_output(name: str) -> None:
  """Raises ValueError unless `name` is `EVAL_DIR` or `EVAL_DIR` + '_NAME' (eval.py --output)."""
  if not re.fullmatch(rf'{EVAL_DIR}(_[\w.-]+)?', name):
    raise ValueError(
      f"--output={name!r} must be '{EVAL_DIR}' or '{EVAL_DIR}_NAME' (letters, digits, '_.-'): "
      'a folder of the workdir beside its checkpoints, which it never replaces.'
    )


def eval_file(workdir: str, name: str, output: str = EVAL_DIR) -> str:
  """WORKDIR/OUTPUT/NAME: a file of an evaluation (eval/ unless `output` names another)."""
  return os.path.join(workdir, output, name)
