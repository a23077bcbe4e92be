"""Study: train short, test long (Press et al. 2022; Kazemnejad et al. 2023 on no positions).

A character-level GPT is trained on windows of 64 characters of `configs/gpt_text.py`'s corpus
and evaluated on the held-out validation text cut into windows of 64, 128, 256 and 512 (bits per
character over every position of every window, `dataset.eval_lengths`), once per way of giving
it positions: sinusoidal, learned, rotary, ALiBi, T5 buckets and none. A learned table has no
embedding past its 64 rows, so that run is evaluated at 64 only.

Command:
  python sweep.py --config=configs/study_length.py --workdir=runs/study_length --parallel=2
  python compare.py runs/study_length --against=metrics \
      --metrics=bits_per_char@64,bits_per_char@128,bits_per_char@256,bits_per_char@512
Result (2 cores of an AMD EPYC, CPU, 6 runs two at a time, 38 min on a machine shared with
the test suite, 63 min on a busier one, the same numbers; bits per character at 64 / 128 / 256
/ 512): ALiBi 1.35 / 1.32 / 1.32 / 1.32, flat as the paper
reports; rotary 1.28 / 1.44 / 2.03 / 2.74 and sinusoidal 1.38 / 2.62 / 3.57 / 3.67 degrade past
the training length; T5 1.34 / 1.45 / 1.90 / 2.53; none 1.50 / 1.61 / 2.18 / 2.67 (no better
than rotary here); learned 1.38 at 64. Table and figure: docs/studies.md.
"""

from configs import gpt_text

TRAIN_LENGTH = 64
EVAL_LENGTHS = (64, 128, 256, 512)
POSITIONS = ('sinusoidal', 'learned', 'rope', 'alibi', 't5', 'none')


def get_config(arg: str | None = None):
  """`configs/gpt_text.py` on windows of 64 characters for 2000 steps; `arg` is unused."""
  config = gpt_text.get_config(arg)
  config.model.max_length = TRAIN_LENGTH  # what a learned table covers
  config.dataset.seq_length = TRAIN_LENGTH
  config.dataset.eval_lengths = EVAL_LENGTHS
  config.num_train_steps = 2000
  config.eval_every_steps = 1000
  config.checkpoint_every_steps = 1000
  config.num_eval_decode = 4
  config.max_decode_length = TRAIN_LENGTH // 2  # a 32-character prompt, 32 more: within 64
  return config


def get_sweep(arg: str | None = None):
  del arg
  return [
    {
      'model.positions': positions,
      **({'dataset.eval_lengths': (TRAIN_LENGTH,)} if positions == 'learned' else {}),
    }
    for positions in POSITIONS
  ]
