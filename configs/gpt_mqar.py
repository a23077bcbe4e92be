"""GPT on multi-query associative recall (MQAR; Arora et al. 2023): a 2-layer decoder must learn
to look a key up in its context, the induction-style lookup attention does and fixed mixers cannot.

Each example lists 8 key-value pairs (keys from 64 names, values from 64, a fresh random mapping
per example), then queries all 8 keys in a new order, each followed by its value: 32 tokens, a
word vocabulary of 132 ids (4 specials). Only the 8 answers are scored; 5,000 training examples.
The evaluation reports the answer accuracy and, per head of the last layer, how often the
query's strongest weight lands on its matching key-value pair.

Command:
  python train.py --config=configs/gpt_mqar.py --workdir=runs/gpt_mqar
  python eval.py --workdir=runs/gpt_mqar
Result: see the README (measured on CPU).
"""

from training.config import default_config


def get_config(arg: str | None = None):
  """`arg` is unused."""
  del arg
  config = default_config('language_modeling', 'decoder_lm', num_layers=2, d_model=64,
                          num_heads=2, d_ff=128, dropout_rate=0.0, positions='rope',
                          max_length=32)
  config.dataset.update(name='mqar', builder_config='small', vocab='word', packing='example',
                        seq_length=31)           # 32 tokens: 31 inputs, 31 shifted targets
  config.num_train_steps = 3000
  config.eval_every_steps = 1000
  config.checkpoint_every_steps = 1000
  config.num_eval_decode = 1000                  # validation examples for the hit rate
  config.schedule = 'cosine'
  config.learning_rate = 3e-3
  config.warmup_steps = 200
  config.weight_decay = 0.1
  config.label_smoothing = 0.0
  return config
