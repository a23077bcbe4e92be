"""Transformer classifier: a self-attention encoder with attention pooling on the documents of
configs/han.py (flattened to one token sequence), for the HAN comparison.

`--config.model.pooling=cls|mean|attention` picks how the encoder's states become one vector;
the score, norm placement and kernel are swappable as in every model.

Command:
  python train.py --config=configs/transformer_classifier.py --workdir=runs/transformer_classifier
  python eval.py --workdir=runs/transformer_classifier
Result: see the README's results table (measured on CPU).
"""

from configs import han
from training.config import default_config


def get_config(arg: str | None = None):
  """`arg` is unused."""
  del arg
  config = default_config('classification', 'transformer_classifier', num_layers=2, d_model=64,
                          num_heads=4, d_ff=128, norm='pre', pooling='attention', max_length=512)
  base = han.get_config()
  for field in ('num_train_steps', 'eval_every_steps', 'checkpoint_every_steps',
                'num_eval_decode', 'schedule', 'learning_rate', 'warmup_steps',
                'label_smoothing', 'weight_decay'):
    config[field] = base[field]
  return config
