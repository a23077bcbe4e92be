"""The paper's base Transformer (N=6, d_model=512, h=8, d_ff=2048, dropout 0.1, label smoothing
0.1, Adam beta2 0.98, eps 1e-9, rsqrt warm-up over 4000 steps) for a real corpus on a GPU.

Uses the TFDS `ted_hrlr_translate/pt_to_en` corpus (download it once with TFDS where there is
internet, then point --config.dataset.data_dir at it) with a shared SentencePiece vocabulary.

Command:
  python train.py --config=configs/transformer_base.py --workdir=runs/base \
      --config.dataset.data_dir=~/tensorflow_datasets
  python eval.py --workdir=runs/base --decode=beam --average_last=5
Result: not yet measured here (needs the corpus and a GPU).
"""

from configs import default


def get_config(arg: str | None = None):
  """`arg` is unused."""
  del arg
  config = default.get_config()
  config.model.update(
    num_layers=6,
    d_model=512,
    num_heads=8,
    d_ff=2048,
    dropout_rate=0.1,
    norm='post',
    max_length=256,
    share_embeddings=True,
    tie_output=True,
  )
  config.dataset.update(
    name='ted_hrlr_translate',
    builder_config='pt_to_en',
    source_key='pt',
    target_key='en',
    source_vocab='sentencepiece',
    target_vocab='sentencepiece',
    vocab_size=8000,
    shared_vocab=True,
    max_input_length=128,
    max_target_length=128,
    truncate=True,
    batch_size=128,
    eval_batch_size=128,
  )
  config.learning_rate = 512**-0.5 * 4000**-0.5  # the paper's peak: 7.0e-4
  config.warmup_steps = 4000
  config.num_train_steps = 100_000
  config.checkpoint_every_steps = 2000
  config.eval_every_steps = 5000
  config.keep_checkpoints = 5  # the paper averaged the last 5
  config.dtype = 'bfloat16'
  return config
