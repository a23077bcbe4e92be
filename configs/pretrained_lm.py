"""Continues the next-token training of a pretrained decoder (GPT-2, Llama, Mistral, Qwen2;
models/pretrained_decoders.py) on a local plain-text file, with the checkpoint's own tokenizer.

`arg` is the checkpoint's folder (config.json, safetensors, tokenizer.json), as `--checkpoint`
of convert.py: the model is its architecture, and `config.init_from` the workdir convert.py
wrote for it. The default text is the Python Language Reference's topic pages that every CPython
installation ships (`pydoc_data/topics.py`, as configs/gpt_text.py); `--config.dataset.text_path`
reads another. The text is cut into windows of 128 of the checkpoint's pieces, each text closed
by the tokenizer's end token; the last 10% is held out (validation, then test, 5% each).

Command (this registry ships no decoder weights: FOLDER is one of yours):
  python convert.py --checkpoint=FOLDER --workdir=runs/my_decoder
  python eval.py --workdir=runs/my_decoder                    # the frozen model: bits per token
  python train.py --config=configs/pretrained_lm.py:FOLDER --config.init_from=runs/my_decoder \\
      --workdir=runs/my_decoder_text
Result: not measured here on a real checkpoint (none ships); tests/test_pretrained_decoders.py
runs these commands on a tiny random Llama-family checkpoint.
"""

import os
import pydoc_data.topics
from typing import Any

from models.checkpoint_files import Checkpoint, Conversion
from models.pretrained import read_config
from models.pretrained_decoders import config_fields, load_decoder
from training.config import default_config


def get_config(arg: str | None = None):
  """`arg`: the decoder checkpoint's folder whose architecture this is."""
  if not arg:
    raise ValueError(
      'configs/pretrained_lm.py needs the checkpoint folder: '
      '--config=configs/pretrained_lm.py:FOLDER.'
    )
  return _config(read_config(arg))


def converted(checkpoint: Checkpoint) -> Conversion:
  """A decoder checkpoint, read once (`models.pretrained.read`), as convert.py writes it: step 0
  of this config, every tensor its own, its output layer included."""
  config = _config(checkpoint.config)
  model, report = load_decoder(checkpoint, seed=config.seed)
  return Conversion(config, model, report, 'its output layer')


def _config(checkpoint_config: dict[str, Any]):
  """This config for the architecture of a decoder checkpoint's config.json."""
  config = default_config('language_modeling', 'decoder_lm', **config_fields(checkpoint_config))
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
  config.init_from = ''  # the workdir convert.py wrote: --config.init_from=WORKDIR
  config.eval_at_start = True  # the converted checkpoint's metrics: the before
  config.num_train_steps = 100
  config.eval_every_steps = 100
  config.checkpoint_every_steps = 100
  config.num_eval_decode = 4
  config.max_decode_length = 32
  config.learning_rate = 1e-4
  config.warmup_steps = 10
  return config
