"""Writes a decoder's checkpoint as a Hugging Face folder or a GGUF file, which
transformers, llama.cpp and Attend itself read back (the architectures: Llama, Mistral, Qwen2,
Gemma 3 and GPT-2, whichever computes the model exactly; a model of differential attention as
DiffLlama, of latent attention as DeepSeek-V3 or, with its sparse indexer, V3.2, a Gated DeltaNet
hybrid as Qwen3-Next, each as a Hugging Face folder only).

  python export.py --workdir=runs/smollm2_text --format=hf --out=exported/smollm2
  python export.py --workdir=runs/smollm2_text --format=gguf --out=smollm2.gguf --dtype=q8_0
  python export.py --workdir=runs/gemma3 --checkpoint=latest --format=hf --out=exported/gemma3

--workdir is any reference Attend reads (a workdir, WORKDIR/checkpoints/STEP, a packaged
checkpoint, a Hugging Face folder or a .gguf file: a GGUF becomes a folder and back). A workdir's
checkpoint is eval.py's: the best where it has one, else the latest, or --checkpoint ('best',
'latest', a step, or a path WORKDIR/checkpoints/STEP). A Hugging Face
folder holds float32 weights, config.json, generation_config.json and the tokenizer with its
chat template; a GGUF file f32, f16, bf16 or q8_0 tensors (--dtype) and, for a workdir convert.py
made of a GGUF file, that file's metadata. What the format cannot hold (a linear attention,
ALiBi, kept first tokens, ...) is refused in one sentence before anything is written; --out must
be new or an empty directory, and is written whole or not at all (docs/export.md).
"""

from absl import app, flags, logging

from models.pretrained import formats
from reports import export
import training

_WORKDIR = flags.DEFINE_string(
  'workdir', None, "A decoder language model's workdir (or any checkpoint reference)."
)
_CHECKPOINT = flags.DEFINE_string(
  'checkpoint',
  '',
  "'best', 'latest', a step or WORKDIR/checkpoints/STEP (default: the best, else the latest).",
)
_FORMAT = flags.DEFINE_enum(
  'format', 'hf', list(formats.FORMATS), 'A Hugging Face folder or a GGUF file.'
)
_OUT = flags.DEFINE_string('out', None, 'The folder or file to write (new, or an empty folder).')
_DTYPE = flags.DEFINE_string(
  'dtype', 'f32', "--format=gguf: the tensors' type: f32, f16, bf16, q8_0."
)
flags.mark_flags_as_required(['out'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.WARNING)  # its output is the one sentence it prints
  training.quiet_library_logs()
  request = lambda: export.request(
    _WORKDIR.value or '', _CHECKPOINT.value, _FORMAT.value, _OUT.value, _DTYPE.value
  )
  training.failures.run('export.py', lambda: print(export.export(request())))


if __name__ == '__main__':
  app.run(main, flags_parser=training.failures.parse_flags)
