"""HAN: a Hierarchical Attention Network on the generated key-sentence documents.

Documents of 4-8 sentences whose topic (sports, science, music, food) is carried by one or two
key sentences; the distractors include sentences that mention other topics' words in negated or
irrelevant context ("Nobody mentioned the orchestra."), so counting words is not enough and the
model must find the sentence that matters. Every example records its key sentences, so the
evaluation also reports how often the highest sentence weight falls on one.

Command:
  python train.py --config=configs/han.py --workdir=runs/han
  python eval.py --workdir=runs/han
Result (2 cores of an AMD EPYC, CPU): test accuracy 100.0%, macro-F1 100.0%, sentence-attention
hit rate 100.0% (1000 documents), in 48 s of training (1200 steps, about 60 steps/s) and 6 s of
evaluation.
"""

from training.config import default_config


def get_config(arg: str | None = None):
  """`arg` is unused."""
  del arg
  config = default_config('classification', 'han', embed_dim=64, hidden_dim=32)
  # 50,000 training documents; validation and test are those of the 10,000-document default.
  config.dataset.builder_config = 'large'
  config.num_train_steps = 1200
  config.eval_every_steps = 400
  config.checkpoint_every_steps = 400
  config.num_eval_decode = 1000  # validation examples predicted: hit rate, macro-F1
  config.schedule = 'cosine'
  config.learning_rate = 3e-3
  config.warmup_steps = 100
  config.label_smoothing = 0.0
  config.weight_decay = 0.0
  return config
