"""Writes a pretrained checkpoint as an Attend workdir: a BERT-family encoder as step 0 of
configs/minilm_mlm.py, a decoder as step 0 of configs/pretrained_lm.py (the architectures:
`models.pretrained.ARCHITECTURES`).

  python convert.py --workdir=runs/minilm                               # all-MiniLM-L6-v2
  python convert.py --checkpoint=SmolLM2-135M-Instruct --workdir=runs/smollm2   # make llm
  python convert.py --checkpoint=gemma-3-270m --workdir=runs/gemma3             # make llm
  python convert.py --checkpoint=my_bert --workdir=runs/my_bert         # a local folder / .zip
  python convert.py --checkpoint=model.gguf --workdir=runs/my_llama     # a GGUF file

A short name is a checkpoint that ships in a registry package (`models.pretrained.PACKAGES`);
anything else is a Hugging Face folder (or .zip) or a GGUF file, whose tensors are dequantised
to float32 one at a time. The workdir holds the config (`init_from=''`), the loaded
model with that config's optimizer state as checkpoint 0, the checkpoint's tokenizer in vocab/,
and pretrained.json (what was loaded, initialised and unused). eval.py reads it as the frozen
model; it is the `config.init_from` of a training run. --workdir must be new or an empty
directory (docs/pretrained.md, docs/pretrained_decoders.md).
"""

from absl import app, flags, logging

from configs import minilm_mlm, pretrained_lm
from models import pretrained
import sources
import training
from training import pretrained_workdir

_CHECKPOINT = flags.DEFINE_string(
  'checkpoint',
  pretrained.DEFAULT,
  f'A packaged checkpoint ({", ".join(pretrained.PACKAGES)}), or a Hugging Face folder / .zip '
  f'or a .gguf file of one of the architectures {", ".join(pretrained.ARCHITECTURES)}.',
)
_WORKDIR = flags.DEFINE_string('workdir', None, 'The workdir to write (new or empty).')
flags.mark_flag_as_required('workdir')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.WARNING)  # its output is the one sentence it prints, as before
  training.quiet_library_logs()
  training.failures.run('convert.py', lambda: _convert(_CHECKPOINT.value, _WORKDIR.value))


def _convert(checkpoint: str, workdir: str) -> None:
  """The checkpoint, read once, as the workdir of its family, decided here once by its
  config.json's model_type (`pretrained.family`, which refuses one Attend does not read): an
  encoder is step 0 of configs/minilm_mlm.py, a decoder of configs/pretrained_lm.py."""
  pretrained_workdir.refuse_used(workdir)  # before the checkpoint is read
  source = sources.resolve(checkpoint, flag='--checkpoint')
  if source.workdir is not None:
    raise ValueError(
      f'--checkpoint={checkpoint} is a training workdir already: train.py continues it, eval.py '
      'reads it, export.py writes it out.'
    )
  read = source.checkpoint
  encoder = pretrained.family(read.config).kind == 'encoder'
  config_module = minilm_mlm if encoder else pretrained_lm
  pretrained_workdir.write_workdir(workdir, read, config_module.converted(read))


if __name__ == '__main__':
  app.run(main, flags_parser=training.failures.parse_flags)
