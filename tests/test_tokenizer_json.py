"""Attend's own vocabularies as a tokenizer.json (data/tokenizer_json.py): the `tokenizers`
package, reading it, gives the ids of `tokenizer.encode(preprocess(text))` on varied texts and
decodes them to Attend's text."""

import pytest
import tiny_gguf

from data.text import TextOptions
from data.tokenizer_json import tokenizer_json
from data.tokenizers import SPECIAL_TOKENS, UNK_ID, build_tokenizer

tokenizers = pytest.importorskip('tokenizers', reason='reads tokenizer.json (test extra)')

# Beside tests/tiny_gguf.py's texts: what the punctuation rule keeps attached (joiners between
# letters, separators between digits, superscript digits among them) and what it spaces out,
# and the whitespace Python splits on that Unicode's White_Space lacks (U+001C-U+001F).
TEXTS = tiny_gguf.TEXTS + [
  "He's twenty-one, isn't he? 3.5 1,000 (x) -y- 'a' rock'n'roll a\u2019b a\u2010b a--b",
  '\u00b9,\u00b2 1.\u00b2 x.y 1.2.3 -5 .5 5.',
  'fields\x1cseparated\x1fhere \u3000 ideographic\u2028line',
  'ÎSTANBUL İi ΣΑΣ Straße',
  '',
  ' ',
]
# The vocabulary is built from other text than it is tried on, so that some pieces are unknown.
TRAIN = [
  'The quick brown fox jumps over the lazy dog, and the dog sleeps.',
  "It's a test: 3.5 apples, 1,000 pears - twenty-one (or so) of them!",
  'def f(x):\n    return x ** 2  # the square\n',
  'Café au lait, naïve Straße; über alles? Ja.',
] * 3
CASES = [
  ('char', TextOptions(keep_whitespace=True)),  # configs/gpt_text.py
  ('char', TextOptions(lowercase=True)),
  ('word', TextOptions()),  # configs/gpt_mqar.py
  ('word', TextOptions(lowercase=True, split_punctuation=True)),
  ('sentencepiece', TextOptions()),
  ('sentencepiece', TextOptions(keep_whitespace=True)),  # it collapses spaces itself
]


def _scores(tokenizer, ids: list[int]) -> float:
  return sum(tokenizer.scored_pieces()[i][1] for i in ids)


@pytest.mark.parametrize('kind, preprocess', CASES)
def test_a_vocabulary_as_tokenizer_json_encodes_and_decodes_as_attend(kind, preprocess):
  ours = build_tokenizer(kind, [preprocess(t) for t in TRAIN], vocab_size=80)
  theirs = tokenizers.Tokenizer.from_str(tokenizer_json(ours, preprocess))
  assert [theirs.id_to_token(i) for i in range(4)] == list(SPECIAL_TOKENS)
  unknown = 0
  for text in TEXTS:
    expected, ids = ours.encode(preprocess(text)), theirs.encode(text).ids
    unknown += UNK_ID in expected
    if kind == 'sentencepiece' and ids != expected:
      # A run of one character ('--', ' **') can be cut two ways of one unigram score, which
      # SentencePiece chooses between by its float32 sums; the text and the score are the same.
      assert ours.decode(ids) == ours.decode(expected), text
      assert _scores(ours, ids) == pytest.approx(_scores(ours, expected), abs=1e-4), text
    else:
      assert ids == expected, (text, ids, expected)
    if UNK_ID not in expected:  # Attend writes '<unk>' back; a special is skipped there
      assert theirs.decode(expected, skip_special_tokens=True) == ours.decode(expected), text
  assert 0 < unknown < len(TEXTS)  # both paths taken


@pytest.mark.parametrize('kind', ['char', 'sentencepiece'])
def test_punctuation_spaced_out_is_refused_unless_the_vocabulary_is_of_words(kind):
  ours = build_tokenizer(kind, TRAIN, vocab_size=80)
  with pytest.raises(ValueError, match=rf"split_punctuation=True with .*vocab='{kind}'"):
    tokenizer_json(ours, TextOptions(split_punctuation=True))
