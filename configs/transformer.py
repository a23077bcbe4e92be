"""Transformer on number_words en->de, post-norm (paper) or pre-norm, chosen by the config arg.

Command:
  python train.py --config=configs/transformer.py:post --workdir=runs/transformer_post
  python train.py --config=configs/transformer.py:pre --workdir=runs/transformer_pre
  python eval.py --workdir=runs/transformer_pre
Result (2 cores of an AMD EPYC, CPU): post-norm is configs/default.py (test exact match 99.6%);
pre-norm reached test exact match 100% (greedy, 1000 examples) in 1500 steps, 8 min 26 s while
the machine also ran the test suite.
"""

from configs import default


def get_config(arg: str | None = None):
  """`arg` is the norm placement: 'post' (default, the paper's LayerNorm(x + Sublayer(x))) or
  'pre'."""
  config = default.get_config()
  config.model.norm = arg or 'post'
  return config
