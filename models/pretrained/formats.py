"""The formats a decoder is exported as, one registry (`FORMATS`): each a `Format` that checks
what it can hold before anything is read and writes the model, whole or not at all."""

import dataclasses
from typing import Callable

from models.pretrained import fitting, gguf_writer, writer
from models.pretrained.fitting import Fit
from models.pretrained.writer import Vocabulary


@dataclasses.dataclass(frozen=True)
class Format:
  """An export format: `name` (export.py's --format), what it writes (`says`), whether that is
  a folder, the tensor types it takes (`dtypes`, the first the default; `check_package` refuses
  one the installed writer lacks), `check(fit, vocabulary, origin)` (ValueError, one sentence,
  for what it cannot hold) and `write(path, fit, model, vocabulary, dtype, origin)` (`origin`: a
  GGUF file whose metadata is kept, or None)."""

  name: str
  what: str
  folder: bool
  dtypes: tuple[str, ...]
  check: Callable[[Fit, Vocabulary, str | None], None]
  write: Callable[..., None]
  check_package: Callable[[str], None] = lambda dtype: None

  def check_dtype(self, dtype: str) -> None:
    """ValueError unless `dtype` is one of this format's tensor types (and, for GGUF, one the
    installed gguf package writes)."""
    if dtype not in self.dtypes:
      raise ValueError(
        f'--dtype={dtype!r}: {self.what} (--format={self.name}) holds {", ".join(self.dtypes)}.'
      )
    self.check_package(dtype)

  def says(self, dtype: str) -> str:
    """What was written, for the sentence export.py prints."""
    return self.what if len(self.dtypes) == 1 else f'a {dtype} {self.what.split(" ", 1)[1]}'


# Each format of `fitting.FORMATS` with its writer: (folder, dtypes, check, write, check_package).
_WRITERS = dict(
  hf=(
    True,
    ('f32',),
    lambda fit, vocabulary, origin: writer.check_tokenizer(fit, vocabulary),
    lambda path, fit, model, vocabulary, dtype, origin: writer.write_folder(
      path, fit, model, vocabulary
    ),
    lambda dtype: None,
  ),
  gguf=(
    False,
    tuple(gguf_writer.TYPES),
    gguf_writer.check,
    gguf_writer.write_gguf,
    gguf_writer.check_dtype,
  ),
)
FORMATS = {name: Format(name, what, *_WRITERS[name]) for name, what in fitting.FORMATS.items()}


def get_format(name: str) -> Format:
  """The format `name` names; ValueError listing them otherwise."""
  if name not in FORMATS:
    raise ValueError(f'--format={name!r} must be one of {", ".join(FORMATS)}.')
  return FORMATS[name]
