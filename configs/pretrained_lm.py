"""Continues the next-token training of a pretrained decoder (any decoder architecture of
`models.pretrained.ARCHITECTURES`) on a local plain-text file, with the checkpoint's own tokenizer.

`arg` is the checkpoint, as `--checkpoint` of convert.py: a short name of
`models.pretrained.PACKAGES` (SmolLM2-135M-Instruct, gemma-3-270m: `make llm`), a Hugging Face
folder or `.zip`, or a `.gguf` file. The model is its architecture and starts from its weights
(`config.init_from` is the checkpoint itself; a workdir convert.py wrote serves as well). With
fewer key/value heads (`--config.model.num_kv_heads=1`) `--config.init_kv_pooling=mean` merges
each group of the checkpoint's heads (training/kv_heads.py). The default text is the Python
Language Reference's topic pages that every CPython installation ships (`pydoc_data/topics.py`,
as configs/gpt_text.py); `--config.dataset.text_path` reads another. The text is cut into
windows of 128 of the checkpoint's pieces, each text closed by the tokenizer's end token; the
last 10% is held out (validation, then test, 5% each).

Command (make llm installs SmolLM2; CHECKPOINT may also be a folder or a .gguf of yours):
  python train.py --config=configs/pretrained_lm.py:SmolLM2-135M-Instruct \\
      --workdir=runs/smollm2_text                             # fine-tunes it
  python convert.py --checkpoint=SmolLM2-135M-Instruct --workdir=runs/smollm2
  python eval.py --workdir=runs/smollm2                       # the frozen model: bits per token
Result (2 busy cores of an AMD EPYC, CPU): on Pride and Prejudice in windows of 256 tokens
(--config.dataset.text_path, --config.dataset.seq_length=256, batch 4), SmolLM2-135M-Instruct's
validation bits per token go from 5.26 (its own weights: eval_at_start) to 4.81 in 30 steps, 4.90
on the test tail (5.38 before); 8-16 s a step. The step equals transformers + torch AdamW's
(benchmarks/finetune_peer.py); docs/pretrained_decoders.md, docs/llm_studies.md.
tests/test_pretrained_decoders.py runs these commands on a tiny random Llama-family checkpoint.
"""

import os
import pydoc_data.topics
from typing import Any

from models import pretrained
from training.config import default_config


def get_config(arg: str | None = None):
  """`arg`: the decoder checkpoint whose architecture this is (as convert.py's --checkpoint)."""
  if not arg:
    raise ValueError(
      'configs/pretrained_lm.py needs the checkpoint: '
      '--config=configs/pretrained_lm.py:CHECKPOINT (a short name, a folder or a .gguf file).'
    )
  config = _config(pretrained.read_config(arg))
  config.init_from = arg  # its weights and tokenizer: train.py needs no convert.py step
  return config


def converted(checkpoint: pretrained.Checkpoint) -> pretrained.Conversion:
  """A decoder checkpoint, read once (`pretrained.read`), as convert.py writes it: step 0
  of this config, every tensor its own, its output layer included."""
  config = _config(checkpoint.config)
  model, report = pretrained.load_decoder(checkpoint, seed=config.seed)
  return pretrained.Conversion(config, model, report, 'its output layer')


def _config(checkpoint_config: dict[str, Any]):
  """This config for the architecture of a decoder checkpoint's config.json."""
  config = default_config(
    'language_modeling', 'decoder_lm', **pretrained.config_fields(checkpoint_config)
  )
  config.dataset.update(
    name='text_file',
    text_path=os.path.abspath(pydoc_data.topics.__file__),
    vocab='pretrained',
    packing='stream',
    seq_length=128,
    held_out=0.05,
    batch_size=8,
    eval_batch_size=16,
  )
  config.init_from = ''  # get_config: the checkpoint itself; convert.py's workdir: its own step 0
  config.eval_at_start = True  # the converted checkpoint's metrics: the before
  config.num_train_steps = 100
  config.eval_every_steps = 100
  config.checkpoint_every_steps = 100
  config.num_eval_decode = 4
  config.max_decode_length = 32
  config.learning_rate = 1e-4
  config.warmup_steps = 10
  config.log_every_steps = 10
  # A fine-tune as transformers' Trainer runs one: AdamW with torch's betas and epsilon (beta2
  # 0.999, eps 1e-8) but the schema's weight decay of 0 (torch's AdamW defaults to 0.01), clipping
  # at 1, plain cross-entropy (the checkpoint was trained without label smoothing).
  config.update(schedule='cosine', beta2=0.999, eps=1e-8, label_smoothing=0.0)
  return config
