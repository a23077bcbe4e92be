"""Tiny GGUF files written with gguf's own `GGUFWriter`, for tests/test_gguf.py: a random Llama
with a byte-level BPE vocabulary and a random Gemma 3 with SentencePiece pieces, written as
llama.cpp's converter writes them (Llama's query and key rows permuted for its rope, Gemma's
RMSNorm weights stored as 1 + w), with a mix of quantisation types; and the texts tokenizers
are compared on.
"""

import numpy as np

# Texts the tokenizers are compared on: code, runs of spaces, tabs and newlines, digits,
# punctuation, accents, CJK, emoji, other scripts.
TEXTS = [
  'Hello world',
  'The quick brown fox jumps over the lazy dog.',
  '  leading and trailing spaces  ',
  'tabs\tand\t\tmore\ttabs',
  'new\nlines\n\n\nand a blank line\n',
  'def f(x):\n    return x ** 2  # square\n',
  'for (int i = 0; i < 10; ++i) { sum += a[i]; }',
  '1234567890 and 3.14159 and 1,000,000',
  'Prices: $19.99, €5, £3.50, ¥100',
  'Punctuation!?... "quoted" (parens) [brackets] {braces} <angle>',
  'Café naïve façade résumé coöperate',
  'Ärger über Öl — Straße',
  '日本語のテキスト、中文文本。',
  '한국어 텍스트',
  'Emoji: 😀🎉👍🏽 and 🇫🇷 flags',
  'Mixed:  a  b   c    d     e',
  "It's can't won't they're I'm we'll he'd",
  'URL https://example.com/path?q=1&r=two#frag',
  'CamelCaseIdentifier snake_case_identifier kebab-case',
  '    indented four spaces\n\tindented tab',
  'Ω≈ç√∫˜µ≤≥÷ αβγδ',
  '<html><body><p>Hi</p></body></html>',
  'x' * 50 + ' ' + 'ab' * 20,
  '\u00a0non-breaking\u2003em space\u200bzero width',
  'Русский текст и العربية',
]
LLAMA = dict(hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=96, layers=2)
GEMMA3 = dict(hidden=64, heads=2, kv_heads=1, head_dim=32, ffn=96, layers=2, window=4)
# Byte-level BPE merges; each merged pair is a token. 'Ġx' is stored as ' x' (raw text, as some
# files store tokens), which a reader must spell in the byte alphabet to match the merge.
MERGES = [
  ('Ġ', 't'),
  ('h', 'e'),
  ('Ġt', 'he'),
  ('Ġ', 'a'),
  ('i', 'n'),
  ('Ġ', 'w'),
  ('o', 'r'),
  ('Ġw', 'or'),
  ('l', 'd'),
  ('Ġwor', 'ld'),
  ('l', 'l'),
  ('e', 'll'),
  ('h', 'ell'),
  ('hell', 'o'),
  ('Ġ', 'x'),
]
# Gemma-style pieces after its specials and 256 byte pieces: user-defined runs of newlines, a tab
# and spaces (stored with real spaces; as in Gemma 3, no '▁' piece spells a run of spaces too, so
# the two never name one piece), '▁' pieces whose splits make the merges.
GEMMA_PIECES = [
  ('[multimodal]', 4),
  ('\n', 4),
  ('\n\n', 4),
  ('\t', 4),
  ('  ', 4),
  ('   ', 4),
  *[(piece, 1) for piece in '▁ t h e a n d o r w l i s'.split(' ')],
  *[(p, 1) for p in ['th', 'he', '▁t', '▁th', '▁the', 'an', '▁a', '▁an', 'nd', '▁and']],
  *[(p, 1) for p in ['or', 'wor', '▁w', '▁wor', 'ld', '▁world', 'll', 'ell', 'hell', '▁hell']],
  *[(p, 1) for p in ['is', '▁is', 'é', '<h1>']],
]


def permute(weight: np.ndarray, heads: int) -> np.ndarray:
  """llama.cpp's converter's permutation of Hugging Face query/key rows (halves -> pairs)."""
  return (
    weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
    .swapaxes(1, 2)
    .reshape(weight.shape)
  )


def write(path: str, arch: str, metadata: dict, tensors: dict) -> str:
  """A GGUF file of `metadata` (`{key: int | float | bool | str | list}`) and `tensors`
  (`{gguf name: (float32 array, ggml type)}`, quantised here; a uint8 array is taken as the
  type's bytes)."""
  import gguf

  writer = gguf.GGUFWriter(path, arch)
  adders = ((bool, writer.add_bool), (int, writer.add_uint32), (float, writer.add_float32))
  for key, value in metadata.items():
    if isinstance(value, (list, tuple)):
      writer.add_array(key, list(value))
    elif isinstance(value, str):
      writer.add_string(key, value)
    else:
      next(add for kind, add in adders if isinstance(value, kind))(key, value)
  for name, (values, qtype) in tensors.items():
    data = values if values.dtype == np.uint8 else gguf.quants.quantize(values, qtype)
    raw = None if qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16) else qtype
    writer.add_tensor(name, data, raw_dtype=raw)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return path


def byte_level_vocab() -> tuple[list[str], list[int], list[str]]:
  """`(tokens, token types, merges)`: two CONTROL tokens, the 256 bytes, `MERGES`, one
  USER_DEFINED token."""
  from tokenizers.pre_tokenizers import ByteLevel

  merged = [a + b for a, b in MERGES]
  tokens = ['<|endoftext|>', '<|im_start|>', *sorted(ByteLevel.alphabet()), *merged, '<think>']
  tokens[tokens.index('Ġx')] = ' x'
  types = [3, 3, *[1] * (len(tokens) - 3), 4]
  return tokens, types, [f'{a} {b}' for a, b in MERGES]


def byte_level_tokenizer_json(pre: str) -> str:
  """`byte_level_vocab` as a tokenizer.json splitting text as GGUF's `tokenizer.ggml.pre` names
  (Attend's reading of such a file's metadata), for a Hugging Face folder of another family."""
  from models.pretrained.gguf_tokenizer import tokenizer_json

  tokens, types, merges = byte_level_vocab()
  keys = dict(model='gpt2', pre=pre, tokens=tokens, token_type=types, merges=merges)
  meta = {f'tokenizer.ggml.{key}': value for key, value in keys.items()}
  return tokenizer_json({**meta, 'tokenizer.ggml.eos_token_id': 0}, 'llama', f'a {pre} vocabulary')


def sentencepiece_vocab() -> tuple[list[str], list[int], list[float]]:
  """`(tokens, token types, scores)` of Gemma's layout: specials, bytes, `GEMMA_PIECES`."""
  specials = [('<pad>', 3), ('<eos>', 3), ('<bos>', 3), ('<unk>', 3), ('<mask>', 3)]
  pieces = [*specials, *[(f'<0x{b:02X}>', 6) for b in range(256)], *GEMMA_PIECES]
  scores = [-float(i) for i in range(len(pieces))]
  return [p for p, _ in pieces], [t for _, t in pieces], scores


def _decoder(rng, size: dict, vocab: int, names: dict[str, tuple]) -> dict[str, np.ndarray]:
  """Random weights by GGUF name: `names` maps each block tensor to its shape."""
  weights = {'token_embd.weight': rng.normal(0, 1, (vocab, size['hidden']))}
  for i in range(size['layers']):
    weights |= {
      f'blk.{i}.{name}.weight': rng.normal(0, 0.2, shape) for name, shape in names.items()
    }
  return {name: w.astype(np.float32) for name, w in weights.items()}


def write_llama(path: str, types: dict[str, int]) -> str:
  """A random untied Llama (grouped-query heads, rope base 500,000); `types`: ggml type per
  tensor kind (`attn_q`, `ffn_down`, ...; F32 otherwise)."""
  import gguf

  s, rng = LLAMA, np.random.default_rng(0)
  tokens, token_types, merges = byte_level_vocab()
  d, q, kv = s['hidden'], s['heads'] * s['head_dim'], s['kv_heads'] * s['head_dim']
  shapes = dict(attn_q=(q, d), attn_k=(kv, d), attn_v=(kv, d), attn_output=(d, q))
  shapes |= dict(ffn_gate=(s['ffn'], d), ffn_up=(s['ffn'], d), ffn_down=(d, s['ffn']))
  weights = _decoder(rng, s, len(tokens), shapes)
  for i in range(s['layers']):
    weights[f'blk.{i}.attn_q.weight'] = permute(weights[f'blk.{i}.attn_q.weight'], s['heads'])
    weights[f'blk.{i}.attn_k.weight'] = permute(weights[f'blk.{i}.attn_k.weight'], s['kv_heads'])
    for norm in ('attn_norm', 'ffn_norm'):
      weights[f'blk.{i}.{norm}.weight'] = rng.uniform(0.5, 1.5, d).astype(np.float32)
  weights['output_norm.weight'] = rng.uniform(0.5, 1.5, d).astype(np.float32)
  weights['output.weight'] = rng.normal(0, 0.5, (len(tokens), d)).astype(np.float32)
  kind = lambda name: name.split('.')[-2]
  f32 = gguf.GGMLQuantizationType.F32
  meta = {
    'llama.context_length': 128,
    'llama.embedding_length': d,
    'llama.block_count': s['layers'],
    'llama.feed_forward_length': s['ffn'],
    'llama.attention.head_count': s['heads'],
    'llama.attention.head_count_kv': s['kv_heads'],
    'llama.rope.dimension_count': s['head_dim'],
    'llama.rope.freq_base': 500000.0,
    'llama.attention.layer_norm_rms_epsilon': 1e-5,
    'tokenizer.ggml.model': 'gpt2',
    'tokenizer.ggml.pre': 'llama-bpe',
    'tokenizer.ggml.tokens': tokens,
    'tokenizer.ggml.token_type': token_types,
    'tokenizer.ggml.merges': merges,
    'tokenizer.ggml.bos_token_id': 1,
    'tokenizer.ggml.eos_token_id': 0,
    'tokenizer.ggml.add_bos_token': True,
  }
  return write(path, 'llama', meta, {n: (w, types.get(kind(n), f32)) for n, w in weights.items()})


def write_gemma3(path: str) -> str:
  """A random tied Gemma 3 (a window of 4, qk-norm, sandwich norms), norms stored as 1 + w."""
  import gguf

  s, rng = GEMMA3, np.random.default_rng(1)
  tokens, token_types, scores = sentencepiece_vocab()
  d, q, kv = s['hidden'], s['heads'] * s['head_dim'], s['kv_heads'] * s['head_dim']
  shapes = dict(attn_q=(q, d), attn_k=(kv, d), attn_v=(kv, d), attn_output=(d, q))
  shapes |= dict(ffn_gate=(s['ffn'], d), ffn_up=(s['ffn'], d), ffn_down=(d, s['ffn']))
  norms = dict(attn_norm=d, post_attention_norm=d, ffn_norm=d, post_ffw_norm=d)
  norms |= dict(attn_q_norm=s['head_dim'], attn_k_norm=s['head_dim'])
  weights = _decoder(rng, s, len(tokens), shapes)
  for i in range(s['layers']):
    weights |= {f'blk.{i}.{n}.weight': 1 + rng.normal(0, 0.2, size) for n, size in norms.items()}
  weights['output_norm.weight'] = 1 + rng.normal(0, 0.2, d)
  meta = {
    'gemma3.context_length': 128,
    'gemma3.embedding_length': d,
    'gemma3.block_count': s['layers'],
    'gemma3.feed_forward_length': s['ffn'],
    'gemma3.attention.head_count': s['heads'],
    'gemma3.attention.head_count_kv': s['kv_heads'],
    'gemma3.attention.key_length': s['head_dim'],
    'gemma3.attention.value_length': s['head_dim'],
    'gemma3.attention.sliding_window': s['window'],
    'gemma3.rope.freq_base': 1000000.0,
    'gemma3.attention.layer_norm_rms_epsilon': 1e-6,
    'tokenizer.ggml.model': 'llama',
    'tokenizer.ggml.pre': 'default',
    'tokenizer.ggml.tokens': tokens,
    'tokenizer.ggml.scores': scores,
    'tokenizer.ggml.token_type': token_types,
    'tokenizer.ggml.bos_token_id': 2,
    'tokenizer.ggml.eos_token_id': 1,
    'tokenizer.ggml.unknown_token_id': 3,
    'tokenizer.ggml.padding_token_id': 0,
    'tokenizer.ggml.add_bos_token': True,
    'tokenizer.ggml.add_eos_token': False,
  }
  q8, f32 = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.F32
  typed = {n: (w.astype(np.float32), q8 if w.ndim == 2 else f32) for n, w in weights.items()}
  return write(path, 'gemma3', meta, typed)
