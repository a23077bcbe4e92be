"""A GGUF file read as a Hugging Face checkpoint: config.json, tensors, tokenizer.json.

`read_gguf(path)` gives what a Hugging Face folder holds, under its names, so the per-family
tables of decoders.py convert it as they convert a folder:

- the config.json transformers builds from the file's metadata (`hf_config`):
  `general.architecture` 'llama', 'qwen2' and 'gpt2' are those model_types, 'gemma3' is
  'gemma3_text' with the Gemma 3 values llama.cpp fixes in code rather than in the file (a
  global layer every 6th, a local rotary base of 10,000, scores scaled by the head size, tanh
  GELU). float32 metadata is given as the decimal it was written from (rms_norm_eps 1e-06,
  where transformers gives 9.99999997e-07);
- the tensors by Hugging Face name (gguf_file.py's `GGUFTensors`), with llama.cpp's
  changes undone exactly as transformers undoes them (`transform`): Llama's query and key rows
  back from rope-interleaved order, 1 subtracted from Gemma's RMSNorm weights (stored as 1 + w),
  GPT-2's block matrices transposed back. A tensor the table does not name keeps its GGUF name
  (the converter reports it unused, as it does GPT-2's output.weight, a copy of its tied head);
- the tokenizer.json of its vocabulary (gguf_tokenizer.py), and its chat template.
"""

from typing import Any, Callable

import numpy as np

from models.pretrained.gguf_file import GGUFTensors, Header, check_readable, read_header
from models.pretrained.gguf_tokenizer import tokenizer_json

# GGUF tensor name -> Hugging Face name: the model's own (`TOP`), then each block's (`blk.{i}.`
# -> `LAYERS[architecture].{i}.`) per architecture; gguf's tensor_mapping.py read backwards, and
# tests/test_gguf.py checks each against it.
_MODEL_TOP = {'token_embd': 'model.embed_tokens', 'output_norm': 'model.norm', 'output': 'lm_head'}
_GPT2_TOP = {
  'token_embd': 'transformer.wte',
  'position_embd': 'transformer.wpe',
  'output_norm': 'transformer.ln_f',
  'output': 'lm_head',
}
_BLOCK = {
  'attn_norm': 'input_layernorm',
  'attn_q': 'self_attn.q_proj',
  'attn_k': 'self_attn.k_proj',
  'attn_v': 'self_attn.v_proj',
  'attn_output': 'self_attn.o_proj',
  'ffn_gate': 'mlp.gate_proj',
  'ffn_up': 'mlp.up_proj',
  'ffn_down': 'mlp.down_proj',
}
_LLAMA_BLOCK = {**_BLOCK, 'ffn_norm': 'post_attention_layernorm'}
BLOCK = {
  'llama': _LLAMA_BLOCK,
  'qwen2': _LLAMA_BLOCK,
  'gemma3': {
    **_BLOCK,
    'attn_q_norm': 'self_attn.q_norm',
    'attn_k_norm': 'self_attn.k_norm',
    'post_attention_norm': 'post_attention_layernorm',
    'ffn_norm': 'pre_feedforward_layernorm',
    'post_ffw_norm': 'post_feedforward_layernorm',
  },
  'gpt2': {
    'attn_norm': 'ln_1',
    'attn_qkv': 'attn.c_attn',
    'attn_output': 'attn.c_proj',
    'ffn_norm': 'ln_2',
    'ffn_up': 'mlp.c_fc',
    'ffn_down': 'mlp.c_proj',
  },
}
TOP = {architecture: _MODEL_TOP for architecture in BLOCK} | {'gpt2': _GPT2_TOP}
LAYERS = {architecture: 'model.layers' for architecture in BLOCK} | {'gpt2': 'transformer.h'}


def hf_names(architecture: str, config: dict[str, Any]) -> dict[str, str]:
  """GGUF tensor name -> Hugging Face name, weights and biases, for a model of the Hugging Face
  `config`'s layers (GPT-2 names them `n_layer`)."""
  num_layers = config.get('num_hidden_layers') or config['n_layer']
  names = {
    f'{g}{s}': f'{hf}{s}' for g, hf in TOP[architecture].items() for s in ('.weight', '.bias')
  }
  for i in range(num_layers):
    for g, hf in BLOCK[architecture].items():
      block = f'{LAYERS[architecture]}.{i}.{hf}'
      names |= {f'blk.{i}.{g}{s}': f'{block}{s}' for s in ('.weight', '.bias')}
  return names


def unpermute(weight: np.ndarray, heads: int) -> np.ndarray:
  """Hugging Face's rows of a query or key projection (or bias) from GGUF's: llama.cpp rotates
  interleaved pairs, so it stores each head's rows as (x0, y0, x1, y1, ...) where Hugging Face
  rotates halves (x0, x1, ..., y0, y1, ...)."""
  per_head = weight.reshape(heads, -1, 2, *weight.shape[1:])  # [N, H/2, 2, ...]
  return per_head.swapaxes(1, 2).reshape(weight.shape)  # [N, 2, H/2, ...] -> [N * H, ...]


def permute(weight: np.ndarray, heads: int) -> np.ndarray:
  """GGUF's rows of a query or key projection (or bias) from Hugging Face's: the inverse of
  `unpermute`, as llama.cpp's converter writes them."""
  per_head = weight.reshape(heads, 2, -1, *weight.shape[1:])  # [N, 2, H/2, ...]
  return per_head.swapaxes(1, 2).reshape(weight.shape)  # [N, H/2, 2, ...] -> [N * H, ...]


def _llama_rows(config: dict[str, Any], reorder: Callable) -> Callable:
  """Llama's query and key rows reordered by `reorder` (`permute` or `unpermute`)."""
  heads = {'q_proj': config['num_attention_heads'], 'k_proj': config['num_key_value_heads']}

  def transform(name: str, values: np.ndarray) -> np.ndarray:
    projection = name.split('.')[-2]
    return reorder(values, heads[projection]) if projection in heads else values

  return transform


def _gpt2_matrix(name: str, ndim: int) -> bool:
  """GPT-2's block matrices are [in, out] (its Conv1D); llama.cpp stores them [out, in]."""
  return ndim == 2 and '.h.' in name


def _gpt2_transposed(name: str, values: np.ndarray) -> np.ndarray:
  return np.ascontiguousarray(values.T) if _gpt2_matrix(name, values.ndim) else values


def stored_shape(architecture: str, name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
  """The shape the file gives a Hugging Face tensor of `shape` (see `transform`)."""
  transposed = architecture == 'gpt2' and _gpt2_matrix(name, len(shape))
  return tuple(shape[::-1]) if transposed else tuple(shape)


def _unchanged(name: str, values: np.ndarray) -> np.ndarray:
  """Qwen2: llama.cpp rotates its halves as Hugging Face does, so nothing is reordered."""
  del name
  return values


def transform(architecture: str, config: dict[str, Any], *, stored: bool) -> Callable:
  """`(Hugging Face name, values) -> values` with llama.cpp's change to the architecture's tensors
  made (`stored`: Hugging Face's -> the file's, as its converter writes) or undone (the file's ->
  Hugging Face's, as transformers reads): Llama's query and key rows in rope-interleaved order,
  Gemma's RMSNorm weights w stored as 1 + w (its norm multiplies by the weight), GPT-2's block
  matrices transposed."""
  if architecture == 'llama':
    return _llama_rows(config, permute if stored else unpermute)
  if architecture == 'gemma3':
    one = np.float32(1 if stored else -1)
    return lambda name, values: values + one if name.endswith('norm.weight') else values
  return _gpt2_transposed if architecture == 'gpt2' else _unchanged


def _float(value: Any) -> Any:
  """A float32 metadata value as the decimal it was written from (1e-06, not 9.99999997e-07)."""
  return float(str(np.float32(value))) if isinstance(value, float) else value


def hf_config(header: Header, architecture: str) -> dict[str, Any]:
  """The Hugging Face config.json of a GGUF file of `architecture` (one of `BLOCK`), the keys
  transformers reads."""
  meta, key = header.metadata, _metadata_key(header, architecture)
  tokens = {
    f'{token}_token_id': meta[f'tokenizer.ggml.{gguf}_token_id']
    for token, gguf in (('bos', 'bos'), ('eos', 'eos'), ('unk', 'unknown'), ('pad', 'padding'))
    if f'tokenizer.ggml.{gguf}_token_id' in meta
  }
  vocab_size = key('vocab_size', len(meta.get('tokenizer.ggml.tokens', ())))
  if architecture == 'gpt2':
    return _gpt2_config(key, vocab_size, tokens)
  hidden, heads = key('embedding_length'), key('attention.head_count')
  config = {
    'hidden_size': hidden,
    'intermediate_size': key('feed_forward_length'),
    'num_hidden_layers': key('block_count'),
    'num_attention_heads': heads,
    'num_key_value_heads': key('attention.head_count_kv', heads),
    'max_position_embeddings': key('context_length'),
    'rms_norm_eps': key('attention.layer_norm_rms_epsilon'),
    'rope_theta': key('rope.freq_base', 10000.0),
    'vocab_size': vocab_size,
    # llama.cpp writes an output matrix only when it is not the embedding matrix.
    'tie_word_embeddings': 'output.weight' not in header.tensors,
    **tokens,
  }
  scaling = key('rope.scaling.type', 'none')
  config['rope_scaling'] = None
  if scaling != 'none':
    config['rope_scaling'] = {'rope_type': scaling, 'factor': key('rope.scaling.factor', 1.0)}
  if architecture == 'qwen2':  # biases on the queries, keys and values always, on nothing else
    return {'model_type': 'qwen2', **config, 'hidden_act': 'silu', 'use_sliding_window': False}
  config['attention_bias'] = 'blk.0.attn_q.bias' in header.tensors
  if architecture == 'llama':
    head_dim = key('rope.dimension_count', hidden // heads)
    return {'model_type': 'llama', **config, 'head_dim': head_dim, 'hidden_act': 'silu'}
  return _gemma3_config(key, config)


def _metadata_key(header: Header, architecture: str) -> Callable[..., Any]:
  """`key(name, default)`: the file's `{architecture}.{name}` metadata (`_float`), or `default`;
  with no default a missing key is a ValueError naming the file and the key."""
  meta, path = header.metadata, header.path

  def key(name: str, default: Any = KeyError) -> Any:
    full = f'{architecture}.{name}'
    if full not in meta and default is KeyError:
      raise ValueError(f'{path} has no metadata {full!r}, which a {architecture} GGUF gives.')
    return _float(meta.get(full, default))

  return key


def _gpt2_config(
  key: Callable[..., Any], vocab_size: int, tokens: dict[str, int]
) -> dict[str, Any]:
  """GPT-2's config.json: its own key names, and llama.cpp's tanh GELU."""
  return {
    'model_type': 'gpt2',
    'n_embd': key('embedding_length'),
    'n_inner': key('feed_forward_length'),
    'n_layer': key('block_count'),
    'n_head': key('attention.head_count'),
    'n_positions': key('context_length'),
    'layer_norm_epsilon': key('attention.layer_norm_epsilon'),
    'activation_function': 'gelu_new',  # llama.cpp's GPT-2 computes the tanh GELU
    'vocab_size': vocab_size,
    # GPT-2's head is its embedding: llama.cpp's converter writes it again as output.weight,
    # which transformers reads as the same tied head.
    'tie_word_embeddings': True,
    **tokens,
  }


def _gemma3_config(key: Callable[..., Any], config: dict[str, Any]) -> dict[str, Any]:
  """Gemma 3's config.json: the Llama family's `config` and the values llama.cpp fixes in code."""
  hidden, heads = config['hidden_size'], config['num_attention_heads']
  head_dim, window = key('attention.key_length'), key('attention.sliding_window', 0)
  layers = config['num_hidden_layers']
  # Without a window every layer is global; with one, llama.cpp fixes Gemma 3's layers as five
  # sliding-window ones then a global one, unless the file gives the pattern (every k-th global,
  # or per layer True for a sliding-window one).
  pattern = key('attention.sliding_window_pattern', 6) if window else 1
  if isinstance(pattern, int):
    sliding = [(i + 1) % pattern != 0 for i in range(layers)]
  else:
    sliding = [bool(s) for s in pattern]
  return {
    'model_type': 'gemma3_text',
    **config,
    'head_dim': head_dim,
    'hidden_activation': 'gelu_pytorch_tanh',
    'sliding_window': window or None,
    'layer_types': ['sliding_attention' if s else 'full_attention' for s in sliding],
    'rope_local_base_freq': 10000.0,
    # llama.cpp scales Gemma 3's scores by key_length^-1/2, by (D/N)^-1/2 in the 62-layer 27B.
    'query_pre_attn_scalar': hidden // heads if layers == 62 else head_dim,
    'final_logit_softcapping': key('final_logit_softcapping', None),
    'attn_logit_softcapping': key('attn_logit_softcapping', None),
  }


def _architecture(header: Header) -> str:
  architecture = header.metadata.get('general.architecture')
  if architecture not in BLOCK:
    raise ValueError(
      f'{header.path} is a GGUF of architecture {architecture!r}, which Attend does not '
      f'convert; supported: {", ".join(BLOCK)}.'
    )
  return architecture


def read_gguf_config(path: str) -> dict[str, Any]:
  """The Hugging Face config.json of a GGUF file, from its header alone."""
  header = read_header(path)
  return hf_config(header, _architecture(header))


def read_gguf(path: str) -> tuple[dict[str, Any], GGUFTensors, str, str]:
  """`(config, tensors, tokenizer.json text, chat template)` of a GGUF file (see the module
  docstring); the chat template is `tokenizer.chat_template`, '' when the file has none.

  Raises:
    ValueError: one sentence naming the file: truncated or damaged, an architecture or
      tokenizer Attend does not convert, or a tensor type gguf cannot dequantise.
  """
  header = read_header(path)
  architecture = _architecture(header)
  check_readable(header)
  config = hf_config(header, architecture)
  tensors = GGUFTensors(
    header, hf_names(architecture, config), transform(architecture, config, stored=False)
  )
  chat_template = header.metadata.get('tokenizer.chat_template', '')
  return config, tensors, tokenizer_json(header.metadata, architecture, path), chat_template
