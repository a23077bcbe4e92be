"""Digit captions with a Transformer decoder: causal self-attention over the words so far and
cross-attention over the CNN's regions (the captioning counterpart of configs/caption_digits.py).

Command:
  python train.py --config=configs/caption_digits_transformer.py \
      --workdir=runs/caption_digits_transformer
  python eval.py --workdir=runs/caption_digits_transformer
Result: measured below.
"""

from configs import caption_digits
from training.config import default_config


def get_config(arg: str | None = None):
  """`arg` is unused."""
  del arg
  config = default_config('captioning', 'captioner', encoder='cnn', decoder='transformer',
                          d_model=64, cnn_channels=(32, 64), decoder_layers=1, num_heads=4,
                          d_ff=128)
  base = caption_digits.get_config()
  for field in set(base) - {'model'}:  # the same data and training as the GRU captioner
    config[field] = base[field]
  return config
