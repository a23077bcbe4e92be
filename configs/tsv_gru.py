"""GRU encoder-decoder on a parallel corpus of your own: with Bahdanau's attention, or without.

The notes' comparison on real text: `configs/tsv_gru.py` is Bahdanau et al. (2015)'s decoder
(additive attention from s_{t-1}, context into the cell, deep output); `configs/tsv_gru.py:none`
is the same encoder-decoder with the context fixed to one vector per sentence (the mean of the
encoder states), the model attention was introduced to beat (Cho et al. 2014); `:luong` is Luong
et al. (2015)'s. Everything else is `configs/tsv.py`'s (real text, one SentencePiece vocabulary,
raw references, chrF on decoded validation sentences for the best checkpoint) except its tags
for placeholders: these GRUs were measured without them.

Command:
  python train.py --config=configs/tsv_gru.py \
      --config.dataset.tsv_path=../shared/data/translation/software_en_fr.tsv --workdir=runs/gru
  python train.py --config=configs/tsv_gru.py:none \
      --config.dataset.tsv_path=../shared/data/translation/software_en_fr.tsv --workdir=runs/gru0
  python eval.py --workdir=runs/gru
Result on the French software messages (2 cores of an AMD EPYC, CPU, 1800 steps, greedy, the
2,039 test sentences against the raw references): with attention BLEU 33.1, chrF 49.3, copy
accuracy 54.7%; without (`:none`) BLEU 22.0, chrF 36.4, copy accuracy 41.8%; attention's lead grows
from +7.7 BLEU on the shortest third of sources to +13.6 on the longest (docs/translation.md).
With attention, alone on the 2 cores (benchmarks/translation_peer.py): 23.9 min from start to exit,
the same test scores to the last digit as the earlier run, which took 51 min sharing the cores;
Joey NMT's GRU with Bahdanau attention, same split, pieces and 23.9 min: BLEU 9.0, chrF 22.8;
at its own recipe's settings and the best of three learning rates, 2,000 steps: 11.6, 28.7.
"""

from configs import tsv
from training.config import default_config

ATTENTION = ('bahdanau', 'none', 'luong')


def get_config(arg: str | None = None):
  """`arg`: the decoder's attention, one of `ATTENTION` ('' = bahdanau)."""
  attention = arg or 'bahdanau'
  if attention not in ATTENTION:
    raise ValueError(f'configs/tsv_gru.py:{arg}: the attention must be one of {ATTENTION}.')
  config = default_config(
    'translation',
    'seq2seq',
    embed_dim=256,
    hidden_dim=256,
    attention=attention,
    dropout_rate=0.2,
  )
  base = tsv.get_config()
  config.dataset.update(base.dataset.to_dict())
  config.dataset.protect_items = False  # measured without tags; with them, not yet
  for field in ('selection_metric', 'eval_every_steps'):
    config[field] = base[field]
  # The recurrence runs one target position after another: a step takes about twice the
  # Transformer's on 2 CPU cores, so fewer steps fit the same half hour.
  config.num_train_steps = 1800
  config.schedule = 'constant'
  config.learning_rate = 1e-3
  config.warmup_steps = 200
  return config
