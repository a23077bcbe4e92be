"""Classification data: the sentence splitter, key_sentence_docs, tsv_classification, batches."""

import json
import logging

import numpy as np
import pytest
import tensorflow_datasets as tfds

from data import classification, language
from data.builders import key_sentence
from data.readers import tsv_classification
from data.sentences import split_sentences


@pytest.mark.parametrize(
  'text, sentences',
  [
    ('Mr. Smith met Dr. Lee. They left.', ['Mr. Smith met Dr. Lee.', 'They left.']),
    (
      "Prof. Adams vs. St. Anne's etc. Then it ended.",
      ["Prof. Adams vs. St. Anne's etc. Then it ended."],
    ),
    (
      'Acme Inc. Sold it. See Fig. 3 now. I said no. Then what?',
      ['Acme Inc. Sold it.', 'See Fig. 3 now.', 'I said no.', 'Then what?'],
    ),
    (
      'It cost 3.5 dollars. 4 more came at 7.30 today.',
      ['It cost 3.5 dollars.', '4 more came at 7.30 today.'],
    ),
    (
      'He said "Stop." Then he left. "Why?" she asked.',
      ['He said "Stop."', 'Then he left.', '"Why?" she asked.'],
    ),
    ('(It rained.) The end! Really?! Yes...', ['(It rained.)', 'The end!', 'Really?!', 'Yes...']),
    (
      'J. R. Smith and the U.S. Army met, e.g. Bob. A new one.',
      ['J. R. Smith and the U.S. Army met, e.g. Bob.', 'A new one.'],
    ),
    ('It ended. then it went on.', ['It ended. then it went on.']),
    (
      'A title\n\nFirst line\nof it. Second.\n \n\nThird',
      ['A title', 'First line\nof it.', 'Second.', 'Third'],
    ),
    ('', []),
    ('  \n\n ', []),
  ],
)
def test_split_sentences(text, sentences):
  """Abbreviations, initials, acronyms, decimals, quotes and blank lines follow the rules."""
  assert split_sentences(text) == sentences


@pytest.fixture(scope='module')
def docs_dir(tfds_dir):
  """A data dir with key_sentence_docs prepared."""
  data_dir = tfds_dir
  key_sentence.KeySentenceDocs(
    data_dir=str(data_dir), file_format='array_record'
  ).download_and_prepare()
  return str(data_dir)


def _records(data_dir: str) -> dict[str, list[tuple[str, int, list[int]]]]:
  builder = key_sentence.KeySentenceDocs(data_dir=data_dir, file_format='array_record')
  builder.download_and_prepare()
  out = {}
  for split in ('train', 'validation', 'test'):
    source = builder.as_data_source(split=split)
    out[split] = [
      (r['text'].decode(), int(r['label']), [int(k) for k in r['key_sentences']])
      for r in source.__getitems__(list(range(len(source))))
    ]
  return out


def test_generated_docs_are_deterministic_and_disjoint(docs_dir, tmp_path):
  """Two builds in different dirs hold the same records; the splits share no text."""
  first, second = _records(docs_dir), _records(str(tmp_path))
  assert first == second
  assert {s: len(v) for s, v in first.items()} == {
    'train': 10_000,
    'validation': 1_000,
    'test': 1_000,
  }
  texts = {s: {text for text, _, _ in v} for s, v in first.items()}
  assert sum(len(t) for t in texts.values()) == 12_000
  generated = key_sentence.generate_splits(key_sentence.KeySentenceDocsConfig(name='x'))
  assert sorted(texts['test']) == sorted(e['text'] for e in generated['test'])


def test_generated_sentences_split_back_and_keys_name_the_topic():
  """split_sentences recovers every document's sentences; keys (only) hold the label's keywords."""
  splits = key_sentence.generate_splits(key_sentence.KeySentenceDocsConfig(name='x'))
  tied = correct = total = 0
  for examples in splits.values():
    for e in examples:
      assert split_sentences(e['text']) == e['sentences'], e['text']
      assert 4 <= len(e['sentences']) <= 8
      words = [set(s.rstrip('.').split()) for s in e['sentences']]
      own = set(key_sentence.TOPICS[key_sentence.LABELS[e['label']]])
      assert [i for i, w in enumerate(words) if w & own] == e['key_sentences']
      assert len(e['key_sentences']) in (1, 2)
      counts = [sum(len(w & set(kws)) for w in words) for kws in key_sentence.TOPICS.values()]
      tied += sorted(counts)[-2] == counts[e['label']]
      correct += int(np.argmax(counts)) == e['label']
      total += 1
  # Half the documents name another topic as often as their own: keyword counts reach ~75%.
  assert 0.45 < tied / total < 0.55
  assert 0.7 < correct / total < 0.8


def _config(**overrides):
  config = classification.default_config()
  config.update({'batch_size': 8, **overrides})
  return config


def test_document_batches_shapes_trimming_and_padding(docs_dir, tmp_path):
  """[b, S, W] trimmed to multiples of bucket_step; a partial last batch pads with index -1."""
  labeled = classification.build(_config(data_dir=docs_dir), str(tmp_path))
  assert labeled.label_names == ['sports', 'science', 'music', 'food']
  examples = labeled.examples('validation')
  example = examples[0]
  assert len(example.sentences) == len(split_sentences(example.text))
  for k in example.key_sentences:
    assert set(example.sentences[k].split()) & set(
      key_sentence.TOPICS[labeled.label_names[example.label]]
    )
  seen = []
  for batch in labeled.batches('validation', batch_size=48, shuffle=False, seed=0, num_epochs=1):
    b, s, w = batch['inputs'].shape
    assert b == 48 and s % 4 == 0 and w % 4 == 0 and s <= 16 and w <= 32
    real = batch['index'] >= 0
    assert not batch['inputs'][~real].any() and not batch['labels'][~real].any()
    # Trimmed to the longest real extent: the last kept sentence/word column is used.
    assert batch['inputs'][:, s - 4 :].any() and batch['inputs'][:, :, w - 4 :].any()
    for row in np.flatnonzero(real):
      example = examples[batch['index'][row]]
      seen.append(int(batch['index'][row]))
      assert batch['labels'][row] == example.label
      decoded = [labeled.tokenizer.decode(ids) for ids in batch['inputs'][row]]
      assert decoded[: len(example.sentences)] == list(example.sentences)
  assert sorted(seen) == list(range(1_000)) and (1_000 % 48) != 0


def test_sentence_layout_truncation_and_empty_text(docs_dir, tmp_path, caplog):
  """[b, T] rows; texts over max_length are cut and counted in one line; '' is all padding."""
  labeled = classification.build(
    _config(data_dir=docs_dir, layout='sentence', max_length=20), str(tmp_path)
  )
  with caplog.at_level(logging.WARNING):
    encoded = labeled.encoded('test')
  lines = [r.getMessage() for r in caplog.records if 'truncated' in r.getMessage()]
  assert len(lines) == 1 and 'over max_length=20' in lines[0]
  assert encoded.shape == (1_000, 20) and encoded[:, -1].all()
  batch = next(labeled.batches('test', batch_size=8, shuffle=True, seed=0))
  assert batch['inputs'].shape == (8, 20) and batch['labels'].shape == (8,)
  assert not labeled.encode('').any()
  document = classification.build(
    _config(data_dir=docs_dir, max_sentences=2, max_words=3), str(tmp_path)
  )
  assert document.tokenizer.vocab == labeled.tokenizer.vocab  # Loaded, not rebuilt.
  assert not document.encode('').any() and document.encode('').shape == (2, 3)
  with caplog.at_level(logging.WARNING):
    document.encoded('validation')
  assert any('sentence(s) over max_sentences=2' in r.getMessage() for r in caplog.records)


def test_resume_and_host_slices(docs_dir, tmp_path):
  """set_state(get_state()) replays the next batch; two hosts split each global batch."""
  labeled = classification.build(_config(data_dir=docs_dir), str(tmp_path))
  it = labeled.batches('train', batch_size=8, shuffle=True, seed=3)
  for _ in range(5):
    next(it)
  state = it.get_state()
  expected = next(it)
  again = labeled.batches('train', batch_size=8, shuffle=True, seed=3)
  again.set_state(state)
  for key, value in next(again).items():
    np.testing.assert_array_equal(value, expected[key])
  whole = next(labeled.batches('validation', batch_size=8, shuffle=False, seed=0))
  halves = [
    next(
      labeled.batches(
        'validation', batch_size=8, shuffle=False, seed=0, process_index=i, process_count=2
      )
    )
    for i in range(2)
  ]
  for key in whole:
    np.testing.assert_array_equal(np.concatenate([h[key] for h in halves]), whole[key])


def test_empty_rows_trim_to_one_bucket():
  """All-padding examples do not crash and give the smallest bucket."""
  inputs = np.zeros((3, 8, 8), np.int32)
  inputs[1, :5, :2] = 7
  it = classification.ClassificationBatches(
    inputs,
    np.arange(3, dtype=np.int32),
    batch_size=2,
    shuffle=False,
    seed=0,
    num_epochs=1,
    process_index=0,
    process_count=1,
    bucket_step=4,
  )
  shapes = [b['inputs'].shape for b in it]
  assert shapes == [(2, 4, 4), (2, 8, 4)]


TSV = 'good film\tpos\nawful plot\tneg\nno tab here\n\tneg\nempty label\t\n' + ''.join(
  f'text number {i}\t{"pos" if i % 2 else "neg"}\textra\n' for i in range(40)
)


def test_tsv_classes_and_malformed_lines(tmp_path, caplog):
  """Classes are the file's sorted labels; 3 malformed lines are skipped and counted once."""
  path = tmp_path / 'reviews.tsv'
  path.write_text(TSV)
  with caplog.at_level(logging.WARNING):
    labeled = classification.build(
      _config(name='tsv_classification', tsv_path=str(path), data_dir=str(tmp_path / 'd')),
      str(tmp_path / 'v'),
    )
  warnings = [r.getMessage() for r in caplog.records if 'skipped' in r.getMessage()]
  assert len(warnings) == 1 and 'skipped 3 malformed' in warnings[0]
  assert labeled.label_names == ['neg', 'pos']
  sizes = {s: len(labeled.examples(s)) for s in ('train', 'validation', 'test')}
  assert sizes == {'train': 38, 'validation': 2, 'test': 2}
  texts = {e.text: e.label for s in sizes for e in labeled.examples(s)}
  assert texts['good film'] == 1 and texts['text number 4'] == 0


def _tsv_error(tmp_path, text: str, **overrides) -> str:
  path = tmp_path / 'data.tsv'
  path.write_text(text)
  with pytest.raises(ValueError) as error:
    classification.build(
      _config(
        name='tsv_classification', tsv_path=str(path), data_dir=str(tmp_path / 'd'), **overrides
      ),
      str(tmp_path / 'v'),
    )
  return str(error.value)


def test_tsv_errors(tmp_path):
  """Empty file, no label column, a class missing from train, unknown label_key: clear errors."""
  assert "has no 'text<TAB>label' line" in _tsv_error(tmp_path, '')
  assert "has no 'text<TAB>label' line" in _tsv_error(tmp_path, 'just text\nmore text\n')
  rows = [(i, f'text {i}', 'common') for i in range(40)]
  holdout = next(
    i
    for i in range(40)
    if (i, f'text {i}', 'common') not in tsv_classification.split_rows(rows)['train']
  )
  lines = [f'text {i}\t{"rare" if i == holdout else "common"}' for i in range(40)]
  assert "['rare'] have no example in the train split" in _tsv_error(tmp_path, '\n'.join(lines))
  message = _tsv_error(tmp_path, TSV, label_key='sentiment')
  assert "label_key='sentiment' is not a feature" in message and "['label', 'text']" in message
  assert "key_sentences_key='keys'" in _tsv_error(tmp_path, TSV, key_sentences_key='keys')


@pytest.mark.parametrize(
  'overrides, message',
  [
    ({'layout': 'words'}, r"layout='words' is not a layout; valid: \['document', 'sentence'\]"),
    ({'max_words': 0}, 'max_words must be at least 1'),
    ({'lowercase': 1}, 'lowercase must be of type bool'),
    ({'batchsize': 8}, r"unknown field\(s\) \['batchsize'\]"),
    ({'name': 'tsv_classification'}, 'tsv_path must name a file'),
    ({'name': 'no_such_dataset'}, "name='no_such_dataset' is not a known dataset"),
  ],
)
def test_bad_config(tmp_path, overrides, message):
  """Each bad field is one ValueError naming it."""
  with pytest.raises(ValueError, match=message):
    classification.build({**classification.default_config().to_dict(), **overrides}, str(tmp_path))


def test_imdb_reviews_under_mock_data(tmp_path):
  """A registered TFDS dataset read by name: examples, labels and batches from mock data."""
  config = _config(name='imdb_reviews', layout='sentence')
  with tfds.testing.mock_data(num_examples=6):
    labeled = classification.build(config, str(tmp_path))
    examples = labeled.examples('train')
    batches = list(labeled.batches('train', batch_size=4, shuffle=False, seed=0, num_epochs=1))
  assert labeled.label_names == ['neg', 'pos']
  assert len(examples) == 6 and all(e.key_sentences == () for e in examples)
  assert [b['inputs'].shape[0] for b in batches] == [4, 4]
  rows = sorted(int(i) for b in batches for i in b['index'] if i >= 0)
  assert rows == list(range(6))
  for b in batches:
    for row, i in enumerate(b['index']):
      if i >= 0:
        assert b['labels'][row] == examples[i].label
        assert labeled.tokenizer.decode(b['inputs'][row]) == examples[i].sentences[0]


def test_large_config_shares_validation_and_test_with_default():
  """'large' only adds training documents: its held-out splits are the default's, so results on
  both configs compare on the same documents."""
  configs = key_sentence.KeySentenceDocs.BUILDER_CONFIGS
  default, large = (key_sentence.generate_splits(c) for c in configs)
  for split in ('validation', 'test'):
    assert [d['text'] for d in default[split]] == [d['text'] for d in large[split]]
  assert len(large['train']) == 5 * len(default['train'])
  held_out = {d['text'] for split in ('validation', 'test') for d in large[split]}
  assert held_out.isdisjoint(d['text'] for d in large['train'])


def test_adopts_a_pretraining_vocabulary_without_labels(docs_dir, tmp_path):
  """A word vocabulary saved by data.language (no labels) is used and re-saved with the labels;
  a character vocabulary or one saved for other labels is still refused."""
  pretrained = language.build(
    {
      'name': 'key_sentence_docs',
      'data_dir': docs_dir,
      'lowercase': True,
      'split_punctuation': True,
      'vocab_size': 20000,
    },
    str(tmp_path / 'w'),
    mask_token=True,
  )
  manifest = tmp_path / 'w' / 'vocab.json'
  assert 'labels' not in json.loads(manifest.read_text())
  labeled = classification.build(_config(data_dir=docs_dir), str(tmp_path / 'w'))
  assert labeled.tokenizer.vocab == pretrained.tokenizer.vocab
  assert labeled.tokenizer.vocab[-1] == '<mask>'
  assert json.loads(manifest.read_text())['labels'] == ['sports', 'science', 'music', 'food']
  assert (
    classification.build(_config(data_dir=docs_dir), str(tmp_path / 'w')).tokenizer.vocab
    == pretrained.tokenizer.vocab
  )
  language.build(
    {'name': 'key_sentence_docs', 'data_dir': docs_dir, 'vocab': 'char'}, str(tmp_path / 'c')
  )
  with pytest.raises(ValueError, match=r"not a word vocabulary .*\(it has 'char', None\)"):
    classification.build(_config(data_dir=docs_dir), str(tmp_path / 'c'))
  manifest.write_text(manifest.read_text().replace('"food"', '"cooking"'))
  with pytest.raises(ValueError, match='not a word vocabulary for labels'):
    classification.build(_config(data_dir=docs_dir), str(tmp_path / 'w'))
