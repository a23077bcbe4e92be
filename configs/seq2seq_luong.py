"""RNN Seq2Seq with Luong (general) attention on the offline dates task (-> YYYY-MM-DD).

The decoder scores its new state s_t against every encoder state after the GRU cell, and predicts
from the attentional state tanh(W_c [c_t; s_t]).

Command:
  python train.py --config=configs/seq2seq_luong.py --workdir=runs/luong
  python train.py --config=configs/seq2seq_luong.py --config.model.score=dot \
      --workdir=runs/luong_dot
  python eval.py --workdir=runs/luong
Result (2 cores of an AMD EPYC, CPU, 2 min 52 s for 2000 steps + evaluation): test exact match
100% (greedy, 1000 examples); validation 97.7% at step 500 and 100% from step 1000.
"""

from configs import seq2seq_bahdanau


def get_config(arg: str | None = None):
  """`arg` is unused."""
  del arg
  config = seq2seq_bahdanau.get_config()
  config.model.attention = 'luong'
  config.model.score = 'general'
  return config
