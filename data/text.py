"""Text preprocessing applied to every example before tokenization.

All options default to off; whitespace is collapsed to single spaces so that word tokenizers
and `decode(encode(text))` see one canonical form, unless `keep_whitespace` (character-level
language models, for which line breaks and indentation are part of the text).
"""

import dataclasses
import functools
import re
import unicodedata

# Han ideographs (with extensions and compatibility forms), kana, CJK symbols and punctuation,
# and full-width forms. Hangul is left out on purpose: Korean separates words with spaces.
_CJK_CHARS = re.compile(
  '([\u3000-\u303f\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff'
  '\uf900-\ufaff\uff00-\uffef\U00020000-\U0002ffff])'
)

# Punctuation that stays attached when it joins two letters or digits ("don't", "twenty-one").
_WORD_JOINERS = frozenset("'\u2019-\u2010")
# Punctuation that stays attached between two digits ("3.5", "1,000").
_NUMBER_JOINERS = frozenset('.,')


@functools.lru_cache(maxsize=4096)
def _is_latin(char: str) -> bool:
  return unicodedata.name(char, '').startswith('LATIN')


@functools.lru_cache(maxsize=4096)
def _is_punctuation(char: str) -> bool:
  return unicodedata.category(char).startswith('P')


def strip_latin_accents(text: str) -> str:
  """Removes combining marks from Latin letters only ("Café" -> "Cafe", "йога" stays).

  Marks on other scripts carry meaning (Cyrillic "й", Japanese dakuten), so they are kept.
  """
  if text.isascii():
    return text
  out = []
  base_is_latin = False
  for char in unicodedata.normalize('NFD', text):
    if unicodedata.combining(char):
      if base_is_latin:
        continue
    else:
      base_is_latin = _is_latin(char)
    out.append(char)
  return unicodedata.normalize('NFC', ''.join(out))


def space_punctuation(text: str) -> str:
  """Puts spaces around punctuation, except word-internal apostrophes/hyphens and digit separators.

  "He's twenty-one, isn't he?" -> "He's twenty-one , isn't he ?"
  """
  out = []
  last = len(text) - 1
  for i, char in enumerate(text):
    if not _is_punctuation(char):
      out.append(char)
      continue
    inside = 0 < i < last
    if inside and char in _WORD_JOINERS and text[i - 1].isalnum() and text[i + 1].isalnum():
      out.append(char)
    elif inside and char in _NUMBER_JOINERS and text[i - 1].isdigit() and text[i + 1].isdigit():
      out.append(char)
    else:
      out.append(f' {char} ')
  return ''.join(out)


def space_cjk(text: str) -> str:
  """Puts spaces around every CJK character, so word vocabularies see one character per token."""
  return _CJK_CHARS.sub(r' \1 ', text)


@dataclasses.dataclass(frozen=True)
class TextOptions:
  """Preprocessing switches, applied in the order of the fields.

  Attributes:
    lowercase: lower-case the text.
    strip_accents: drop accents from Latin letters (see `strip_latin_accents`).
    split_cjk: space out CJK characters (see `space_cjk`).
    split_punctuation: space out punctuation (see `space_punctuation`).
    keep_whitespace: leave whitespace as it is instead of collapsing it to single spaces.
  """

  lowercase: bool = False
  strip_accents: bool = False
  split_cjk: bool = False
  split_punctuation: bool = False
  keep_whitespace: bool = False

  def __call__(self, text: str) -> str:
    """Returns the preprocessed text, its whitespace collapsed unless `keep_whitespace`."""
    if self.lowercase:
      text = text.lower()
    if self.strip_accents:
      text = strip_latin_accents(text)
    if self.split_cjk:
      text = space_cjk(text)
    if self.split_punctuation:
      text = space_punctuation(text)
    return text if self.keep_whitespace else ' '.join(text.split())
