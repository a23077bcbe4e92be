"""A GGUF file (llama.cpp's format): its header, and its tensors dequantised one at a time.

`read_header(path)` parses the metadata and the tensor table and checks them against the file's
size; `GGUFTensors` reads a tensor's bytes only when it is asked for and dequantises them with
`gguf.quants` to float32 in torch's layout: every type the installed gguf package can
dequantise (`check_readable` refuses the others). gguf_checkpoint.py makes a Hugging Face
checkpoint of them.

The header is parsed here, not with `gguf.GGUFReader`, which builds a NumPy view per vocabulary
entry (7 s for SmolLM2's 49,152 tokens, 36 s for Gemma 3's 262,144, against well under a second).
A file that is not a readable GGUF is one ValueError naming it (`damaged`).
"""

from collections.abc import Mapping
import dataclasses
import functools
import mmap
import os
import struct
from typing import Any, Callable

import numpy as np

MAGIC = b'GGUF'
VERSIONS = (2, 3)  # version 1 counted in 32 bits; llama.cpp has written 3 since 2023
ALIGNMENT = 32  # of the tensor data, unless `general.alignment` says otherwise
# Metadata value types: struct formats of the fixed-size ones; 8 is a string, 9 an array.
_SCALARS = dict(zip((0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12), 'BbHhIif?Qqd'))
_STRING, _ARRAY = 8, 9


def _gguf():
  """The gguf package (llama.cpp's own Python reader), which only GGUF files need."""
  try:
    import gguf  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ValueError(
      "Reading a GGUF file needs the gguf package: make llm (or pip install '.[gguf]')."
    ) from None
  return gguf


@dataclasses.dataclass(frozen=True)
class Tensor:
  """Where one tensor's bytes are and how to read them."""

  shape: tuple[int, ...]  # torch order: ggml lists the fastest-moving dimension first
  qtype: int  # gguf.GGMLQuantizationType
  start: int  # byte offset in the file
  nbytes: int


@dataclasses.dataclass(frozen=True)
class Header:
  """A GGUF file's metadata (`{key: value}`; arrays of numbers as NumPy arrays, of strings as
  lists), its tensors by GGUF name, and each metadata value's GGUF type (a scalar's width,
  which a Python int loses; gguf_writer.py copies metadata with it)."""

  path: str
  metadata: dict[str, Any]
  tensors: dict[str, Tensor]
  types: dict[str, int] = dataclasses.field(default_factory=dict)


class _Cursor:
  """Reads values off the file's bytes in order; running past the end is a damaged file."""

  def __init__(self, buffer: mmap.mmap, path: str):
    self.buffer, self.path, self.pos = buffer, path, 0

  def _past_end(self) -> ValueError:
    return damaged(self.path, f'it ends at byte {len(self.buffer)}, inside its header')

  def take(self, count: int) -> bytes:
    end = self.pos + count
    if end > len(self.buffer):
      raise self._past_end()
    chunk, self.pos = self.buffer[self.pos : end], end
    return chunk

  def scalar(self, kind: int) -> Any:
    code = _SCALARS[kind]
    return struct.unpack('<' + code, self.take(struct.calcsize(code)))[0]

  def strings(self, count: int) -> list[str]:
    """`count` strings (a vocabulary: one tight loop, as this is most of a header's bytes)."""
    buffer, pos, length_at, out = self.buffer, self.pos, struct.Struct('<Q').unpack_from, []
    try:
      for _ in range(count):
        (length,) = length_at(buffer, pos)
        out.append(buffer[pos + 8 : pos + 8 + length].decode('utf-8'))
        pos += 8 + length
    except struct.error:
      raise self._past_end() from None
    if pos > len(buffer):
      raise self._past_end()
    self.pos = pos
    return out

  def value(self, kind: int) -> Any:
    if kind in _SCALARS:
      return self.scalar(kind)
    if kind == _STRING:
      return self.strings(1)[0]
    if kind != _ARRAY:
      raise damaged(self.path, f'a metadata value has type {kind}, which GGUF does not define')
    item, count = self.scalar(4), self.scalar(10)
    if item == _STRING:
      return self.strings(count)
    if item not in _SCALARS:
      raise damaged(self.path, f'a metadata array holds items of type {item}')
    dtype = np.dtype('<' + _SCALARS[item])
    return np.frombuffer(self.take(count * dtype.itemsize), dtype)


def damaged(path: str, why: str) -> ValueError:
  """The one-sentence error of a file that is not a readable GGUF."""
  return ValueError(f'{path} is not a readable GGUF file: {why} (truncated or damaged?).')


def is_gguf(path: str) -> bool:
  """Whether `path` is a file named `.gguf` or starting with the GGUF magic bytes."""
  if not os.path.isfile(path):
    return False
  with open(path, 'rb') as f:
    return path.endswith('.gguf') or f.read(4) == MAGIC


def read_header(path: str) -> Header:
  """The metadata and tensor table of a GGUF file, checked against its size; no tensor is read.

  Raises:
    ValueError: the file is truncated or damaged (one sentence naming it).
  """
  gguf = _gguf()
  size = os.path.getsize(path)
  if size < 24:
    raise damaged(path, f'it has {size} bytes, fewer than a GGUF header')
  with open(path, 'rb') as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
    cursor = _Cursor(buffer, path)
    if cursor.take(4) != MAGIC:
      raise damaged(path, 'it does not start with the GGUF magic bytes')
    version = cursor.scalar(4)
    if version not in VERSIONS:
      raise damaged(path, f'it has GGUF version {version}; readable versions are 2 and 3')
    tensor_count, key_count = cursor.scalar(10), cursor.scalar(10)
    try:
      metadata, types = {}, {}
      for _ in range(key_count):
        key = cursor.strings(1)[0]
        types[key] = cursor.scalar(4)
        metadata[key] = cursor.value(types[key])
      table = []
      for _ in range(tensor_count):
        name = cursor.strings(1)[0]
        dims = [cursor.scalar(10) for _ in range(cursor.scalar(4))]
        table.append((name, tuple(reversed(dims)), cursor.scalar(4), cursor.scalar(10)))
    except UnicodeDecodeError:
      raise damaged(path, 'a name in its header is not UTF-8') from None
  alignment = metadata.get('general.alignment', ALIGNMENT)
  data_start = -(-cursor.pos // alignment) * alignment
  tensors = {}
  for name, shape, qtype, offset in table:
    if qtype not in gguf.GGML_QUANT_SIZES:
      raise damaged(path, f'tensor {name!r} has type {qtype}, which ggml does not define')
    block, block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(qtype)]
    if not shape or shape[-1] % block:
      raise damaged(path, f'tensor {name!r} of shape {shape} is not whole blocks of {block}')
    nbytes = int(np.prod(shape)) // block * block_bytes
    tensors[name] = Tensor(shape, qtype, data_start + offset, nbytes)
    if data_start + offset + nbytes > size:
      raise damaged(path, f'tensor {name!r} ends past the end of the file, at byte {size}')
  return Header(path, metadata, tensors, types)


@functools.cache
def _readable(qtype: int) -> bool:
  """Whether gguf.quants dequantises this tensor type (probed on one block of zeros)."""
  gguf = _gguf()
  qtype = gguf.GGMLQuantizationType(qtype)
  try:
    gguf.quants.dequantize(np.zeros(gguf.GGML_QUANT_SIZES[qtype][1], np.uint8), qtype)
  except NotImplementedError:
    return False
  return True


def check_readable(header: Header) -> None:
  """Raises a ValueError naming the first tensor of a type gguf cannot dequantise."""
  for name, tensor in header.tensors.items():
    if not _readable(tensor.qtype):
      kind = _gguf().GGMLQuantizationType(tensor.qtype).name
      raise ValueError(
        f'{header.path} stores tensor {name!r} as {kind}, which the installed gguf package '
        'cannot dequantise.'
      )


class GGUFTensors(Mapping):
  """A GGUF file's tensors by Hugging Face name, each read from disk and dequantised to float32
  when asked for (then `transform(name, array)`), so converting holds the model and one
  tensor, not a second copy of the weights."""

  def __init__(
    self,
    header: Header,
    names: dict[str, str],
    transform: Callable[[str, np.ndarray], np.ndarray],
  ):
    self._path, self._transform = header.path, transform
    self._tensors = {names.get(gguf_name, gguf_name): t for gguf_name, t in header.tensors.items()}

  def __getitem__(self, name: str) -> np.ndarray:
    gguf = _gguf()
    tensor = self._tensors[name]
    qtype = gguf.GGMLQuantizationType(tensor.qtype)
    block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = np.memmap(self._path, np.uint8, 'r', offset=tensor.start, shape=(tensor.nbytes,))
    rows = raw.reshape(*tensor.shape[:-1], tensor.shape[-1] // block * block_bytes)
    values = np.array(gguf.quants.dequantize(rows, qtype), np.float32)  # a copy: the file is let go
    return self._transform(name, values)

  def __iter__(self):
    return iter(self._tensors)

  def __len__(self) -> int:
    return len(self._tensors)
