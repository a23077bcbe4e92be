"""RNN Seq2Seq with Bahdanau (additive) attention on the offline dates task (-> YYYY-MM-DD).

Bidirectional GRU encoder; the decoder scores its previous state s_{t-1} against every encoder
state before the GRU cell.

Command:
  python train.py --config=configs/seq2seq_bahdanau.py --workdir=runs/bahdanau
  python eval.py --workdir=runs/bahdanau
Result (2 cores of an AMD EPYC, CPU, 3 min 20 s for 2000 steps + evaluation): test exact match
100% (greedy, 1000 examples); validation already 100% at step 1000. About 15 steps/s.
"""

import ml_collections

from configs import default


def get_config(arg: str | None = None):
  """`arg` is unused."""
  del arg
  config = default.get_config()
  config.model = ml_collections.ConfigDict(dict(
      name='seq2seq',
      embed_dim=64,
      hidden_dim=128,
      num_layers=1,
      bidirectional=True,
      attention='bahdanau',              # bahdanau (s_{t-1}, before the cell) | luong (s_t, after)
      score='additive',                  # additive | dot | general | scaled_dot | cosine
      dropout_rate=0.0,
  ))
  config.dataset.name = 'dates'
  config.dataset.builder_config = ''
  config.dataset.source_vocab = 'char'   # numeric dates ('12/04/1972') must be read digit by digit
  config.dataset.max_input_length = 40
  config.dataset.max_target_length = 10
  config.schedule = 'constant'
  config.learning_rate = 3e-3
  config.warmup_steps = 100
  config.label_smoothing = 0.0
  config.num_train_steps = 2000
  return config
