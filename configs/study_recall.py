"""Study: recall versus efficiency (Arora et al. 2023, "Zoology"; 2024, "Based").

Multi-query associative recall (`configs/gpt_mqar.py`'s task) with 4, 8, 16 and 32 key-value
pairs (sequences of 16 to 128 tokens), at two widths (d_model 64 and 128), for three ways of
mixing tokens in a 2-layer GPT: softmax attention, which keeps every key (a decoding state that
grows with the sequence); a sliding window of 16 tokens, shorter than every sequence but the
shortest; and linear attention, whose state is a fixed d_k x d_v matrix per head. Expected:
softmax recalls every setting its size allows, linear attention falls as the pairs outgrow its
state, and the window fails once the keys lie outside it.

Command:
  python sweep.py --config=configs/study_recall.py --workdir=runs/study_recall --parallel=2
  python sweep.py --config=configs/study_recall.py:64 ...   # one width only (12 runs)
  python compare.py runs/study_recall --metrics=accuracy,attention_hit_rate
Result (2 cores of an AMD EPYC, CPU, shared; width 64, 12 runs in 40-51 min; answer accuracy at
4 / 8 / 16 / 32 pairs): softmax 100.0 / 27.3 / 18.3 / 16.9%, window 100.0 / 36.2 / 6.7 / 2.6%,
linear 47.3 / 36.5 / 24.0 / 7.8%. At 4 pairs softmax and the window recall everything and linear
attention half; beyond, no mixer formed the lookup within 3,000 steps (softmax's attention hit
rate 0.17 / 0.07 / 0.00), so the budget, not softmax's size, limits it. Width 128 (the same
CPU, shared; 8 min on one NVIDIA H200, whose numbers differ by up to 1.6 points): softmax
100.0 / 28.5 / 21.7 / 14.4%, window 100.0 / 38.0 / 7.4 / 2.7%, linear 91.5 / 37.0 / 24.5 /
15.5%: linear attention's recall at 4 pairs grows with its state (91.5% against 47.3%), softmax
and the window are unchanged. docs/studies.md.
"""

import itertools

from configs import gpt_mqar
from data.builders.mqar import RECALL_PAIRS

WIDTHS = (64, 128)
WINDOW = 16
MIXERS = {
  'softmax': {},
  f'window {WINDOW}': {'model.window': WINDOW},
  'linear': {'model.attention': 'linear'},
}


def get_config(arg: str | None = None):
  """`configs/gpt_mqar.py` (2 layers, 3000 steps) on 20,000 training examples; `arg` unused."""
  del arg
  config = gpt_mqar.get_config()
  config.num_eval_decode = 256
  return config


def get_sweep(arg: str | None = None):
  """Every mixer, width and pair count; `arg` = the widths to run, e.g. '64' (default: both)."""
  widths = tuple(int(width) for width in arg.split(',')) if arg else WIDTHS
  return [
    {
      **mixer,
      'model.d_model': width,
      'dataset.builder_config': f'pairs_{pairs}',
      'dataset.seq_length': 4 * pairs - 1,
      'model.max_length': 4 * pairs,
    }
    for mixer, width, pairs in itertools.product(MIXERS.values(), widths, RECALL_PAIRS)
  ]
