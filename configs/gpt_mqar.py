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
Result (2 cores of an AMD EPYC, CPU, 3000 steps at 40-80 steps/s): test answer accuracy 100.0%
(8,000 answers of 1,000 examples, all examples exact), 79 s of training (46-55 s on a quieter
machine); attention hit rate 100.0% (head 0 of layer 1; head 1: 99.7%): layer 0 becomes a
previous-token head and layer 1 puts its strongest weight on the value right after the matching
key, the induction circuit. The jump from 30% to 99.8% train accuracy comes at steps 1400-1600.
`--config.model.score=cosine` and `--config.model.attention_impl=chunked|reference` also reach
100%; the unscaled `dot` and `general` scores and `additive` stay at 15-17% (they fit the training
examples instead). With `--config.dataset.builder_config=default` (16 pairs, 64 tokens,
`seq_length=63`, `model.max_length=64`) 8000 steps reach only 24%: the transition had not come.
"""

from training.config import default_config


def get_config(arg: str | None = None):
  """`arg` is unused."""
  del arg
  config = default_config(
    'language_modeling',
    'decoder_lm',
    num_layers=2,
    d_model=64,
    num_heads=2,
    d_ff=128,
    dropout_rate=0.0,
    positions='rope',
    max_length=32,
  )
  config.dataset.update(
    name='mqar', builder_config='small', vocab='word', packing='example', seq_length=31
  )  # 32 tokens: 31 inputs, 31 shifted targets
  config.num_train_steps = 3000
  config.eval_every_steps = 1000
  config.checkpoint_every_steps = 1000
  config.num_eval_decode = 1000  # validation examples for the hit rate
  config.schedule = 'cosine'
  config.learning_rate = 3e-3
  config.warmup_steps = 200
  config.weight_decay = 0.1
  config.label_smoothing = 0.0
  return config
