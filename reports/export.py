"""A decoder's source written out as a Hugging Face folder or a GGUF file, for export.py: the
way back of convert.py.

The source is any reference (sources.resolve): a workdir's checkpoint, chosen as eval.py chooses
it (the best, else the latest; or 'best', 'latest', a step, or WORKDIR/checkpoints/STEP), or a
pretrained checkpoint. Its parameters are restored straight into the model's shapes, which need
the vocabulary alone, so the run's text is not read (it may have moved since). What can be
refused is refused before the parameters are read: an output that exists and is not empty, a
source without a checkpoint, a preprocessing no tokenizer.json expresses (data.tokenizer_json),
a model no architecture holds exactly (models.pretrained.fitting), what the format cannot hold
(`models.pretrained.formats`).
"""

import dataclasses

from data import language
from data.tokenizer_json import tokenizer_json
from models import pretrained
from models.pretrained import fitting, formats, writer
from models.pretrained.formats import Format
from models.pretrained.gguf_file import is_gguf
import sources
from training.steps import merge_model


@dataclasses.dataclass(frozen=True)
class Request:
  """What export.py asks for: the source, the format (a `Format` of
  `models.pretrained.formats.FORMATS`: export.py resolves the flag), the output path and the
  tensors' type (one of the format's `dtypes`)."""

  source: sources.Source
  out: str
  format: Format
  dtype: str = 'f32'


def request(workdir: str, checkpoint: str, format_name: str, out: str, dtype: str) -> Request:
  """export.py's flags resolved at the edge: the format into its writer, the reference into a
  source (a path WORKDIR/checkpoints/STEP given as --checkpoint alone names the workdir too)."""
  fmt = formats.get_format(format_name)
  text, choice = (workdir, checkpoint) if workdir else (checkpoint, '')
  return Request(sources.resolve(text, checkpoint=choice), out, fmt, dtype)


def _vocabulary(tokenizer, origin: str | None, dataset) -> writer.Vocabulary:
  """The writer's view of the workdir's tokenizer. Attend's own vocabulary (character, word,
  SentencePiece) becomes a tokenizer.json that applies the run's preprocessing
  (`config.dataset`), with Attend's special ids. A checkpoint's own (a
  data.pretrained_tokenizer.PretrainedTokenizer) is written as it is, its special ids those of
  the origin's config.json where it is readable (a GGUF's metadata names them; the tokenizer's
  own guess is by the tokens' spelling)."""
  if tokenizer.kind != 'pretrained':
    preprocess = language.text_options(language.validate_config(dataset))
    text = tokenizer_json(tokenizer, preprocess)
    return writer.Vocabulary(text, '', tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id)
  ids = dict(
    bos=tokenizer.bos_id, eos=tokenizer.eos_id, pad=tokenizer.pad_id if tokenizer.has_pad else None
  )
  if origin is not None:
    try:
      config = pretrained.read_config(origin)
    except (ValueError, OSError):
      config = {}
    ids |= {k: config[f'{k}_token_id'] for k in ids if config.get(f'{k}_token_id') is not None}
  return writer.Vocabulary(
    tokenizer.tokenizer_json, tokenizer.chat_template, ids['bos'], ids['eos'], ids['pad']
  )


def export(request: Request) -> str:
  """Writes the source as `request.format` at `request.out` and returns the sentence it prints.

  Raises:
    ValueError, FileNotFoundError: one sentence (see the module docstring); nothing is written.
  """
  fmt, source = request.format, request.source
  writer.refuse_existing(request.out)
  fmt.check_dtype(request.dtype)
  tokenizer = source.tokenizer
  if tokenizer is None:
    raise ValueError(f'{source.reference.flag}={source.reference.text} holds no vocabulary.')
  fit = fitting.fit(fitting.decoder_arguments(source.config.model, tokenizer.vocab_size))
  origin = source.origin()
  vocabulary = _vocabulary(tokenizer, origin, source.config.dataset)
  if origin is not None and not is_gguf(origin):
    origin = None  # only a GGUF origin's metadata is copied
  fmt.check(fit, vocabulary, origin)
  if source.workdir is not None:
    restored = source.restore(host=True)  # read, not computed with: no device copy
    model, step = merge_model(restored.state), f'step {restored.step} of {source.workdir}'
  else:
    model, step = source.model(), source.reference.text
  with writer.staged(request.out, folder=fmt.folder) as path:
    fmt.write(path, fit, model, vocabulary, request.dtype, origin)
  return (
    f'Wrote {step} as {fmt.says(request.dtype)} of a {fit.model_type} model into {request.out}.'
  )
