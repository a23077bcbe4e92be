"""Transformer on a local tab-separated parallel corpus (Anki/Tatoeba: english<TAB>other<TAB>...).

Download e.g. fra-eng.zip from manythings.org/anki once, unzip it, and pass the .txt path.
Text is lower-cased, accents are stripped and punctuation is split off; words are the tokens.

Command:
  python train.py --config=configs/tsv.py --config.dataset.tsv_path=fra.txt --workdir=runs/tsv
  python eval.py --workdir=runs/tsv
Result: not yet measured here (needs a corpus file).
"""

from configs import default


def get_config(arg: str | None = None):
  """`arg` is unused."""
  del arg
  config = default.get_config()
  config.model.update(num_layers=3, d_model=256, num_heads=4, d_ff=1024)
  config.dataset.update(
    name='tsv_parallel',
    builder_config='',
    tsv_path='',
    lowercase=True,
    strip_accents=True,
    split_punctuation=True,
    source_vocab='word',
    target_vocab='word',
    vocab_size=16000,
    max_input_length=32,
    max_target_length=32,
  )
  config.num_train_steps = 20_000
  config.learning_rate = 1e-3
  config.warmup_steps = 2000
  return config
