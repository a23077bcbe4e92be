"""Study: the attention score functions of the notes compared on translation.

dot (Luong), scaled_dot (Vaswani), general / bilinear (Luong), additive (Bahdanau) and cosine
(with a learned temperature), each in every attention of the default Transformer: accuracy, time
per step, and how sharply the decoder attends (mean entropy of its cross-attention weights).

Command:
  python sweep.py --config=configs/study_scores.py --workdir=runs/study_scores
  python compare.py runs/study_scores --metrics=exact_match,token_accuracy,attention_entropy
Result: see the README's studies section (measured on 2 CPU cores).
"""

from configs import default

SCORES = ('dot', 'scaled_dot', 'general', 'additive', 'cosine')


def get_config(arg: str | None = None):
  """The default experiment for 1000 steps, evaluated every 250; `arg` is unused."""
  del arg
  config = default.get_config()
  config.num_train_steps = 1000
  config.eval_every_steps = 250
  return config


def get_sweep(arg: str | None = None):
  del arg
  return [{'model.score': score} for score in SCORES]
