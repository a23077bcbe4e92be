"""Attend's own vocabularies (data/tokenizers.py) written as a Hugging Face `tokenizer.json`, so a
model trained on one leaves with its tokenizer (export.py): `transformers.AutoTokenizer` then
gives the ids Attend's data pipeline gives, `tokenizer.encode(preprocess(text))`.

    tokenizer_json(tokenizer, preprocess)   # -> the text of a tokenizer.json

What each part of the pipeline becomes, in the `tokenizers` package's terms:
- the preprocessing (data.text.TextOptions): lower-casing a `Lowercase` normalizer; whitespace
  collapsed to single spaces and stripped (unless `keep_whitespace`) two `Replace`s over the
  characters Python's `str.split` splits on; punctuation spaced out (word vocabularies) a split
  that isolates each punctuation mark outside the joiners `space_punctuation` keeps attached;
- a character vocabulary: one piece per character, joined back with nothing (`Fuse`);
- a word vocabulary: pieces split on whitespace, joined back with one space (the default when
  tokenizer.json names no decoder);
- a SentencePiece unigram model: its pieces and scores as a `Unigram` model, behind spaces
  collapsed and stripped, then written `▁` with one before the text (`Metaspace`), as
  SentencePiece's defaults, which Attend's training keeps (identity normalization), do;
- the four specials `<pad>`, `<bos>`, `<eos>`, `<unk>` (ids 0-3) as special tokens, which
  decoding with `skip_special_tokens` leaves out. No special is added to an encoding: Attend's
  `encode` adds none (the input pipeline frames rows itself).

A character or SentencePiece vocabulary with punctuation spaced out is refused in one sentence:
it inserts spaces that no `tokenizers` normalizer can insert. Lower-casing follows Rust's
Unicode tables, which differ from Python 3.11's on 55 code points of recent Unicode versions.
"""

import json
import sys

from data.special_ids import SPECIAL_TOKENS, UNK_ID
from data.text import TextOptions
from data.tokenizers import CharTokenizer, SentencePieceTokenizer, Tokenizer, WordTokenizer


def _python_class(test) -> str:
  """A regex class of the code points for which `test` (a `str` method) holds, as ranges."""
  points = [c for c in range(sys.maxunicode + 1) if test(chr(c))]
  runs, start = [], points[0]
  for previous, point in zip(points, points[1:] + [None]):
    if point != previous + 1:
      runs.append(f'\\x{{{start:x}}}' + (f'-\\x{{{previous:x}}}' if previous > start else ''))
      start = point
  return '[' + ''.join(runs) + ']'


# What Python's str.split() splits on (Unicode's White_Space and U+001C-U+001F).
_WHITESPACE = _python_class(str.isspace)
# data.text.space_punctuation: a punctuation mark, unless it joins two letters or digits (an
# apostrophe or a hyphen: Python's isalnum is exactly \p{L} or \p{N}) or two digits (a decimal
# point or a thousands separator: Python's isdigit, superscripts included).
_ALNUM, _DIGIT = r'[\p{L}\p{N}]', _python_class(str.isdigit)
_SPACED_PUNCTUATION = (
  rf"(?!(?<={_ALNUM})['\u2019\-\u2010](?={_ALNUM}))(?!(?<={_DIGIT})[.,](?={_DIGIT}))\p{{P}}"
)
_SPACE_PIECE = '\u2581'  # SentencePiece's written space


def _replace(pattern: str, content: str) -> dict:
  return {'type': 'Replace', 'pattern': {'Regex': pattern}, 'content': content}


def _normalizer(preprocess: TextOptions, sentencepiece: bool) -> dict | None:
  """The preprocessing, then (SentencePiece) what its `remove_extra_whitespaces` does to the
  space character alone: runs cut to one, none at either end. `\\A` and `\\z`, as `^` and `$`
  match at every line in these regexes."""
  steps = [{'type': 'Lowercase'}] if preprocess.lowercase else []
  if not preprocess.keep_whitespace:
    ends = rf'\A{_WHITESPACE}+|{_WHITESPACE}+\z'
    steps += [_replace(ends, ''), _replace(f'{_WHITESPACE}+', ' ')]
  if sentencepiece:
    steps += [_replace(r'\A +| +\z', ''), _replace(' {2,}', ' ')]
  return {'type': 'Sequence', 'normalizers': steps} if steps else None


def _split(pattern: str, behavior: str) -> dict:
  return {'type': 'Split', 'pattern': {'Regex': pattern}, 'behavior': behavior, 'invert': False}


def _model_parts(
  tokenizer: Tokenizer, preprocess: TextOptions
) -> tuple[dict, dict | None, dict | None]:
  """`(model, pre_tokenizer, decoder)` of the vocabulary."""
  if isinstance(tokenizer, WordTokenizer | CharTokenizer):
    vocab = {token: i for i, token in enumerate(tokenizer.vocab)}
    model = {'type': 'WordLevel', 'vocab': vocab, 'unk_token': SPECIAL_TOKENS[UNK_ID]}
    if isinstance(tokenizer, CharTokenizer):
      return model, _split(r'[\s\S]', 'Isolated'), {'type': 'Fuse'}
    words = [_split(f'{_WHITESPACE}+', 'Removed')]
    if preprocess.split_punctuation:
      words.append(_split(_SPACED_PUNCTUATION, 'Isolated'))
    return model, {'type': 'Sequence', 'pretokenizers': words}, None
  if isinstance(tokenizer, SentencePieceTokenizer):
    pieces = [list(scored) for scored in tokenizer.scored_pieces()]
    model = {'type': 'Unigram', 'unk_id': UNK_ID, 'vocab': pieces, 'byte_fallback': False}
    space = {'type': 'Metaspace', 'replacement': _SPACE_PIECE, 'prepend_scheme': 'always'}
    return model, {**space, 'split': True}, {**space, 'split': True}
  raise ValueError(f'A {tokenizer.kind!r} vocabulary has its own tokenizer.json already.')


def tokenizer_json(tokenizer: Tokenizer, preprocess: TextOptions) -> str:
  """The text of a tokenizer.json that encodes text as `tokenizer.encode(preprocess(text))`.

  Args:
    tokenizer: a character, word or SentencePiece vocabulary of data/tokenizers.py.
    preprocess: the run's text preprocessing (data.language.text_options of its config.dataset).

  Raises:
    ValueError: one sentence naming the config field no tokenizer.json can express.
  """
  if preprocess.strip_accents or preprocess.split_cjk:
    raise ValueError('Accents stripped or CJK spaced out have no tokenizer.json form.')
  if preprocess.split_punctuation and not isinstance(tokenizer, WordTokenizer):
    raise ValueError(
      f'config.dataset.split_punctuation=True with config.dataset.vocab={tokenizer.kind!r} '
      'inserts spaces no tokenizer.json can insert; only a word vocabulary exports with it.'
    )
  model, pre_tokenizer, decoder = _model_parts(tokenizer, preprocess)
  flags = dict(single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
  added = [dict(id=i, content=token, **flags) for i, token in enumerate(SPECIAL_TOKENS)]
  document = {
    'version': '1.0',
    'truncation': None,
    'padding': None,
    'added_tokens': added,
    'normalizer': _normalizer(preprocess, isinstance(tokenizer, SentencePieceTokenizer)),
    'pre_tokenizer': pre_tokenizer,
    'post_processor': None,
    'decoder': decoder,
    'model': model,
  }
  return json.dumps(document, ensure_ascii=False, indent=1)
