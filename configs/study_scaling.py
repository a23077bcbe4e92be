"""Study: why scaled dot-product attention divides by √d_k (notes 000/003; Vaswani et al. 2017).

With q, k of unit-variance components, q·k has variance d_k: unscaled scores grow with √d_k and
saturate the softmax (rows of near-zero entropy, vanishing gradients through it). Sweeps d_k for
`dot` against `scaled_dot` on the default task, from the initial parameters (`eval_at_start`) on.

Command:
  python sweep.py --config=configs/study_scaling.py --workdir=runs/study_scaling
  python compare.py runs/study_scaling --metrics=attention_entropy,token_accuracy,loss
Result: see the README's studies section (measured on 2 CPU cores).
"""

import itertools

from configs import default

D_K = (16, 32, 64, 128, 256)


def get_config(arg: str | None = None):
  """The default experiment for 500 steps, evaluated every 100 from step 0; `arg` is unused."""
  del arg
  config = default.get_config()
  config.model.d_k = 32              # the default's head size (d_model 128 / 4 heads); swept
  config.num_train_steps = 500
  config.eval_every_steps = 100
  config.eval_at_start = True
  config.num_eval_decode = 0         # teacher-forced metrics only: the curves are the result
  return config


def get_sweep(arg: str | None = None):
  del arg
  return [{'model.score': score, 'model.d_k': d_k}
          for score, d_k in itertools.product(('dot', 'scaled_dot'), D_K)]
