"""Text preprocessing and tokenizers against hand-written strings and ids."""

import json

import numpy as np
import pytest

from data import tokenizers
from data.text import TextOptions, space_cjk, space_punctuation, strip_latin_accents
from data.tokenizers import (
  BOS_ID,
  EOS_ID,
  PAD_ID,
  UNK_ID,
  CharTokenizer,
  SentencePieceTokenizer,
  WordTokenizer,
  load_tokenizers,
  save_tokenizers,
)


def test_special_ids():
  """The documented special ids."""
  assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
  assert tokenizers.SPECIAL_TOKENS == ('<pad>', '<bos>', '<eos>', '<unk>')


def test_english_preprocessing():
  """Lower case, accents off, punctuation spaced, whitespace collapsed."""
  english = TextOptions(lowercase=True, strip_accents=True, split_punctuation=True)
  assert english('He is a boy.') == 'he is a boy .'
  assert english('  Café   au lait? ') == 'cafe au lait ?'
  assert TextOptions()('a \t b\u00a0 c ') == 'a b c'


def test_strip_accents_only_on_latin():
  """Latin accents go; Cyrillic й and Japanese が (marks that change the letter) stay."""
  assert strip_latin_accents('Café crème, Ärger, São') == 'Cafe creme, Arger, Sao'
  assert strip_latin_accents('йога') == 'йога'
  assert strip_latin_accents('がっこう') == 'がっこう'
  assert strip_latin_accents('Straße') == 'Straße'


def test_space_punctuation_keeps_word_internal_marks():
  """Apostrophes and hyphens inside words and separators inside numbers stay attached."""
  assert ' '.join(space_punctuation("He's twenty-one, isn't he?").split()) == (
    "He's twenty-one , isn't he ?"
  )
  spaced = space_punctuation('¿Qué? 3.5 kg, 1,000.')
  assert ' '.join(spaced.split()) == '¿ Qué ? 3.5 kg , 1,000 .'
  assert ' '.join(space_punctuation("'quoted' -x").split()) == "' quoted ' - x"


def test_space_cjk():
  """Each Han/kana character and CJK punctuation mark is spaced out; Latin and Hangul are not."""
  assert ' '.join(space_cjk('我爱你。').split()) == '我 爱 你 。'
  assert ' '.join(space_cjk('日本語abc한국어').split()) == '日 本 語 abc한국어'
  assert TextOptions(split_cjk=True)('トムです') == 'ト ム で す'


def test_char_tokenizer_vocab_and_round_trip():
  """Most frequent first, ties by code point; encode/decode invert each other."""
  tok = CharTokenizer.build(['abca', 'b c'])
  # a:2, b:2, c:2, ' ':1 -> a, b, c (tie, code point order), then ' '.
  assert tok.vocab == ['<pad>', '<bos>', '<eos>', '<unk>', 'a', 'b', 'c', ' ']
  assert tok.vocab_size == 8
  assert tok.encode('cab a') == [6, 4, 5, 7, 4]
  assert tok.decode(tok.encode('cab a')) == 'cab a'
  assert tok.tokens([1, 6, 7, 2, 0]) == ['<bos>', 'c', '\u2581', '<eos>', '<pad>']


def test_char_tokenizer_unknown_empty_and_decode_rules():
  """Unknown characters -> <unk>; empty text <-> no ids; decode stops at EOS, skips PAD/BOS."""
  tok = CharTokenizer.build(['ab'])
  assert tok.encode('axb') == [4, UNK_ID, 5]
  assert tok.decode([4, UNK_ID, 5]) == 'a<unk>b'
  assert tok.encode('') == []
  assert tok.decode([]) == ''
  assert tok.decode(np.array([BOS_ID, 5, PAD_ID, 4, EOS_ID, 4, 4])) == 'ba'
  assert tok.decode([EOS_ID, 4]) == ''


def test_word_tokenizer_cap_and_unknown():
  """vocab_size caps the vocabulary (specials included); dropped words read as <unk>."""
  tok = WordTokenizer.build(['the cat sat', 'the dog'], max_size=6)
  assert tok.vocab == ['<pad>', '<bos>', '<eos>', '<unk>', 'the', 'cat']
  assert tok.encode('the dog  cat') == [4, UNK_ID, 5]
  assert tok.decode([4, 5, EOS_ID, 4]) == 'the cat'
  assert tok.tokens([BOS_ID, 4, UNK_ID, EOS_ID]) == ['<bos>', 'the', '<unk>', '<eos>']


def test_vocab_must_start_with_specials():
  """A saved vocabulary without the specials in front is rejected."""
  with pytest.raises(ValueError, match='must start with'):
    WordTokenizer(['a', '<pad>', '<bos>', '<eos>', '<unk>'])
  with pytest.raises(ValueError, match='repeated'):
    WordTokenizer(['<pad>', '<bos>', '<eos>', '<unk>', 'a', 'a'])


_CORPUS = ['he is a boy .', 'she is a girl .', 'they are friends .', 'he is here .'] * 10


def test_sentencepiece_round_trip_and_specials():
  """Specials sit at 0..3; known text round-trips exactly; an unseen character maps to <unk>."""
  tok = SentencePieceTokenizer.build(_CORPUS, vocab_size=40)
  assert tok.tokens([0, 1, 2, 3]) == ['<pad>', '<bos>', '<eos>', '<unk>']
  for text in ('he is a boy .', 'she is here .', 'a girl .'):
    ids = tok.encode(text)
    assert all(i > UNK_ID for i in ids)
    assert tok.decode(ids + [EOS_ID, 7]) == text
  ids = tok.encode('he is x')
  assert UNK_ID in ids
  assert tok.encode('') == [] and tok.decode([]) == ''


def test_sentencepiece_vocab_too_small_names_the_field():
  """A vocabulary smaller than the alphabet is a ValueError about config.dataset.vocab_size."""
  with pytest.raises(ValueError, match='vocab_size=8'):
    SentencePieceTokenizer.build(_CORPUS, vocab_size=8)


def test_save_and_load_plain_files(tmp_path):
  """Char and word vocabularies go into vocab.json as token lists and load back identically."""
  source = CharTokenizer.build(['abc'])
  target = WordTokenizer.build(['x y y'])
  save_tokenizers(str(tmp_path), source, target, dataset='demo')
  assert sorted(p.name for p in tmp_path.iterdir()) == ['vocab.json']
  manifest = json.loads((tmp_path / 'vocab.json').read_text())
  assert manifest['target'] == {
    'kind': 'word',
    'vocab': ['<pad>', '<bos>', '<eos>', '<unk>', 'y', 'x'],
  }
  loaded_source, loaded_target = load_tokenizers(str(tmp_path))
  assert isinstance(loaded_source, CharTokenizer) and loaded_source.vocab == source.vocab
  assert isinstance(loaded_target, WordTokenizer) and loaded_target.vocab == target.vocab


def test_save_and_load_shared_sentencepiece(tmp_path):
  """A shared SentencePiece model is stored once and loads as one object encoding the same ids."""
  tok = SentencePieceTokenizer.build(_CORPUS, vocab_size=40)
  save_tokenizers(str(tmp_path), tok, tok)
  assert sorted(p.name for p in tmp_path.iterdir()) == ['shared.spm.model', 'vocab.json']
  source, target = load_tokenizers(str(tmp_path))
  assert source is target
  assert source.encode('she is a boy .') == tok.encode('she is a boy .')


def test_load_from_empty_directory_is_none(tmp_path):
  """No manifest, no tokenizers."""
  assert load_tokenizers(str(tmp_path)) is None
