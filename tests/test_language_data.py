"""Language-modelling data: the mqar builder, text files, packing, batches, vocabularies."""

import json
import logging
import random

import numpy as np
import pytest
import tensorflow_datasets as tfds

from data import language
from data.builders import mqar
from data.tokenizers import EOS_ID, PAD_ID


def test_mqar_answers_are_the_values_of_the_queried_keys():
  """Each answer is its query key's value from the pair section; support points at that key."""
  for seed in range(20):
    example = mqar.generate_example(random.Random(seed), 8, 20, 5)
    words = example['text'].split()
    assert len(words) == 32 and all(w[0] == 'kv'[i % 2] for i, w in enumerate(words))
    keys = words[:16:2]
    assert len(set(keys)) == 8 and sorted(words[16::2]) == sorted(keys)
    assert example['answers'] == list(range(17, 32, 2))
    for answer, key in zip(example['answers'], example['support'], strict=True):
      assert key < 16 and key % 2 == 0
      assert words[answer - 1] == words[key] and words[answer] == words[key + 1]
  again = [mqar.generate_example(random.Random(seed), 8, 20, 5) for seed in (3, 3, 4)]
  assert again[0] == again[1] != again[2]


def test_mqar_splits_are_disjoint_and_sized():
  """A tiny key space (48 distinct examples) forces repeats, which are skipped across splits."""
  config = mqar.MqarConfig(
    name='tiny',
    num_pairs=2,
    num_keys=3,
    num_values=2,
    train_size=30,
    validation_size=5,
    test_size=5,
  )
  splits = mqar.generate_splits(config)
  assert splits == mqar.generate_splits(config)
  texts = {split: [e['text'] for e in examples] for split, examples in splits.items()}
  assert {s: len(t) for s, t in texts.items()} == {'train': 30, 'validation': 5, 'test': 5}
  assert len(set().union(*texts.values())) == 40
  with pytest.raises(ValueError, match='asks for 49 examples but has only 48'):
    mqar.generate_splits(
      mqar.MqarConfig(
        name='x',
        num_pairs=2,
        num_keys=3,
        num_values=2,
        train_size=39,
        validation_size=5,
        test_size=5,
      )
    )
  with pytest.raises(ValueError, match='need num_keys >= num_pairs'):
    mqar.generate_splits(mqar.MqarConfig(name='x', num_pairs=4, num_keys=3))


@pytest.fixture(scope='module')
def mqar_dir(tfds_dir):
  """A data dir with mqar/small prepared (about half a second)."""
  data_dir = tfds_dir
  mqar.Mqar(
    config='small', data_dir=str(data_dir), file_format='array_record'
  ).download_and_prepare()
  return str(data_dir)


def _mqar(data_dir, vocab_dir, **overrides):
  return language.build(
    {'builder_config': 'small', 'data_dir': data_dir, 'seq_length': 32, **overrides}, str(vocab_dir)
  )


def test_example_packing_weights_only_the_answers(mqar_dir, tmp_path, caplog):
  """Weights sit at t = answer - 1, support names the key, targets are the values."""
  lm = _mqar(mqar_dir, tmp_path)
  assert lm.name == 'mqar/small' and lm.mask_id is None
  examples, rows = lm.examples('test'), lm.rows('test')
  assert rows['tokens'].shape == (1_000, 33) and rows['weights'].shape == (1_000, 32)
  assert (rows['tokens'][:, 32] == PAD_ID).all() and (rows['tokens'][:, :32] != PAD_ID).all()
  np.testing.assert_array_equal(rows['index'], np.arange(1_000))
  for i in (0, 1, 999):
    tokens, answers = rows['tokens'][i], np.asarray(examples[i].answers)
    np.testing.assert_array_equal(np.flatnonzero(rows['weights'][i]), answers - 1)
    np.testing.assert_array_equal(rows['support'][i][answers - 1], examples[i].support)
    assert (rows['support'][i] >= 0).sum() == 8
    words = examples[i].text.split()
    assert lm.tokenizer.tokens(tokens[answers]) == [words[p] for p in answers]
    np.testing.assert_array_equal(tokens[list(examples[i].support)], tokens[answers - 1])
  with caplog.at_level(logging.WARNING):
    short = _mqar(mqar_dir, tmp_path, seq_length=20).rows('validation')
  lines = [r.getMessage() for r in caplog.records if 'truncated' in r.getMessage()]
  assert len(lines) == 1 and 'truncated 1000 of 1000' in lines[0] and '6000 answers cut' in lines[0]
  np.testing.assert_array_equal(np.flatnonzero(short['weights'][0]), [16, 18])
  # Stream windows cross examples, so answers are not read there: a char vocabulary is fine.
  stream = _mqar(mqar_dir, tmp_path / 'char', vocab='char', packing='stream').rows('test')
  assert stream['weights'].all() and (stream['support'] == -1).all()


def test_batches_resume_slice_and_pad(mqar_dir, tmp_path):
  """set_state replays the next batch; two hosts split a batch; the last batch pads."""
  lm = _mqar(mqar_dir, tmp_path)
  it = lm.batches('train', batch_size=8, shuffle=True, seed=3)
  for _ in range(5):
    next(it)
  state, expected = it.get_state(), next(it)
  again = lm.batches('train', batch_size=8, shuffle=True, seed=3)
  again.set_state(state)
  for key, value in next(again).items():
    np.testing.assert_array_equal(value, expected[key])
  assert not np.array_equal(next(again)['index'], expected['index'])
  whole = next(lm.batches('validation', batch_size=8, shuffle=False, seed=0))
  halves = [
    next(
      lm.batches(
        'validation', batch_size=8, shuffle=False, seed=0, process_index=i, process_count=2
      )
    )
    for i in range(2)
  ]
  for key in whole:
    np.testing.assert_array_equal(np.concatenate([h[key] for h in halves]), whole[key])
  batches = list(lm.batches('validation', batch_size=48, shuffle=False, seed=0, num_epochs=1))
  index = np.concatenate([b['index'] for b in batches])
  np.testing.assert_array_equal(index, [*range(1_000), *[-1] * 8])
  rows, last = lm.rows('validation'), batches[-1]
  np.testing.assert_array_equal(last['inputs'][:40], rows['tokens'][960:, :-1])
  np.testing.assert_array_equal(last['targets'][:40], rows['tokens'][960:, 1:])
  assert {k: v.shape for k, v in last.items()} == {
    'inputs': (48, 32),
    'targets': (48, 32),
    'weights': (48, 32),
    'support': (48, 32),
    'index': (48,),
  }
  assert not last['inputs'][40:].any() and not last['weights'][40:].any()
  assert (last['support'][40:] == -1).all()


def _text_file(tmp_path, text, mask_token=False, **overrides):
  path = tmp_path / 'corpus.txt'
  path.write_text(text, encoding='utf-8')
  config = {
    'name': 'text_file',
    'text_path': str(path),
    'vocab': 'char',
    'packing': 'stream',
    'seq_length': 16,
    'held_out': 0.1,
    **overrides,
  }
  return language.build(config, str(tmp_path / 'vocab'), mask_token=mask_token)


def test_text_file_held_out_tail_and_stream_windows(tmp_path):
  """Validation and test are the floor(10%) characters before the end and at the end; windows
  are full and each starts with the previous one's last token."""
  text = ''.join(f'w{i % 7}{"é" if i % 5 else ""} ' for i in range(300))[:1003]
  lm = _text_file(tmp_path, text)
  assert lm.texts('train') == [text[:803]]
  assert lm.texts('validation') == [text[803:903]] and lm.texts('test') == [text[903:]]
  assert lm.tokenizer.kind == 'char' and 'é' in lm.tokenizer.vocab
  rows = lm.rows('train')
  ids = lm.tokenizer.encode(lm.preprocess(text[:803])) + [EOS_ID]
  assert rows['tokens'].shape == ((len(ids) - 1) // 16, 17)
  np.testing.assert_array_equal(rows['tokens'][:-1, -1], rows['tokens'][1:, 0])
  np.testing.assert_array_equal(
    np.concatenate([rows['tokens'][:, :-1].ravel(), rows['tokens'][-1:, -1]]),
    ids[: rows['tokens'].size - len(rows['tokens']) + 1],
  )
  assert rows['weights'].all() and (rows['support'] == -1).all()


def test_text_file_errors(tmp_path):
  """Missing file, empty file, a window longer than a split, packing 'example': one sentence."""
  with pytest.raises(FileNotFoundError, match="config.dataset.text_path='/no/such.txt'"):
    language.build(
      {'name': 'text_file', 'text_path': '/no/such.txt', 'packing': 'stream'}, str(tmp_path)
    )
  with pytest.raises(ValueError, match='text_path=.* is an empty file'):
    _text_file(tmp_path, ' \n')
  lm = _text_file(tmp_path, 'abcdefghij' * 10)  # Validation: 10 characters + EOS.
  with pytest.raises(
    ValueError,
    match=r'seq_length=16 makes a window longer than the corpus: '
    r"split 'validation' of text_file has 11 tokens",
  ):
    lm.rows('validation')
  with pytest.raises(ValueError, match="packing must be 'stream'"):
    _text_file(tmp_path, 'abc', packing='example')


def test_tiny_shakespeare_under_mock_data(tmp_path):
  """A TFDS text dataset by name: examples joined with EOS into full, overlapping windows."""
  config = {'name': 'tiny_shakespeare', 'vocab': 'char', 'packing': 'stream', 'seq_length': 8}
  with tfds.testing.mock_data(num_examples=3):
    lm = language.build(config, str(tmp_path))
    texts, rows = lm.texts('train'), lm.rows('train')
  assert lm.name == 'tiny_shakespeare' and len(texts) == 3
  ids = [i for t in texts for i in lm.tokenizer.encode(lm.preprocess(t)) + [EOS_ID]]
  count = (len(ids) - 1) // 8
  assert count >= 2 and rows['tokens'].shape == (count, 9)
  np.testing.assert_array_equal(rows['tokens'][:, :-1].ravel(), ids[: 8 * count])
  assert rows['weights'].all() and (rows['support'] == -1).all()


def test_mask_token(tmp_path):
  """'<mask>' is the last id, kept on reload, appended to a saved vocabulary that lacks it."""
  built = _text_file(tmp_path, 'abcdefghij' * 10)
  size = built.tokenizer.vocab_size
  masked = _text_file(tmp_path, 'abcdefghij' * 10, mask_token=True)
  assert masked.mask_id == size and masked.tokenizer.vocab[-1] == '<mask>'
  manifest = json.loads((tmp_path / 'vocab' / 'vocab.json').read_text())
  assert manifest['shared']['vocab'][-1] == '<mask>'
  again = _text_file(tmp_path, 'abcdefghij' * 10, mask_token=True)
  assert again.mask_id == size and again.tokenizer.vocab_size == size + 1
  with pytest.raises(ValueError, match="needs config.dataset.vocab='char' or 'word'"):
    language.build({'vocab': 'sentencepiece'}, str(tmp_path / 'spm'), mask_token=True)


@pytest.mark.parametrize(
  'overrides, message',
  [
    ({'name': 'no_such_dataset'}, "name='no_such_dataset' is not a known dataset"),
    (
      {'builder_config': 'huge'},
      r"builder_config='huge' is not a config of mqar; valid: "
      r"\['default', 'pairs_16', 'pairs_32', 'pairs_4', 'pairs_8', "
      r"'small'\]",
    ),
    ({'packing': 'rows'}, r"packing='rows' is not valid; valid: \['example', 'stream'\]"),
    ({'held_out': 0.5}, r'held_out must be in \(0, 0.5\)'),
    ({'name': 'text_file'}, 'text_path must name a file'),
    ({'text_key': 'body'}, "text_key='body' is not a feature of mqar/small"),
    ({'answers_key': 'labels'}, "answers_key='labels' is not a feature"),
    ({'vocab': 'char'}, "answers_key='answers' holds word positions"),
    ({'vocab': 'char', 'packing': 'stream', 'text_key': 'body'}, "text_key='body' is not a"),
    ({'vocab': 'word', 'support_key': 'where'}, "support_key='where' is not a feature"),
    ({'vocab': 'chars'}, r"vocab='chars' is not valid; valid: \['char', 'word'"),
  ],
)
def test_bad_config(mqar_dir, tmp_path, overrides, message):
  """Each bad field is one ValueError naming it."""
  with pytest.raises(ValueError, match=message):
    _mqar(mqar_dir, tmp_path, **overrides)
