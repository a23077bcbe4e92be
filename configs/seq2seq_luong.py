"""RNN Seq2Seq with Luong (general) attention on the offline dates task (-> YYYY-MM-DD).

The decoder scores its new state s_t against every encoder state after the GRU cell, and predicts
from the attentional state tanh(W_c [c_t; s_t]).

Command:
  python train.py --config=configs/seq2seq_luong.py --workdir=runs/luong
  python train.py --config=configs/seq2seq_luong.py --config.model.score=dot --workdir=runs/luong_dot
  python eval.py --workdir=runs/luong
Result: see README (results table).
"""

from configs import seq2seq_bahdanau


def get_config(arg: str | None = None):
  """`arg` is unused."""
  del arg
  config = seq2seq_bahdanau.get_config()
  config.model.attention = 'luong'
  config.model.score = 'general'
  return config
