"""RNN Seq2Seq with Bahdanau (additive) attention on the offline dates task (-> YYYY-MM-DD).

Bidirectional GRU encoder; the decoder scores its previous state s_{t-1} against every encoder
state before the GRU cell.

Command:
  python train.py --config=configs/seq2seq_bahdanau.py --workdir=runs/bahdanau
  python eval.py --workdir=runs/bahdanau
Result (2 cores of an AMD EPYC, CPU, 3 min 20 s for 2000 steps + evaluation): test exact match
100% (greedy, 1000 examples); validation already 100% at step 1000. About 15 steps/s.
"""

from training.config import default_config


def get_config(arg: str | None = None):
  """`arg` is unused."""
  del arg
  config = default_config(
    'translation',
    'seq2seq',
    embed_dim=64,
    hidden_dim=128,
    attention='bahdanau',  # bahdanau (s_{t-1}, before the cell) | luong (s_t, after)
    score='additive',
  )  # additive | dot | general | scaled_dot | cosine
  config.dataset.update(
    name='dates',
    builder_config='',
    lowercase=True,
    source_vocab='char',  # numeric dates ('12/04/1972') must be read digit by digit
    max_input_length=40,
    max_target_length=10,
    bucket_step=16,
  )
  config.schedule = 'constant'
  config.learning_rate = 3e-3
  config.warmup_steps = 100
  config.label_smoothing = 0.0
  config.num_train_steps = 2000
  return config
