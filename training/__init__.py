"""Training and evaluation shared by train.py and eval.py: steps, optimizer, checkpoints, metrics."""

from training.loop import train_and_evaluate
from training.metrics import quiet_library_logs
from training.run_eval import evaluate_checkpoint, load_config
from training.setup import DEFAULT_COMPILATION_CACHE, enable_compilation_cache
