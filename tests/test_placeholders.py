"""Protected items (`data.placeholders`, `config.dataset.protect_items`): numbered tags in, the
source's items out, on hand-made software messages and through a TSV corpus's tokenizers."""

import pytest

from data import translation
from data.placeholders import TAGS, protect, restore, source_items
from data.tokenizers import build_tokenizer

# English -> French messages in the shared corpus's style: items copied, moved, repeated, and one
# metavariable translated (FILE -> FICHIER).
PAIRS = [
  ('cannot open %s: %s', 'impossible d’ouvrir %s : %s'),
  ('--exclude-libs=LIBS exclude LIBS', '--exclude-libs=LIBS exclure LIBS'),
  ('%1$s of %2$s', '%2$s : %1$s'),
  ('unknown option --output', 'option --output inconnue'),
  ('read FILE', 'lire FICHIER'),
  ('set core.editor and max_wal_size', 'définir core.editor et max_wal_size'),
  ('the server does not support STARTTLS', 'le serveur ne prend pas en charge STARTTLS'),
  ('100%% done', '100%% terminé'),
  ('no such file', 'aucun fichier de ce nom'),
]


def test_source_items_are_every_occurrence_in_order():
  assert source_items('--exclude-libs=LIBS exclude LIBS from %s') == [
    '--exclude-libs',
    'LIBS',
    'LIBS',
    '%s',
  ]
  assert source_items(' '.join(['%s'] * 20)) == ['%s'] * len(TAGS)  # one per tag; the rest text


def test_repeated_items_take_their_tags_in_order():
  items = source_items('cannot open %s: %s')
  assert protect('cannot open %s: %s', items) == 'cannot open ⟪0⟫: ⟪1⟫'
  assert protect('%s : %s, %s', items) == '⟪0⟫ : ⟪1⟫, ⟪1⟫'  # more than the source: the last tag
  assert restore('⟪1⟫ ⟪0⟫', items) == '%s %s'


@pytest.mark.parametrize('source, target', PAIRS)
def test_protect_then_restore_gives_the_text_back(source, target):
  items = source_items(source)
  assert restore(protect(source, items), items) == source
  assert restore(protect(target, items), items) == target


def test_tags_move_with_their_items_and_a_translated_item_stays_text():
  items = source_items('%1$s of %2$s')
  assert protect('%2$s : %1$s', items) == '⟪1⟫ : ⟪0⟫'
  items = source_items('read FILE')
  assert (
    protect('read FILE', items) == 'read ⟪0⟫' and protect('lire FICHIER', items) == 'lire FICHIER'
  )
  # An output's tag the source has no item for is dropped; text around tags is kept as written.
  assert restore('⟪1⟫ »⟪0⟫« ⟪7⟫', ['%s', 'NAME']) == 'NAME »%s« '


def test_each_tag_is_one_sentencepiece_piece_and_decodes_exactly():
  texts = [protect(t, source_items(s)) for s, t in PAIRS] * 20
  tokenizer = build_tokenizer('sentencepiece', texts, vocab_size=120, symbols=TAGS)
  for tag in TAGS:  # after the word-start piece '▁' that starts every text
    assert tokenizer.tokens(tokenizer.encode(f'x{tag}'))[-1] == tag, tag
  text = 'impossible d’ouvrir ⟪0⟫ :⟪15⟫'
  assert tokenizer.decode(tokenizer.encode(text)) == text
  with pytest.raises(ValueError, match="Only sentencepiece vocabularies take symbols.*'word'"):
    build_tokenizer('word', texts, vocab_size=120, symbols=TAGS)


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  root = tmp_path_factory.mktemp('messages')
  path = root / 'messages.tsv'
  lines = [f'{s} ({i})\t{t} ({i})' for i in range(30) for s, t in PAIRS]
  path.write_text('\n'.join(lines) + '\n', encoding='utf-8')
  return dict(
    name='tsv_parallel', builder_config='', tsv_path=str(path), data_dir=str(root / 'tfds')
  )


def _config(**fields):
  config = translation.default_config()
  config.update(source_vocab='sentencepiece', target_vocab='sentencepiece', shared_vocab=True)
  config.update(vocab_size=200, **fields)
  return config


def test_a_protected_corpus_trains_on_tags_and_outputs_read_as_its_text(corpus, tmp_path):
  data = translation.build(_config(protect_items=True, **corpus), str(tmp_path / 'vocab'))
  raw, seen = data.raw_examples('train'), data.examples('train')
  assert ('cannot open ⟪0⟫: ⟪1⟫ (3)', 'impossible d’ouvrir ⟪0⟫ : ⟪1⟫ (3)') in seen
  assert not any('%' in s or 'LIBS' in s for s, _ in seen)
  tokenizer = data.target_tokenizer
  assert tokenizer.tokens(tokenizer.encode(f'x{TAGS[0]}'))[-1] == TAGS[0]
  for (source, target), (_, protected) in zip(raw, seen, strict=True):
    # What a model that writes the protected target outputs is the raw target again.
    assert data.output_text(tokenizer.decode(tokenizer.encode(protected)), source) == target
  # Pictures label a tag token with the item it stands for.
  source = next(s for s, _ in raw if s.startswith('%1$s of %2$s'))
  labels = data.token_labels(['▁of', TAGS[1], '⟪0⟫:', TAGS[7]], source)
  assert labels == ['▁of', '⟪1:%2$s⟫', '⟪0:%1$s⟫:', '⟪7⟫']  # a tag with no item stays a tag
  # A vocabulary saved without the tags is refused for a protected run, and the field is named.
  translation.build(_config(**corpus), str(tmp_path / 'plain'))
  with pytest.raises(ValueError, match='protect_items=True but the tokenizers saved in'):
    translation.build(_config(protect_items=True, **corpus), str(tmp_path / 'plain'))


def test_protect_items_needs_sentencepiece_vocabularies(corpus, tmp_path):
  config = _config(protect_items=True, target_vocab='char', shared_vocab=False, **corpus)
  with pytest.raises(ValueError, match=r"protect_items=True needs sentencepiece.*'char'"):
    translation.build(config, str(tmp_path))
