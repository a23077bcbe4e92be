"""Translation data (`data.translation.build`) end to end: config schema and errors, a local TSV
corpus, a mocked TFDS dataset."""

import json

import numpy as np
import pytest
import tensorflow_datasets as tfds

from data import translation
from data.tfds_reading import as_text
from data.tokenizers import BOS_ID, EOS_ID, UNK_ID

# 21 well-formed pairs over 20 distinct sources ("Go." twice), then two malformed lines.
TSV = """He is a boy.\tEr ist ein Junge.\tCC-BY 2.0 (France) Attribution: tatoeba.org #1
He is a good boy.\tEr ist ein guter Junge.\tattribution
The boy is here.\tDer Junge ist hier.\tattribution
A boy is running.\tEin Junge rennt.\tattribution
He is tall.\tEr ist groß.\tattribution
She is a girl.\tSie ist ein Mädchen.\tattribution
He is happy.\tEr ist glücklich.\tattribution
The boy is happy.\tDer Junge ist glücklich.\tattribution
It is a dog.\tEs ist ein Hund.\tattribution
Go.\tGeh.\tattribution
Go.\tLauf!\tattribution
Hi.\tHallo!\tattribution
Run!\tLauf!\tattribution
Who is he?\tWer ist er?\tattribution
I am a boy.\tIch bin ein Junge.\tattribution
Is he a boy?\tIst er ein Junge?\tattribution
We are here.\tWir sind hier.\tattribution
I can't go.\tIch kann nicht gehen.\tattribution
Café au lait?\tMilchkaffee?\tattribution
Tom is a boy.\tTom ist ein Junge.\tattribution
He is a cook.\tEr ist Koch.\tattribution
this line has no tab
Empty target.\t\tattribution
"""


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  """The TSV file and a TFDS data dir shared by this module's tasks."""
  root = tmp_path_factory.mktemp('tsv')
  path = root / 'deu.txt'
  path.write_text(TSV, encoding='utf-8')
  return {'tsv_path': str(path), 'data_dir': str(root / 'tfds')}


def _config(**overrides):
  config = translation.default_config()
  config.update(
    {
      'name': 'tsv_parallel',
      'builder_config': '',
      'lowercase': True,
      'strip_accents': True,
      'split_punctuation': True,
      'batch_size': 4,
      **overrides,
    }
  )
  return config


def test_default_config_is_the_number_words_task():
  """Every schema field with its documented default."""
  assert translation.default_config().to_dict() == {
    'name': 'number_words',
    'builder_config': 'en_de',
    'source_key': 'source',
    'target_key': 'target',
    'data_dir': '',
    'tsv_path': '',
    'validation_path': '',
    'test_path': '',
    'lowercase': False,
    'strip_accents': False,
    'split_punctuation': False,
    'split_cjk': False,
    'protect_items': False,
    'source_vocab': 'char',
    'target_vocab': 'char',
    'vocab_size': 8000,
    'shared_vocab': False,
    'max_input_length': 79,
    'max_target_length': 79,
    'truncate': False,
    'bucket_step': 8,
    'batch_size': 64,
    'eval_batch_size': 256,
    'train_split': 'train',
    'eval_split': 'validation',
    'test_split': 'test',
  }


@pytest.mark.parametrize(
  'overrides, message',
  [
    ({'batchsize': 8}, r"unknown field\(s\) \['batchsize'\]"),
    ({'batch_size': '64'}, 'batch_size must be of type int'),
    ({'truncate': 1}, 'truncate must be of type bool'),
    ({'source_vocab': 'bpe'}, r"source_vocab must be one of \['char', 'word', 'sentencepiece'\]"),
    ({'max_input_length': 0}, 'max_input_length must be at least 1'),
    ({'vocab_size': 4}, 'vocab_size must exceed'),
    ({'shared_vocab': True, 'target_vocab': 'word'}, 'needs source_vocab == target_vocab'),
    ({'name': 'tsv_parallel'}, 'tsv_path must name a file'),
    ({'train_split': ''}, 'train_split must not be empty'),
  ],
)
def test_bad_config_fields(tmp_path, overrides, message):
  """Each bad field is a ValueError naming it, raised before any data is touched."""
  config = translation.default_config().to_dict()
  config.update(overrides)
  with pytest.raises(ValueError, match=message):
    translation.build(config, str(tmp_path))


def test_unknown_dataset_and_builder_config_list_valid_ones(tmp_path):
  """An unknown name lists ours and the TFDS translation sets; a bad config lists the configs."""
  with pytest.raises(
    ValueError,
    match=r"valid: \['dates', 'number_words', 'tsv_parallel'\].*"
    r"'ted_hrlr_translate'.*'wmt14_translate'",
  ):
    translation.build({'name': 'numbr_words'}, str(tmp_path))
  with pytest.raises(ValueError, match=r"builder_config='en_xx'.*'digits_en', 'en_de'"):
    translation.build({'builder_config': 'en_xx'}, str(tmp_path))


def test_missing_tsv_path_names_it(tmp_path):
  """A TSV path with no file is a FileNotFoundError naming the path."""
  missing = str(tmp_path / 'nowhere' / 'deu.txt')
  with pytest.raises(FileNotFoundError, match='nowhere/deu.txt'):
    translation.build(_config(tsv_path=missing), str(tmp_path / 'vocab'))


def test_tsv_task_english_example(corpus, tmp_path):
  """'He is a boy.' with English preprocessing and a word vocab: <bos> he is a boy . <eos>."""
  task = translation.build(
    _config(source_vocab='word', target_vocab='word', **corpus), str(tmp_path)
  )
  tok = task.source_tokenizer
  ids = [BOS_ID] + tok.encode(task.preprocess('He is a boy.')) + [EOS_ID]
  assert tok.tokens(ids) == ['<bos>', 'he', 'is', 'a', 'boy', '.', '<eos>']
  assert tok.decode(ids) == 'he is a boy .'
  assert tok.encode('he is a zebra') == tok.encode('he is a')[:3] + [UNK_ID]


def test_tsv_task_splits_are_disjoint_and_complete(corpus, tmp_path):
  """All 21 good pairs, preprocessed, in disjoint splits; a rebuild reads the same order."""
  task = translation.build(_config(**corpus), str(tmp_path))
  splits = {s: task.examples(s) for s in ('train', 'validation', 'test')}
  assert sum(len(v) for v in splits.values()) == 21
  assert all(splits.values())
  everything = [pair for v in splits.values() for pair in v]
  assert ('cafe au lait ?', 'milchkaffee ?') in everything
  assert ("i can't go .", 'ich kann nicht gehen .') in everything
  sources = {s: {src for src, _ in v} for s, v in splits.items()}
  assert not sources['train'] & sources['validation']
  assert not sources['train'] & sources['test']
  again = translation.build(_config(**corpus), str(tmp_path))
  assert again.examples('train') == splits['train']


def test_tsv_batches_decode_back_to_examples(corpus, tmp_path):
  """Every row of one eval pass decodes (char vocab) to the example its 'index' names."""
  task = translation.build(_config(**corpus), str(tmp_path))
  examples = task.examples('train')
  seen = []
  for batch in task.batches('train', batch_size=4, shuffle=False, seed=0, num_epochs=1):
    assert batch['inputs'].shape[0] == 4 and batch['inputs'].shape[1] % 8 == 0
    for row, index in enumerate(batch['index']):
      if index < 0:
        assert not batch['inputs'][row].any() and not batch['targets'][row].any()
        continue
      seen.append(int(index))
      assert task.source_tokenizer.decode(batch['inputs'][row]) == examples[index][0]
      assert task.target_tokenizer.decode(batch['targets'][row]) == examples[index][1]
  assert sorted(seen) == list(range(len(examples)))


def test_saved_vocab_is_reused_and_checked(corpus, tmp_path):
  """A second build loads the saved vocabulary; a different vocab kind is a clear error."""
  first = translation.build(_config(**corpus), str(tmp_path))
  vocab = json.loads((tmp_path / 'vocab.json').read_text())
  assert vocab['source']['vocab'] == first.source_tokenizer.vocab
  assert vocab['shared'] is False
  other = translation.build(_config(lowercase=False, **corpus), str(tmp_path))
  assert other.source_tokenizer.vocab == first.source_tokenizer.vocab  # no 'H' in it: loaded
  assert 'H' not in other.source_tokenizer.vocab
  with pytest.raises(ValueError, match="target_vocab='word' but the tokenizers saved"):
    translation.build(_config(target_vocab='word', **corpus), str(tmp_path))


def test_shared_vocab_is_one_tokenizer(corpus, tmp_path):
  """shared_vocab=True: one tokenizer with both sides' characters ('y' only English, 'j' German)."""
  task = translation.build(_config(shared_vocab=True, **corpus), str(tmp_path))
  assert task.source_tokenizer is task.target_tokenizer
  assert {'y', 'j'} <= set(task.source_tokenizer.vocab)
  separate = translation.build(_config(**corpus), str(tmp_path / 'separate'))
  assert 'y' not in separate.target_tokenizer.vocab and 'j' not in separate.source_tokenizer.vocab


def test_bad_keys_splits_and_limits(corpus, tmp_path):
  """A missing feature, an unknown split and limits that remove everything are clear errors."""
  with pytest.raises(ValueError, match=r"source_key='english'.*valid: \['source', 'target'\]"):
    translation.build(_config(source_key='english', **corpus), str(tmp_path / 'a'))
  task = translation.build(_config(max_target_length=2, **corpus), str(tmp_path / 'b'))
  with pytest.raises(ValueError, match=r"'dev' is not a split.*\['test', 'train', 'validation'\]"):
    task.examples('dev')
  with pytest.raises(ValueError, match='max_target_length=2'):
    task.batches('train', batch_size=4, shuffle=True, seed=0)
  with pytest.raises(ValueError, match='multiple of process_count=3'):
    task.batches('validation', batch_size=4, shuffle=True, seed=0, process_index=0, process_count=3)


def test_text_accepts_bytes_and_str():
  """Real data sources give bytes, mock_data gives str: both become str."""
  assert as_text('caf\u00e9'.encode()) == 'café'
  assert as_text('café') == 'café'


def test_registered_tfds_translation_dataset_under_mock_data(tmp_path):
  """ted_hrlr_translate/pt_to_en through the same interface, with TFDS's mock examples."""
  config = translation.default_config()
  config.update(
    {
      'name': 'ted_hrlr_translate',
      'builder_config': 'pt_to_en',
      'source_key': 'pt',
      'target_key': 'en',
      'source_vocab': 'word',
      'target_vocab': 'word',
    }
  )
  with tfds.testing.mock_data(num_examples=6):
    task = translation.build(config, str(tmp_path))
    examples = task.examples('train')
    batches = list(task.batches('train', batch_size=4, shuffle=False, seed=0, num_epochs=1))
  assert task.name == 'ted_hrlr_translate/pt_to_en'
  assert len(examples) == 6 and all(isinstance(s, str) and s for pair in examples for s in pair)
  assert [b['inputs'].shape[0] for b in batches] == [4, 4]
  rows = [(int(i), b, r) for b in batches for r, i in enumerate(b['index']) if i >= 0]
  assert sorted(i for i, _, _ in rows) == list(range(6))
  for i, batch, r in rows:
    assert task.source_tokenizer.decode(batch['inputs'][r]) == examples[i][0]
    np.testing.assert_array_equal(batch['targets'][r][batch['targets'][r] > 0][-1:], [EOS_ID])


def test_raw_examples_keep_the_text_the_model_sees_preprocessed(corpus, tmp_path):
  """`examples` is what the tokenizers see (lower-cased, accents stripped, punctuation split);
  `raw_examples`, in the same order, is the corpus's own text, which outputs are scored against."""
  task = translation.build(_config(**corpus), str(tmp_path))
  raw = task.raw_examples('train') + task.raw_examples('validation') + task.raw_examples('test')
  seen = task.examples('train') + task.examples('validation') + task.examples('test')
  assert ('Café au lait?', 'Milchkaffee?') in raw
  assert ('cafe au lait ?', 'milchkaffee ?') in seen
  assert [task.preprocess(s) for s, _ in raw] == [s for s, _ in seen]


def test_validation_and_test_files_are_used_as_they_are(corpus, tmp_path):
  """With a test file of its own, test is that file, validation is cut from tsv_path, and train
  is the rest of tsv_path; the builder config's name changes with the test file's contents."""
  test_file = tmp_path / 'test.tsv'
  test_file.write_text('Hello there.\tHallo da.\nGood night.\tGute Nacht.\n', encoding='utf-8')
  config = _config(**corpus, test_path=str(test_file), lowercase=False, split_punctuation=False)
  task = translation.build(config, str(tmp_path / 'vocab'))
  assert task.raw_examples('test') == [
    ('Hello there.', 'Hallo da.'),
    ('Good night.', 'Gute Nacht.'),
  ]
  assert len(task.raw_examples('validation')) == 1
  assert len(task.raw_examples('train')) == 21 - 1
  with pytest.raises(ValueError, match="test_path is read with name='tsv_parallel' only"):
    translation.validate_config(_config(name='dates', test_path=str(test_file)))
  with pytest.raises(FileNotFoundError, match='config.dataset.test_path'):
    translation.build(_config(**corpus, test_path=str(tmp_path / 'no.tsv')), str(tmp_path / 'v'))
