"""An Attend decoder written back as a GGUF file (llama.cpp's format), with gguf's `GGUFWriter`.

    write_gguf(path, fit, model, vocabulary, 'f32', origin)   # Attend's `read` reads it back

The architectures: `llama`, `qwen2`, `gemma3`, `gpt2` (`ARCHITECTURES`). The model's Hugging Face
tensors (fitting.HFTensors) go under GGUF's names, with llama.cpp's changes made as its
converter makes them (gguf_checkpoint.transform, which also undoes them on the way in): Llama's
query and key rows into rope-interleaved order, Gemma's RMSNorm weights stored as 1 + w, GPT-2's
block matrices transposed and its tied head written again as output.weight. Tensors are float32,
float16, bfloat16 or Q8_0 (`TYPES`); one-dimensional ones (norms, biases) stay float32, as
llama.cpp keeps them. The metadata: when the workdir came from a GGUF file (`origin`), that
file's, with only the architecture's keys the model sets written anew; else the architecture's
keys and the tokenizer's, built from a byte-level BPE tokenizer.json.

`check` refuses before anything is read what the file cannot hold: it reads the metadata it
would write back as Attend's reader does (gguf_checkpoint.hf_config) and compares the model it
describes with this one (fitting.differences), so the reader is the one definition of what a
GGUF means. Write and rename go through writer.staged.
"""

import json
from typing import Any

import numpy as np

from models.pretrained.decoders import decoder_args
from models.pretrained.fitting import Fit, HFTensors, differences
from models.pretrained.gguf_checkpoint import hf_config, hf_names, stored_shape, transform
from models.pretrained.gguf_file import Header, Tensor, _gguf, read_header
from models.pretrained.gguf_tokenizer import (
  CONTROL,
  PRE_TOKENIZERS,
  USER_DEFINED,
  pre_tokenizer_name,
)
from models.pretrained.writer import Vocabulary

# --dtype -> (ggml type name, llama.cpp's general.file_type for it).
TYPES = {'f32': ('F32', 0), 'f16': ('F16', 1), 'bf16': ('BF16', 32), 'q8_0': ('Q8_0', 7)}
# model_type -> the GGUF architecture Attend reads back.
ARCHITECTURES = {'llama': 'llama', 'qwen2': 'qwen2', 'gemma3_text': 'gemma3', 'gpt2': 'gpt2'}
NORMAL = 1  # tokenizer.ggml.token_type of a plain token


def check_dtype(dtype: str) -> None:
  if dtype not in TYPES:
    raise ValueError(f'--dtype={dtype!r} must be one of {", ".join(TYPES)}.')
  if not hasattr(_gguf().GGMLQuantizationType, TYPES[dtype][0]):
    raise ValueError(f'--dtype={dtype!r}: the installed gguf package has no {TYPES[dtype][0]}.')


def _names(architecture: str, config: dict[str, Any]) -> dict[str, str]:
  """Hugging Face tensor name -> GGUF's (gguf_checkpoint's map read the other way)."""
  return {hf: ours for ours, hf in hf_names(architecture, config).items()}


def _model_metadata(fit: Fit, architecture: str) -> dict[str, Any]:
  """The architecture's keys, as llama.cpp's converter writes them for this config."""
  c = fit.config
  if architecture == 'gpt2':
    keys = {
      'context_length': c['n_positions'],
      'embedding_length': c['n_embd'],
      'block_count': c['n_layer'],
      'feed_forward_length': c['n_inner'],
      'attention.head_count': c['n_head'],
      'attention.layer_norm_epsilon': c['layer_norm_epsilon'],
      'vocab_size': c['vocab_size'],
    }
    return {f'{architecture}.{key}': value for key, value in keys.items()}
  keys = {
    'context_length': c['max_position_embeddings'],
    'embedding_length': c['hidden_size'],
    'block_count': c['num_hidden_layers'],
    'feed_forward_length': c['intermediate_size'],
    'attention.head_count': c['num_attention_heads'],
    'attention.head_count_kv': c['num_key_value_heads'],
    'attention.layer_norm_rms_epsilon': c['rms_norm_eps'],
    'attention.key_length': c['head_dim'],
    'attention.value_length': c['head_dim'],
    'vocab_size': c['vocab_size'],
  }
  if architecture in ('llama', 'qwen2'):
    keys |= {'rope.dimension_count': c['head_dim'], 'rope.freq_base': c['rope_theta']}
  else:
    if 'full_attention' in c['layer_types']:  # else no layer reads it: the origin's stays
      keys['rope.freq_base'] = c['rope_parameters']['full_attention']['rope_theta']
    if c['sliding_window']:
      keys['attention.sliding_window'] = c['sliding_window']
      sliding = [kind == 'sliding_attention' for kind in c['layer_types']]
      if sliding != [(i + 1) % 6 != 0 for i in range(len(sliding))]:  # llama.cpp's fixed pattern
        keys['attention.sliding_window_pattern'] = sliding
    if c['attn_logit_softcapping']:
      keys['attn_logit_softcapping'] = c['attn_logit_softcapping']
  return {f'{architecture}.{key}': value for key, value in keys.items()}


def _tokenizer_metadata(vocabulary: Vocabulary) -> dict[str, Any]:
  """`tokenizer.ggml.*` of a byte-level BPE tokenizer.json; ValueError for any other."""
  spec = json.loads(vocabulary.tokenizer_json)
  model, pre = spec.get('model') or {}, json.dumps(spec.get('pre_tokenizer'))
  if model.get('type') != 'BPE' or 'ByteLevel' not in pre:
    raise ValueError(
      "A GGUF file's tokenizer is written from a byte-level BPE tokenizer.json, or copied from "
      'the GGUF file the workdir was converted from; this workdir has neither, so export it '
      'with --format=hf.'
    )
  pre = pre_tokenizer_name(spec.get('pre_tokenizer'))
  if pre is None:
    raise ValueError(
      'The tokenizer.json splits text before its byte-level BPE in a way no GGUF pre-tokenizer '
      f'name Attend writes stands for ({", ".join(PRE_TOKENIZERS)}); export it with --format=hf.'
    )
  added = {token['id']: token for token in spec.get('added_tokens', ())}
  vocab = {**model['vocab'], **{token['content']: i for i, token in added.items()}}
  tokens = [''] * (max(vocab.values()) + 1)
  for token, i in vocab.items():
    tokens[i] = token
  types = [
    NORMAL if i not in added else CONTROL if added[i]['special'] else USER_DEFINED
    for i in range(len(tokens))
  ]
  merges = [m if isinstance(m, str) else ' '.join(m) for m in model.get('merges', ())]
  meta = {
    'tokenizer.ggml.model': 'gpt2',
    'tokenizer.ggml.pre': pre,
    'tokenizer.ggml.tokens': tokens,
    'tokenizer.ggml.token_type': types,
    'tokenizer.ggml.merges': merges,
  }
  # The special tokens the post-processor puts around a text: the ones the file adds.
  single = (spec.get('post_processor') or {}).get('single') or [{}]
  ends = {
    end: vocab[single[k]['SpecialToken']['id']]
    for end, k in (('bos', 0), ('eos', -1))
    if 'SpecialToken' in single[k]
  }
  ids = dict(bos=vocabulary.bos_id, eos=vocabulary.eos_id, padding=vocabulary.pad_id)
  ids |= {end: ends.get(end, ids[end]) for end in ('bos', 'eos') if end in ends}
  for kind, token_id in ids.items():
    if token_id is not None:
      meta[f'tokenizer.ggml.{kind}_token_id'] = token_id
  for end in ('bos', 'eos'):
    meta[f'tokenizer.ggml.add_{end}_token'] = end in ends
  if vocabulary.chat_template:
    meta['tokenizer.chat_template'] = vocabulary.chat_template
  return meta


def metadata(fit: Fit, vocabulary: Vocabulary, origin: str | None) -> tuple[str, dict, dict]:
  """`(GGUF architecture, metadata, the types of the values copied from `origin`)`."""
  architecture = ARCHITECTURES.get(fit.model_type)
  if architecture is None:
    raise ValueError(
      '--format=gguf writes only the architectures whose GGUF files Attend reads back '
      f'({", ".join(ARCHITECTURES)}), and this model is a {fit.model_type} model; export it '
      'as a Hugging Face folder with --format=hf.'
    )
  model = _model_metadata(fit, architecture)
  if origin is not None:
    header = read_header(origin)
    if header.metadata.get('general.architecture') == architecture:
      # The writer sets the architecture, the alignment it pads to and the file's tensor type.
      written = ('general.architecture', 'general.alignment', 'general.file_type')
      copied = {k: v for k, v in header.metadata.items() if k not in written}
      return architecture, {**copied, **model}, header.types
  return architecture, {**model, **_tokenizer_metadata(vocabulary)}, {}


def check(fit: Fit, vocabulary: Vocabulary, origin: str | None) -> None:
  """ValueError, one sentence, unless Attend's reader reads the file `write_gguf` would write
  as this model (see the module docstring)."""
  architecture, meta, _ = metadata(fit, vocabulary, origin)
  present = ['output.weight'] if not fit.config['tie_word_embeddings'] else []
  if fit.config.get('attention_bias'):
    present.append('blk.0.attn_q.bias')
  header = Header('', meta, dict.fromkeys(present, Tensor((1,), 0, 0, 0)))
  read_back, _ = decoder_args(hf_config(header, architecture))
  ours, _ = decoder_args(fit.config)
  missed = differences(ours, read_back)
  if missed:
    field, value, theirs = missed[0]
    raise ValueError(
      f'config.model.{field}={value!r} has no place in a {architecture} GGUF file (Attend reads '
      f'it back as {theirs!r}); export it as a Hugging Face folder (--format=hf).'
    )


def _value_type(gguf, value: Any, kind: int | None):
  """`(GGUFValueType, item type, value)` for `GGUFWriter.add_key_value`; `kind`: the type the
  value had in the origin file (None: a Python value's usual type, as llama.cpp writes it)."""
  t = gguf.GGUFValueType
  if isinstance(value, np.ndarray):
    items = {'u': 'UINT', 'i': 'INT', 'f': 'FLOAT', 'b': 'BOOL'}[value.dtype.kind]
    name = items if items == 'BOOL' else f'{items}{value.dtype.itemsize * 8}'
    return t.ARRAY, t[name], value.tolist()
  if isinstance(value, (list, tuple)):
    item = value[0]
    sub = t.STRING if isinstance(item, str) else t.BOOL if isinstance(item, bool) else None
    sub = sub or (t.INT32 if isinstance(item, int) else t.FLOAT32)
    return t.ARRAY, sub, list(value)
  if kind is not None:
    return t(kind), None, value
  if isinstance(value, bool):
    return t.BOOL, None, value
  if isinstance(value, int):
    return t.UINT32, None, value
  if isinstance(value, float):
    return t.FLOAT32, None, value
  return t.STRING, None, value


def write_gguf(
  path: str, fit: Fit, model, vocabulary: Vocabulary, dtype: str, origin: str | None
) -> None:
  """Writes the model as a GGUF file at `path` (call `check` first), a tensor at a time."""
  gguf = _gguf()
  architecture, meta, types = metadata(fit, vocabulary, origin)
  qtype_name, file_type = TYPES[dtype]
  writer = gguf.GGUFWriter(path, architecture)
  for key, value in meta.items():
    vtype, sub, packed = _value_type(gguf, value, types.get(key))
    writer.add_key_value(key, packed, vtype, sub)
  writer.add_file_type(file_type)
  tensors = HFTensors(model, fit)
  names = _names(architecture, fit.config)
  stored = transform(architecture, fit.config, stored=True)
  # `(GGUF name, Hugging Face name)`: llama.cpp's converter writes GPT-2's tied head again as
  # output.weight, and so does this writer, for the readers that expect it.
  entries = [(names[name], name) for name in tensors]
  if architecture == 'gpt2':
    embedding = next(name for name in tensors if names[name] == 'token_embd.weight')
    entries.insert(1, ('output.weight', embedding))
  kinds = {}
  for gguf_name, name in entries:
    shape = stored_shape(architecture, name, tensors.shape(name))
    qtype = gguf.GGMLQuantizationType[qtype_name]
    block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    if len(shape) == 1 or shape[-1] % block:  # norms and biases stay float32
      qtype, block, block_bytes = gguf.GGMLQuantizationType.F32, 1, 4
    kinds[name] = qtype
    nbytes = int(np.prod(shape)) // block * block_bytes
    writer.add_tensor_info(gguf_name, shape, np.dtype(np.float32), nbytes, raw_dtype=qtype)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_ti_data_to_file()
  for _, name in entries:
    values = stored(name, tensors[name])
    writer.write_tensor_data(np.ascontiguousarray(gguf.quants.quantize(values, kinds[name])))
  writer.close()
