"""An Attend decoder written back as a Hugging Face folder, as `save_pretrained` writes one.

    write_folder(out, model, fields, vocabulary)   # `transformers.AutoModelForCausalLM` reads it

The architecture is the one that computes the model exactly (fitting.py), its tensors those of
the family's own table read backwards (tables.Gathered), in float32. The folder holds
config.json (with `architectures`), model.safetensors (or shards of at most `SHARD_BYTES` and
their index, as transformers shards), generation_config.json, tokenizer.json,
tokenizer_config.json and, where the workdir has one, chat_template.jinja.

Nothing is half-written: the folder is made under a temporary name beside `out` and renamed
into place when whole (`staged`); an output that exists and is not empty is refused before any
work, and a failed write (a full disk) removes what was staged and is one sentence.
"""

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from typing import Any, Iterator

import numpy as np

from models.pretrained.files import INDEX, runs_of_bytes
from models.pretrained.fitting import Fit, HFTensors
from models.pretrained.gguf_tokenizer import pre_tokenizer_name

SHARD_BYTES = 50 * 10**9  # transformers 5's `save_pretrained(max_shard_size='50GB')`


@dataclasses.dataclass(frozen=True)
class Vocabulary:
  """A workdir's tokenizer as a checkpoint keeps it: tokenizer.json's text, the chat template
  ('' for none) and the ids of its special tokens (None where it has none)."""

  tokenizer_json: str
  chat_template: str
  bos_id: int | None
  eos_id: int | None
  pad_id: int | None


# model_type -> the tokenizer transformers builds for such a folder whatever its tokenizer.json
# and tokenizer_config.json say (transformers 5's Qwen2Tokenizer: a byte-level BPE of the file's
# vocabulary and merges, split by Qwen2's pattern): a folder holds only a tokenizer of that kind.
REBUILT_TOKENIZERS = {'qwen2': 'qwen2'}


def check_tokenizer(fit_: Fit, vocabulary: Vocabulary) -> None:
  """ValueError, one sentence, where `AutoTokenizer` would read the folder's tokenizer as another
  one (`REBUILT_TOKENIZERS`)."""
  split = REBUILT_TOKENIZERS.get(fit_.model_type)
  if split is None:
    return
  spec = json.loads(vocabulary.tokenizer_json)
  kind = (spec.get('model') or {}).get('type')
  if kind != 'BPE' or pre_tokenizer_name(spec.get('pre_tokenizer')) != split:
    raise ValueError(
      f"transformers reads a {fit_.model_type} folder's tokenizer as a byte-level BPE split by "
      f"{split}'s pattern whatever its tokenizer.json holds, and this workdir's ({kind}) is not "
      'one, so no Hugging Face folder holds this model with its tokenizer.'
    )


def refuse_existing(out: str) -> None:
  """ValueError unless `out` is new or an empty directory (asked before the workdir is read)."""
  if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
    raise ValueError(f'--out={out} exists and is not empty; export into a new path.')


@contextlib.contextmanager
def staged(out: str, *, folder: bool) -> Iterator[str]:
  """A temporary path beside `out` (a folder, or a file's path) that is renamed to `out` when
  the block ends without error and removed when it raises; an OSError (a full disk, a path not
  writable) becomes one sentence naming `out`."""
  refuse_existing(out)
  parent = os.path.dirname(os.path.abspath(out))
  name = '.' + os.path.basename(os.path.abspath(out)) + '.attend-export-'
  temporary = None
  try:
    os.makedirs(parent, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix=name, dir=parent)
    target = temporary if folder else os.path.join(temporary, os.path.basename(out))
    yield target
    if os.path.isdir(out):  # refuse_existing let only an empty one through
      os.rmdir(out)
    os.rename(target, out)
  except OSError as error:
    raise ValueError(
      f'Writing {out} failed ({error.strerror or error}); nothing was written there.'
    ) from None
  finally:
    if temporary is not None and os.path.exists(temporary):
      shutil.rmtree(temporary, ignore_errors=True)


def _write_safetensors(path: str, tensors: HFTensors, names: list[str]) -> int:
  """One safetensors file of `names`, written a tensor at a time (the header first, from the
  shapes alone); returns its data's size in bytes."""
  header, offset = {'__metadata__': {'format': 'pt'}}, 0
  for name in names:
    nbytes = int(np.prod(tensors.shape(name))) * 4
    header[name] = dict(
      dtype='F32', shape=list(tensors.shape(name)), data_offsets=[offset, offset + nbytes]
    )
    offset += nbytes
  text = json.dumps(header, separators=(',', ':')).encode('utf-8')
  text += b' ' * (-len(text) % 8)  # the format aligns the data to 8 bytes
  with open(path, 'wb') as f:
    f.write(len(text).to_bytes(8, 'little'))
    f.write(text)
    for name in names:
      f.write(memoryview(tensors[name].astype('<f4', copy=False)))
  return offset


def _shards(tensors: HFTensors, limit: int) -> list[list[str]]:
  """The tensors' names in table order, cut into runs of at most `limit` bytes of float32."""
  return runs_of_bytes({name: int(np.prod(tensors.shape(name))) * 4 for name in tensors}, limit)


def write_weights(folder: str, tensors: HFTensors, shard_bytes: int = SHARD_BYTES) -> None:
  """model.safetensors, or shards `model-0000k-of-0000n.safetensors` and their index."""
  shards = _shards(tensors, shard_bytes)
  if len(shards) == 1:
    _write_safetensors(os.path.join(folder, 'model.safetensors'), tensors, shards[0])
    return
  weight_map, total = {}, 0
  for k, names in enumerate(shards, 1):
    file = f'model-{k:05d}-of-{len(shards):05d}.safetensors'
    total += _write_safetensors(os.path.join(folder, file), tensors, names)
    weight_map.update(dict.fromkeys(names, file))
  index = {'metadata': {'total_size': total}, 'weight_map': weight_map}
  _write_json(os.path.join(folder, INDEX), index)


def _write_json(path: str, value: dict[str, Any]) -> None:
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(value, f, indent=2, ensure_ascii=False)
    f.write('\n')


def _special_ids(vocabulary: Vocabulary) -> dict[str, int | None]:
  """The special ids, None where the tokenizer has none (not the class's defaults: GPT-2's
  50256 lies outside a smaller vocabulary)."""
  ids = dict(bos=vocabulary.bos_id, eos=vocabulary.eos_id, pad=vocabulary.pad_id)
  return {f'{kind}_token_id': i for kind, i in ids.items()}


def hf_config(fit_: Fit, vocabulary: Vocabulary) -> dict[str, Any]:
  """The config.json: the fit's, the tokenizer's special ids, float32 weights."""
  return {**fit_.config, **_special_ids(vocabulary), 'dtype': 'float32'}


def write_tokenizer(folder: str, vocabulary: Vocabulary, max_length: int) -> None:
  """tokenizer.json as the workdir has it, tokenizer_config.json naming the fast tokenizer that
  reads it as it is (no class of the model_type that would rebuild it) and its special tokens,
  and chat_template.jinja where there is a template."""
  import tokenizers  # pylint: disable=import-outside-toplevel

  tokenizer = tokenizers.Tokenizer.from_str(vocabulary.tokenizer_json)
  with open(os.path.join(folder, 'tokenizer.json'), 'w', encoding='utf-8') as f:
    f.write(vocabulary.tokenizer_json)
  config = {'tokenizer_class': 'PreTrainedTokenizerFast', 'model_max_length': max_length}
  for kind in ('bos', 'eos', 'pad'):
    token_id = getattr(vocabulary, f'{kind}_id')
    if token_id is not None:
      config[f'{kind}_token'] = tokenizer.id_to_token(token_id)
  _write_json(os.path.join(folder, 'tokenizer_config.json'), config)
  if vocabulary.chat_template:
    with open(os.path.join(folder, 'chat_template.jinja'), 'w', encoding='utf-8') as f:
      f.write(vocabulary.chat_template)


def write_folder(
  folder: str, fit_: Fit, model, vocabulary: Vocabulary, shard_bytes: int = SHARD_BYTES
) -> None:
  """Writes the model as a Hugging Face folder into `folder` (an empty one: see `staged`)."""
  config = hf_config(fit_, vocabulary)
  _write_json(os.path.join(folder, 'config.json'), config)
  generation = {**_special_ids(vocabulary), 'do_sample': False}
  _write_json(os.path.join(folder, 'generation_config.json'), generation)
  length = config.get('max_position_embeddings', config.get('n_positions'))
  write_tokenizer(folder, vocabulary, length)
  write_weights(folder, HFTensors(model, fit_), shard_bytes)
