"""Transformer on a parallel corpus of your own: a file of `source<TAB>target` lines.

Real text in, real text out: case, accents, punctuation and placeholders stay as they are; one
SentencePiece vocabulary for both sides is trained on the training split; outputs are decoded
back to text and scored against the raw references (sacreBLEU BLEU and chrF, with signatures in
eval/metrics.json, and copy accuracy: placeholders and identifiers carried over intact). The best
checkpoint is the one with the highest chrF on the first 256 validation sentences, decoded
greedily. Validation and test are 5% of the distinct sources each, unless
`--config.dataset.validation_path` / `test_path` name files of their own.

Command (the French software messages of ../shared/data/translation, see docs/translation.md):
  python train.py --config=configs/tsv.py \
      --config.dataset.tsv_path=../shared/data/translation/software_en_fr.tsv --workdir=runs/tsv
  python eval.py --workdir=runs/tsv
  python -m benchmarks.translation_floors --tsv=../shared/data/translation/software_en_fr.tsv
Result on those messages (2 cores of an AMD EPYC, CPU, 3,000 steps in 32.3 min, greedy, 2,039
test sentences against the raw references): BLEU 40.4, chrF 57.3, copy accuracy 65.1% (beam 4:
41.9 / 58.6 / 65.5%). On the same split and in the same 32.3 min, Joey NMT's Transformer of the
same shape reaches 22.9 / 44.0 / 52.6% (`benchmarks/translation_peer.py`); floors: copy the source
15.5 / 30.1 / 92.9%, word for word 21.7 / 51.2 / 65.1%. The 32.3 min shared the cores with light
evaluation work for about 10 min; at the 1.8-2.0 steps/s of the quiet stretch it is about 28 min.
Alone, on 33,417 English->German messages (`python -m data.message_catalogs --language=de`),
29 min 49 s from start to exit, data preparation included, 11.5 GB peak: BLEU 35.0, chrF 52.0,
copy accuracy 63.2% (word-for-word floor 28.8 / 53.4 / 78.6%; docs/translation.md).
With `--config.model.copy_source=True` (a pointer over the source pieces, models/copy_head.py) on
the French messages: 31.7 min alone, BLEU 43.9, chrF 60.6, copy accuracy 74.8%; adding
`--config.model.copy_coverage=True` (coverage, See et al. 2017): 43.2 / 59.5 / 72.4%, no gain.
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
    lowercase=False,
    strip_accents=False,
    split_punctuation=False,
    source_vocab='sentencepiece',
    target_vocab='sentencepiece',
    shared_vocab=True,  # placeholders and identifiers are the same pieces on both sides
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
