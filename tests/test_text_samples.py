"""A researcher's own text read as a task of text reads an example (`Task.text_sample`, what
prompt.py attention draws): the text of a split's example gives that example's record (the same
ids, prediction and attention weights) with no reference, and the same pictures and explorer
views. Tasks of images and symbols refuse. The tiny models have the fixed parameters of
tests/attention_readings.py; prompt.py itself runs on a trained run in tests/test_explorer.py."""

import os

from attention_readings import FIXTURES, _config, _plain, _state, assert_close
import pytest

import tasks
from training import evaluation, sharding
from training.steps import merge_model

SPLIT = 'validation[:8]'
# What only a split's example has (its reference, label, supports and key sentences, the
# explorer's 'key'), or what depends on the batch's padding (the flattened ids); all else must be
# equal.
SPLIT_ONLY = {'index', 'line', 'reference', 'label', 'answer', 'supporting', 'hits', 'ids'}
SPLIT_ONLY |= {'key_sentences', 'key'}


def _shared(value):
  """`value` as JSON (`_plain`) without the `SPLIT_ONLY` fields of its dicts, at any depth."""
  value = _plain(value)
  if isinstance(value, dict):
    return {key: _shared(item) for key, item in value.items() if key not in SPLIT_ONLY}
  if isinstance(value, list):
    return [_shared(item) for item in value]
  return value


def _text(task, index: int) -> str:
  """The text of the split's example `index`, as a researcher would type it."""
  if isinstance(task, tasks.TASKS['translation']):
    return task.data.raw_examples(SPLIT)[index][0]
  if isinstance(task, tasks.TASKS['classification']):
    return task.data.examples(SPLIT)[index].text
  example = task.data.examples(SPLIT)[index]
  return ' '.join([*example.story, example.question])


@pytest.mark.parametrize(
  'task_name, model',
  [
    ('translation', 'transformer'),
    ('translation', 'seq2seq'),
    ('classification', 'han'),
    ('classification', 'transformer_classifier'),
    ('question_answering', 'memn2n'),
  ],
)
def test_a_typed_text_is_read_as_the_split_reads_its_example(task_name, model, tfds_dir, tmp_path):
  config = _config(task_name, model, tfds_dir)
  task = tasks.build(config, str(tmp_path / 'run'))
  state = _state(config, task, os.path.join(FIXTURES, f'{task_name}-{model}.npz'), write=False)
  options = tasks.EvalOptions(max_examples=1, num_pictures=1)
  mesh = sharding.make_mesh(None)
  # A batch of one row: a document's prediction by a Transformer depends on the batch's width
  # (LabeledText.text_batch), and a typed text is a batch of its own.
  [expected] = evaluation.predict_split(
    state, task, SPLIT, batch_size=1, mesh=mesh, options=options
  )
  model_ = merge_model(state)
  typed = task.text_sample(model_, _text(task, expected['index']), options)

  assert typed.keys() == expected.keys()
  assert_close(_shared(typed), _shared(expected))
  assert not typed.get('reference') and not typed.get('answer') and typed.get('label') is None
  assert not typed.get('supporting') and not typed.get('key_sentences')

  [record] = task.explore(model_, [typed], options)
  [reference] = task.explore(model_, [expected], options)
  assert record['correct'] is None and record['reference'] in ('', typed.get('question'))
  assert record['prediction'] == reference['prediction']
  assert_close(_shared(record['views']), _shared(reference['views']))

  drawn = task.draw(model_, [typed], str(tmp_path), options)
  names = sorted(os.path.basename(path) for path in drawn)
  assert names and all(os.path.getsize(path) > 1000 for path in drawn if path.endswith('.png'))
  assert not any(name.startswith('confusion_matrix') for name in names)  # no label to count


def test_a_typed_text_that_does_not_fit_is_one_sentence(tfds_dir, tmp_path):
  config = _config('question_answering', 'memn2n', tfds_dir)
  task = tasks.build(config, str(tmp_path / 'qa'))
  with pytest.raises(ValueError, match='ending with "\\?"'):
    task.data.typed_example('Mary went to the kitchen. John went to the garden.')
  config = _config('translation', 'transformer', tfds_dir)
  config.dataset.update(max_input_length=4, truncate=False)
  task = tasks.build(config, str(tmp_path / 'translation'))
  with pytest.raises(ValueError, match='max_input_length=4'):
    task.data.source_ids('one two three four five six seven')


def test_only_the_tasks_of_text_take_a_typed_text():
  readers = {name for name, task in tasks.TASKS.items() if task.has_text_samples()}
  assert readers == {'translation', 'classification', 'question_answering'}
  captioning = object.__new__(tasks.TASKS['captioning'])  # its data is not needed to refuse
  with pytest.raises(ValueError, match='Captioning reads no text'):
    captioning.text_sample(None, 'a red square', None)
