"""The tokenizer.json of a GGUF file's vocabulary (`tokenizer.ggml.*` metadata), for the
`tokenizers` library (data.pretrained_tokenizer.PretrainedTokenizer reads it).

It gives the ids transformers' tokenizer of the same file gives
(`AutoTokenizer.from_pretrained(folder, gguf_file=name)`):

- `tokenizer.ggml.model` 'gpt2': byte-level BPE from the file's tokens and merges, text split by
  GPT-2's pattern or, for `tokenizer.ggml.pre` 'llama-bpe' (Llama 3) and 'qwen2', theirs;
- 'llama' in a Gemma 3 file: SentencePiece pieces as BPE with byte fallback and no prefix space.
  The file lists no merges, so they are rebuilt from the vocabulary: every split of a piece into
  two pieces, best first in the order of the pieces in the file (Gemma's scores do not follow
  it); pieces of spaces alone are stored with real spaces and are spelled with '▁' as the text is.

Tokens of type CONTROL are special tokens, those of type USER_DEFINED (Gemma's runs of tabs and
newlines, its HTML tags) are matched whole; `<bos>`/`<eos>` open/close a text where the file's
`add_bos_token`/`add_eos_token` say so.
"""

from typing import Any

CONTROL, USER_DEFINED = 3, 4  # tokenizer.ggml.token_type values (llama.cpp's llama_token_type)
SPACE = '\u2581'  # SentencePiece's visible space
# Llama 3's pre-tokenizer pattern (tiktoken's cl100k with 1-3 digit numbers).
LLAMA3_SPLIT = (
  r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
  r'| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+'
)
# Qwen2's: Llama 3's, with numbers cut into single digits.
QWEN2_SPLIT = LLAMA3_SPLIT.replace(r'\p{N}{1,3}', r'\p{N}')
# `tokenizer.ggml.pre` -> the pattern that splits text before byte-level BPE (None: GPT-2's).
PRE_TOKENIZERS = {
  'default': None,
  'gpt2': None,
  'smollm': None,
  'llama-bpe': LLAMA3_SPLIT,
  'llama3': LLAMA3_SPLIT,
  'qwen2': QWEN2_SPLIT,
}


def pre_tokenizer_name(pre_tokenizer: dict | None) -> str | None:
  """The `tokenizer.ggml.pre` of a byte-level tokenizer.json's pre-tokenizer (its JSON): 'gpt2'
  where the byte level splits by GPT-2's own pattern, else the name of the one pattern it splits
  by (`PRE_TOKENIZERS`); None for another split or another step (digits cut apart), which no
  name stands for."""
  steps = (pre_tokenizer or {}).get('pretokenizers', [pre_tokenizer or {}])
  patterns = [step['pattern'].get('Regex') for step in steps if step.get('type') == 'Split']
  own = [step.get('use_regex', True) for step in steps if step.get('type') == 'ByteLevel']
  if len(patterns) + len(own) != len(steps):
    return None
  if own == [True] and not patterns:
    return 'gpt2'
  names = [name for name, split in PRE_TOKENIZERS.items() if split and [split] == patterns]
  return names[0] if own == [False] and names else None


def _byte_level(meta: dict[str, Any], path: str):
  """Byte-level BPE: GPT-2's printable stand-in for each byte, the file's merges."""
  from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

  pre = meta.get('tokenizer.ggml.pre', 'default')
  if pre not in PRE_TOKENIZERS:
    raise ValueError(
      f'{path} has tokenizer.ggml.pre={pre!r}, a pre-tokenizer Attend does not reproduce; '
      f'supported: {", ".join(PRE_TOKENIZERS)}.'
    )
  alphabet = set(pre_tokenizers.ByteLevel.alphabet())
  spell = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)

  def spelled(token: str) -> str:  # a token stored as text (some files do) in the alphabet
    if set(token) <= alphabet:
      return token
    return ''.join(piece for piece, _ in spell.pre_tokenize_str(token))

  tokens = meta['tokenizer.ggml.tokens']
  vocab = {spelled(token): i for i, token in enumerate(tokens)}
  merges = [tuple(merge.split(' ')) for merge in meta.get('tokenizer.ggml.merges', ())]
  tokenizer = Tokenizer(
    models.BPE(vocab, merges, continuing_subword_prefix='', end_of_word_suffix='')
  )
  byte_level = pre_tokenizers.ByteLevel(
    add_prefix_space=False, use_regex=PRE_TOKENIZERS[pre] is None
  )
  if PRE_TOKENIZERS[pre] is not None:
    split = pre_tokenizers.Split(Regex(PRE_TOKENIZERS[pre]), behavior='isolated')
    byte_level = pre_tokenizers.Sequence([split, byte_level])
  tokenizer.pre_tokenizer = byte_level
  tokenizer.decoder = decoders.ByteLevel()
  # A CONTROL token outside the byte alphabet would be a new id past the vocabulary: llama.cpp
  # marks some plain tokens so; they stay plain.
  return tokenizer, vocab, lambda token: set(token) <= alphabet


def _sentencepiece(meta: dict[str, Any]):
  """Gemma's pieces as BPE with byte fallback; merges rebuilt from the vocabulary."""
  from tokenizers import Tokenizer, decoders, models, normalizers

  tokens = [
    SPACE * len(token) if token and not token.strip(' ') else token
    for token in meta['tokenizer.ggml.tokens']
  ]
  vocab = {token: i for i, token in enumerate(tokens)}
  # Every split of each piece into two pieces of the vocabulary, pieces in file order, and each
  # piece's splits from the longest left part to the shortest.
  merges = [
    (token[:cut], token[cut:])
    for token in vocab
    for cut in range(len(token) - 1, 0, -1)
    if token[:cut] in vocab and token[cut:] in vocab
  ]
  unk = meta.get('tokenizer.ggml.unknown_token_id')
  tokenizer = Tokenizer(
    models.BPE(
      vocab,
      merges,
      unk_token=None if unk is None else tokens[unk],
      fuse_unk=True,
      byte_fallback=True,
    )
  )
  tokenizer.normalizer = normalizers.Replace(' ', SPACE)
  tokenizer.decoder = decoders.Sequence(
    [decoders.Replace(SPACE, ' '), decoders.ByteFallback(), decoders.Fuse()]
  )
  return tokenizer, vocab, lambda token: True


def tokenizer_json(meta: dict[str, Any], architecture: str, path: str) -> str:
  """The tokenizer.json text of a GGUF file's metadata (see the module docstring).

  Raises:
    ValueError: a tokenizer kind or pre-tokenizer Attend does not reproduce, naming the file.
  """
  from tokenizers import AddedToken, processors

  kind = meta.get('tokenizer.ggml.model')
  if kind == 'gpt2':
    tokenizer, vocab, may_be_special = _byte_level(meta, path)
  elif kind == 'llama' and architecture == 'gemma3':
    tokenizer, vocab, may_be_special = _sentencepiece(meta)
  else:
    raise ValueError(
      f"{path} has tokenizer.ggml.model={kind!r} in a {architecture} file; Attend reads 'gpt2' "
      "(byte-level BPE) and, in Gemma 3 files, 'llama' (SentencePiece)."
    )
  tokens, types = meta['tokenizer.ggml.tokens'], meta.get('tokenizer.ggml.token_type', ())
  tokenizer.add_special_tokens(
    [
      AddedToken(token, normalized=False, special=True)
      for token, token_type in zip(tokens, types)
      if token_type == CONTROL and may_be_special(token)
    ]
  )
  # Spaces-only pieces are spelled anew above: their stored form is not in the vocabulary.
  tokenizer.add_tokens(
    [
      AddedToken(token, normalized=False, special=False)
      for token, token_type in zip(tokens, types)
      if token_type == USER_DEFINED and token in vocab
    ]
  )
  ends = {}  # 'bos'/'eos' -> (token, id), where the file adds it to each text
  # llama.cpp adds <bos> to a SentencePiece vocabulary's texts unless the file says otherwise.
  for end, default in (('bos', kind == 'llama'), ('eos', False)):
    token_id = meta.get(f'tokenizer.ggml.{end}_token_id')
    if token_id is not None and meta.get(f'tokenizer.ggml.add_{end}_token', default):
      ends[end] = (tokens[token_id], token_id)

  def template(text: str, type_id: int) -> str:  # transformers' update_post_processor's
    parts = [f'{ends[end][0]}:{type_id}' if end in ends else '' for end in ('bos', 'eos')]
    return ' '.join(part for part in (parts[0], f'${text}:{type_id}', parts[1]) if part)

  tokenizer.post_processor = processors.TemplateProcessing(
    single=template('A', 0),
    pair=f'{template("A", 0)} {template("B", 1)}',
    special_tokens=list(ends.values()),
  )
  return tokenizer.to_str()
