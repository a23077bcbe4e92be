"""A small rule-based English sentence splitter, `split_sentences(text) -> list[str]`.

Rules, applied in order:

1. Blank lines (a newline, optional spaces, another newline) always end a sentence.
2. Within a paragraph, a sentence ends after a run of `.`, `!` or `?`, together with any
   closing quotes or brackets right after it (`."`, `?)`), when whitespace follows and the next
   character is an upper-case letter, a digit, or an opening quote or bracket. So "3.5" (no
   whitespace) and "it ended. then" (lower case) never split.
3. A single `.` does not end a sentence after
   - a common abbreviation (`ABBREVIATIONS`: "Mr.", "Dr.", "vs.", "etc.", "Inc.", ...),
   - an abbreviation that precedes numbers (`NUMBER_ABBREVIATIONS`: "No. 5", "Fig. 2") when a
     digit follows,
   - a single letter, i.e. an initial ("J. Smith"),
   - dotted letters such as "U.S.", "e.g.", "i.e." and "a.m.".
   Abbreviations are matched case-sensitively ("No. 5", but "I said no. Then" splits).

Sentences come back stripped of surrounding whitespace, in order, empty ones dropped; the text
inside a sentence is left as it was. Joining sentences that each end with a terminator, with
single spaces, and splitting again gives the same sentences, provided no sentence ends with an
abbreviation or an initial and each starts with an upper-case letter, digit or quote.
"""

import re

ABBREVIATIONS = frozenset(
  {
    'Mr',
    'Mrs',
    'Ms',
    'Mx',
    'Dr',
    'Prof',
    'St',
    'Jr',
    'Sr',
    'Mt',
    'Ft',
    'Gen',
    'Col',
    'Capt',
    'Lt',
    'Sgt',
    'Rev',
    'Hon',
    'Gov',
    'Sen',
    'Rep',
    'Pres',
    'Inc',
    'Ltd',
    'Co',
    'Corp',
    'Bros',
    'Ave',
    'Rd',
    'Blvd',
    'Dept',
    'Univ',
    'Est',
    'approx',
    'vs',
    'etc',
    'cf',
    'al',
    'ca',
    'Jan',
    'Feb',
    'Mar',
    'Apr',
    'Jun',
    'Jul',
    'Aug',
    'Sep',
    'Sept',
    'Oct',
    'Nov',
    'Dec',
  }
)
NUMBER_ABBREVIATIONS = frozenset(
  {'No', 'Nos', 'Fig', 'Figs', 'Vol', 'Vols', 'Eq', 'Ch', 'pp', 'Art', 'Sec', 'Ex'}
)

_CLOSERS = '"\')]}\u201d\u2019\u00bb'
_OPENERS = '"\'([{\u201c\u2018\u00ab'
_BLANK_LINE = re.compile(r'\n[ \t\r\f\v]*\n\s*')
# A terminator run, optional closing quotes/brackets, then the whitespace after them.
_CANDIDATE = re.compile(f'[.!?]+[{re.escape(_CLOSERS)}]*(\\s+)')
_DOTTED_LETTERS = re.compile(r'(?:[A-Za-z]\.)+[A-Za-z]')


def _is_abbreviation(word: str, next_char: str) -> bool:
  """Whether `word` (the text before a lone '.') is an abbreviation or initial, not an ending."""
  word = word.lstrip(_OPENERS)
  if word in ABBREVIATIONS or (word in NUMBER_ABBREVIATIONS and next_char.isdigit()):
    return True
  return (len(word) == 1 and word.isalpha()) or bool(_DOTTED_LETTERS.fullmatch(word))


def _ends_sentence(paragraph: str, match: re.Match) -> bool:
  """Whether the candidate `match` (terminators, closers, whitespace) is a sentence boundary."""
  if match.end() == len(paragraph):
    return False
  next_char = paragraph[match.end()]
  if not (next_char.isupper() or next_char.isdigit() or next_char in _OPENERS):
    return False
  if match.group(0).rstrip().rstrip(_CLOSERS) != '.':
    return True
  word_start = match.start()
  while word_start > 0 and not paragraph[word_start - 1].isspace():
    word_start -= 1
  return not _is_abbreviation(paragraph[word_start : match.start()], next_char)


def split_sentences(text: str) -> list[str]:
  """Splits English text into sentences by the rules in this module's docstring.

  Args:
    text: any text; a single newline is ordinary whitespace (it is kept inside a sentence).

  Returns:
    The non-empty sentences, stripped, in order ("A. Smith met Dr. Lee at 7.30. They left."
    gives ["A. Smith met Dr. Lee at 7.30.", "They left."]).
  """
  sentences = []
  for paragraph in _BLANK_LINE.split(text):
    start = 0
    for match in _CANDIDATE.finditer(paragraph):
      if _ends_sentence(paragraph, match):
        sentences.append(paragraph[start : match.start(1)].strip())
        start = match.end()
    sentences.append(paragraph[start:].strip())
  return [s for s in sentences if s]
