"""Transformer on a parallel corpus of your own: a file of `source<TAB>target` lines.

Real text in, real text out: case, accents, punctuation and placeholders stay as they are; one
SentencePiece vocabulary for both sides is trained on the training split; each placeholder or
identifier of a source becomes a numbered tag on both sides and an output's tags become the
source's items again (`dataset.protect_items`); a pointer lets attention copy source pieces
(`model.copy_source`); outputs are decoded back to text and scored against the raw references
(sacreBLEU BLEU and chrF, with signatures in eval/metrics.json, and copy accuracy: placeholders and
identifiers carried over intact). The best checkpoint is the one with the highest chrF on the
first 256 validation sentences, decoded greedily. Validation and test are 5% of the distinct
sources each, unless `--config.dataset.validation_path` / `test_path` name files of their own.

Command (the French software messages of ../shared/data/translation, see docs/translation.md):
  python train.py --config=configs/tsv.py \
      --config.dataset.tsv_path=../shared/data/translation/software_en_fr.tsv --workdir=runs/tsv
  python eval.py --workdir=runs/tsv
  python -m benchmarks.translation_floors --tsv=../shared/data/translation/software_en_fr.tsv
Result on those messages (2 cores of an AMD EPYC, CPU, alone, 3,000 steps in 27 min 28 s and 29 min
59.8 s from start to exit in two runs with the same scores, the corpus already prepared, 12.5 GB
peak; greedy, 2,039 test sentences against the raw references): BLEU 45.5, chrF 61.0, copy accuracy
88.2%, exact match 11.4% (`eval.py --decode=beam`, beam 4: 46.4 / 62.0 / 90.3% / 11.9%); floors:
copy the source 15.5 / 30.1 / 92.9%, word for word 21.7 / 51.2 / 65.1%. Without the tags and the
pointer (`--config.dataset.protect_items=False --config.model.copy_source=False`, this config until
they were measured): 40.4 / 57.3 / 65.1%. On the same split, in the same budget (27.5 min in that
benchmark run) and with the same tags, Joey NMT's Transformer of the same shape reached 27.2 / 46.9
/ 86.7% at this config's settings, its best, and 19.5 / 39.7 / 81.5% at its own recipe's
(`benchmarks/translation_peer.py`).
On 33,417 English->German messages (`python message_catalogs.py --language=de`), only the
path given: 26 min 58 s alone, BLEU 39.5, chrF 55.7, copy accuracy 85.1%, ahead of the
word-for-word floor (28.8 / 53.4 / 78.6%) on each (docs/translation.md).
"""

from configs import default


def get_config(arg: str | None = None):
  """`arg` is unused."""
  del arg
  config = default.get_config()
  # A pointer over the source pieces (models/copy_head.py): placeholders and identifiers are
  # copied by attention rather than regenerated from the vocabulary.
  config.model.update(num_layers=3, d_model=256, num_heads=4, d_ff=1024, copy_source=True)
  config.dataset.update(
    name='tsv_parallel',
    builder_config='',
    tsv_path='',
    lowercase=False,
    strip_accents=False,
    split_punctuation=False,
    source_vocab='sentencepiece',
    target_vocab='sentencepiece',
    shared_vocab=True,  # placeholders and identifiers are the same pieces on both sides
    protect_items=True,  # each placeholder or identifier one tag (data/placeholders.py)
    vocab_size=8000,
    max_input_length=64,
    max_target_length=64,
  )
  config.selection_metric = 'chrf'  # decoded, not teacher-forced: what the test scores
  config.num_train_steps = 3000
  config.eval_every_steps = 500
  config.learning_rate = 1e-3
  config.warmup_steps = 500
  return config
