"""Question-answering data: the bAbI-style generator, the original-format reader, batches."""

import logging
import re

import numpy as np
import pytest

from data import question_answering as qa
from data.builders import babi
from data.readers import babi_files
from data.tokenizers import PAD_ID


def _config(name: str) -> babi.BabiConfig:
  return next(c for c in babi.BabiTasks.BUILDER_CONFIGS if c.name == name)


def _solve_task1(story, question):
  """The person's last move: `(place, supporting)`."""
  person = re.fullmatch(r'Where is (\w+)\?', question).group(1)
  i = max(i for i, s in enumerate(story) if s.startswith(f'{person} '))
  return re.fullmatch(rf'{person} [a-z ]+ the (\w+)\.', story[i]).group(1), [i]


def _solve_task2(story, question):
  """The last sentence about the object, and where its person was then (dropped) or is now."""
  obj = re.fullmatch(r'Where is the (\w+)\?', question).group(1)
  last = max(i for i, s in enumerate(story) if s.endswith(f' the {obj}.'))
  person = story[last].split()[0]
  verb = story[last][len(person) + 1 : -len(f' the {obj}.')]
  moves = [
    i
    for i, s in enumerate(story)
    if s.startswith(f'{person} ') and s.split()[-1][:-1] in babi.PLACES
  ]
  move = max(i for i in moves if i < last) if verb in babi.DROPS else max(moves)
  return story[move].split()[-1][:-1], sorted([last, move])


def _solve_task16(story, question):
  """The color of another member of the asked one's species; `(color, support sentences)`."""
  asked = re.fullmatch(r'What color is (\w+)\?', question).group(1)
  species, colors = {}, {}
  for s in story:
    if m := re.fullmatch(r'(\w+) is a (\w+)\.', s):
      species[m.group(1)] = m.group(2)
    else:
      name, color = re.fullmatch(r'(\w+) is (\w+)\.', s).groups()
      colors[name] = color
  answers = {colors[n] for n, a in species.items() if a == species[asked] and n != asked}
  assert len(answers) == 1  # Every animal has one color in a story.
  return answers.pop(), species[asked]


@pytest.mark.parametrize('task', [1, 2, 16])
def test_generated_answers_follow_from_the_story(task):
  """A tiny solver per task re-derives every answer; supporting names the deciding sentences."""
  for split, examples in babi.generate_splits(_config(f'qa{task}_1k')).items():
    for e in examples:
      story, supporting = e['story'], e['supporting']
      if task == 16:
        answer, animal = _solve_task16(story, e['question'])
        asked = e['question'].split()[-1][:-1]
        kin = story[supporting[1]].split()[0]
        assert [story[i] for i in supporting] == [
          f'{asked} is a {animal}.',
          f'{kin} is a {animal}.',
          f'{kin} is {answer}.',
        ]
        assert kin != asked
      else:
        answer, expected = (_solve_task1 if task == 1 else _solve_task2)(story, e['question'])
        assert supporting == expected, (split, e)
      assert e['answer'] == answer, (split, e)


def test_generated_splits_sizes_disjoint_and_deterministic():
  """1k/10k sizes, no story+question in two splits, the same test set for 1k and 10k."""
  assert {c.name for c in babi.BabiTasks.BUILDER_CONFIGS} == {
    f'qa{t}_{n}' for t in (1, 2, 16) for n in ('1k', '10k')
  }
  for task in (1, 2, 16):
    small = babi.generate_splits(_config(f'qa{task}_1k'))
    large = babi.generate_splits(_config(f'qa{task}_10k'))
    assert {k: len(v) for k, v in small.items()} == {'test': 1000, 'validation': 100, 'train': 1000}
    assert {k: len(v) for k, v in large.items()} == {
      'test': 1000,
      'validation': 1000,
      'train': 10000,
    }
    assert large['test'] == small['test'] == babi.generate_splits(_config(f'qa{task}_1k'))['test']
    keys = {split: {(tuple(e['story']), e['question']) for e in v} for split, v in large.items()}
    assert sum(map(len, keys.values())) == 12000  # Distinct within and across splits.
  # Several questions per story: a later example's story extends an earlier one's.
  first, second = babi.generate_splits(_config('qa1_1k'))['train'][:2]
  assert second['story'][: len(first['story'])] == first['story']


_TRAIN = """1 Mary moved to the bathroom.
2 John went to the hallway.
3 Where is Mary? \tbathroom\t1
4 Daniel went back to the hallway.
5 Sandra moved to the garden.
6 Where is Daniel? \thallway\t4 1
7 John moved to the office.
8 Sandra journeyed to the bathroom.
9 Where is Sandra? \tbathroom\t8
1 Sandra travelled to the office.
2 Sandra went to the garden.
3 Where is Sandra? \tgarden\t2
4 Mary moved to the office.
5 Where is Mary? \toffice\t4
"""
_TEST = '1 John went to the hallway.\n2 Mary went to the office.\n3 Where is John? \thallway\t1\n'


def _write(folder, train=_TRAIN, test=_TEST):
  folder.mkdir(exist_ok=True)
  (folder / 'qa1_single-supporting-fact_train.txt').write_text(train)
  (folder / 'qa1_single-supporting-fact_test.txt').write_text(test)
  return str(folder)


def _files_config(folder, tmp_path, **fields):
  return {
    'name': 'babi_files',
    'folder': folder,
    'task': 1,
    'data_dir': str(tmp_path / 'tfds'),
    **fields,
  }


def test_reader_maps_ids_and_cuts_validation(tmp_path):
  """Statements before each question; IDs map past question lines; last story -> validation."""
  config = babi_files.config_for_folder(_write(tmp_path / 'en'), 1)
  assert config.name.startswith('en_qa1_')
  splits = babi_files.read_splits(config)
  assert [len(splits[s]) for s in ('train', 'validation', 'test')] == [3, 2, 1]
  third = splits['train'][2]
  assert third['story'] == [
    'Mary moved to the bathroom.',
    'John went to the hallway.',
    'Daniel went back to the hallway.',
    'Sandra moved to the garden.',
    'John moved to the office.',
    'Sandra journeyed to the bathroom.',
  ]
  assert (third['question'], third['answer'], third['supporting']) == (
    'Where is Sandra?',
    'bathroom',
    [5],
  )
  assert splits['train'][1]['supporting'] == [2, 0]
  assert splits['validation'][1]['story'] == [
    'Sandra travelled to the office.',
    'Sandra went to the garden.',
    'Mary moved to the office.',
  ]
  assert splits['validation'][1]['supporting'] == [2]
  # Other bytes, another config: edited files are prepared afresh.
  edited = babi_files.config_for_folder(
    _write(tmp_path / 'en', test=_TEST.replace('1\n', '1 \n')), 1
  )
  assert edited.name != config.name


@pytest.mark.parametrize(
  'bad, line',
  [
    ('Mary moved to the garden.', 4),  # No ID.
    ('4 Where is Mary?\tbathroom', 4),  # No supporting column.
    ('4 Where is Mary?\tbathroom\t3', 4),  # 3 is a question line.
    ('4 Where is Mary?\tbathroom\t5', 4),  # Not an earlier line.
    ('7 Mary moved to the garden.', 4),  # ID out of sequence.
  ],
)
def test_malformed_lines_raise_with_file_and_line_before_preparing(tmp_path, bad, line):
  """Each malformed line names the file and its line; no dataset directory is created."""
  folder = _write(tmp_path / 'en', train=_TRAIN.replace('4 Daniel went back to the hallway.', bad))
  with pytest.raises(ValueError, match=rf'qa1_single-supporting-fact_train\.txt, line {line}:'):
    qa.build(_files_config(folder, tmp_path), str(tmp_path / 'work'))
  assert not (tmp_path / 'tfds').exists() and not (tmp_path / 'work').exists()


def test_missing_task_and_answer_outside_vocabulary(tmp_path):
  """task names the missing qaN files; a test answer never seen in train names word and split."""
  folder = _write(tmp_path / 'en')
  with pytest.raises(ValueError, match=r'config\.dataset\.task=3 .* tasks there: \[1\]'):
    qa.build(_files_config(folder, tmp_path, task=3), str(tmp_path / 'work'))
  folder = _write(
    tmp_path / 'other', test='1 John went to the kitchen.\n2 Where is John?\tkitchen\t1\n'
  )
  with pytest.raises(ValueError, match=r"Answer 'kitchen' of split 'test'"):
    qa.build(_files_config(folder, tmp_path), str(tmp_path / 'work2'))


def test_truncation_keeps_the_most_recent_sentences(tmp_path, caplog):
  """memory_size=2 keeps the last two statements, oldest in slot 0, and warns once per split."""
  data = qa.build(
    _files_config(_write(tmp_path / 'en'), tmp_path, memory_size=2), str(tmp_path / 'work')
  )
  assert data.sentence_length == 6  # "daniel went back to the hallway"
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    arrays = data.arrays('train')
  warnings = [r.getMessage() for r in caplog.records if 'memory_size=2' in r.getMessage()]
  assert len(warnings) == 1 and '2 of 3 examples' in warnings[0], warnings
  # TFDS stores examples in its own order: find them by question.
  questions = [e.question for e in data.examples('train')]
  sandra, daniel = questions.index('Where is Sandra?'), questions.index('Where is Daniel?')
  decode = data.tokenizer.decode
  assert [decode(s) for s in arrays['story'][sandra]] == [
    'john moved to the office',
    'sandra journeyed to the bathroom',
  ]
  assert arrays['support'][sandra].tolist() == [0, 1]
  assert arrays['support'][daniel].tolist() == [1, 0]  # Statement 2 in slot 0; 0 was cut.
  assert decode(arrays['query'][sandra]) == 'where is sandra'
  assert data.examples('train')[sandra].story[0] == 'Mary moved to the bathroom.'  # Not cut.
  assert decode([arrays['answer'][sandra]]) == 'bathroom'
  # Reloaded from the workdir: the same vocabulary.
  again = qa.build(_files_config(_write(tmp_path / 'en'), tmp_path), str(tmp_path / 'work'))
  assert again.tokenizer.vocab == data.tokenizer.vocab


@pytest.fixture(scope='module')
def qa1(tmp_path_factory):
  """babi_tasks qa1_1k prepared and built in a temporary directory."""
  root = tmp_path_factory.mktemp('qa1')
  return qa.build({'builder_config': 'qa1_1k', 'data_dir': str(root / 'tfds')}, str(root / 'work'))


def test_batches_shapes_padding_and_support(qa1):
  """Fixed shapes and int32; padding rows index -1; support and slots match the examples."""
  assert qa1.sentence_length == 6 and qa1.memory_size == 50
  batches = list(qa1.batches('validation', batch_size=64, shuffle=False, seed=0, num_epochs=1))
  assert len(batches) == 2
  examples = qa1.examples('validation')
  for batch in batches:
    assert {k: (v.shape, v.dtype) for k, v in batch.items()} == {
      'story': ((64, 50, 6), np.int32),
      'query': ((64, 6), np.int32),
      'answer': ((64,), np.int32),
      'support': ((64, 50), np.int32),
      'index': ((64,), np.int32),
    }
  last = batches[1]
  assert (last['index'][36:] == -1).all() and (last['story'][36:] == PAD_ID).all()
  for row, n in enumerate(np.concatenate([b['index'] for b in batches])[:100]):
    e, b = examples[n], batches[row // 64]
    r = row % 64
    assert np.flatnonzero(b['support'][r]).tolist() == sorted(e.supporting)
    assert qa1.tokenizer.decode(b['story'][r, len(e.story) - 1]) == qa1.words(e.story[-1])
    assert (b['story'][r, len(e.story) :] == PAD_ID).all()
    assert qa1.tokenizer.decode([b['answer'][r]]) == e.answer
  answers = [qa1.tokenizer.decode([i]) for i in qa1.answer_ids()]
  assert sorted(answers) == sorted(babi.PLACES)


def test_config_errors_name_the_field(tmp_path):
  """Bad fields raise before anything is prepared."""
  with pytest.raises(ValueError, match=r"config\.dataset\.name='squad'"):
    qa.build({'name': 'squad'}, str(tmp_path))
  with pytest.raises(ValueError, match=r"config\.dataset\.builder_config='qa3_1k'"):
    qa.build({'builder_config': 'qa3_1k', 'data_dir': str(tmp_path)}, str(tmp_path))
  with pytest.raises(ValueError, match=r'config\.dataset\.folder'):
    qa.build({'name': 'babi_files'}, str(tmp_path))
