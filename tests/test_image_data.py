"""Image data: digits, digit_captions, image_folder, image and caption batches."""

import json
import logging

import numpy as np
from PIL import Image
import pytest
from sklearn import datasets
import tensorflow_datasets as tfds

from data import captioning, image_classification
from data.builders import digit_captions, digits
from data.readers import image_folder
from data.tfds_reading import read_all
from data.tokenizers import EOS_ID, MANIFEST, PAD_ID


@pytest.fixture(scope='module')
def data_dir(tfds_dir):
  return str(tfds_dir)


@pytest.fixture(scope='module')
def digit_data(data_dir):
  return image_classification.build({'data_dir': data_dir, 'shift': 1})


@pytest.fixture(scope='module')
def vocab_dir(tmp_path_factory):
  return tmp_path_factory.mktemp('vocab')


@pytest.fixture(scope='module')
def caption_data(data_dir, vocab_dir):
  return captioning.build({'builder_config': 'small', 'data_dir': data_dir}, str(vocab_dir))


def _rows(pixels, labels):
  """Sorted (image bytes, label) pairs: split contents regardless of TFDS's order."""
  return sorted((p.tobytes(), int(l)) for p, l in zip(pixels, labels))


def test_digit_splits_partition_the_digits_by_class(digit_data):
  """Splits are disjoint, hold every image once, ~15% of each class held out twice."""
  splits = digits.digit_splits()
  assert {s: len(l) for s, (_, l) in splits.items()} == {
    'train': 1259,
    'validation': 269,
    'test': 269,
  }
  source = datasets.load_digits()
  expected = _rows(np.round(source.images * 255 / 16).astype(np.uint8), source.target)
  assert sorted(r for i, l in splits.values() for r in _rows(i, l)) == expected
  per_class = np.bincount(source.target)
  for split in ('validation', 'test'):
    np.testing.assert_allclose(np.bincount(splits[split][1]), 0.15 * per_class, atol=1)
  # The prepared dataset holds exactly these images, as [8, 8, 1].
  for split, (pixels, labels) in splits.items():
    assert _rows(digit_data.pixels(split)[..., 0], digit_data.labels(split)) == _rows(
      pixels, labels
    )
  assert digit_data.image_shape == (8, 8, 1) and digit_data.label_names == list('0123456789')


def test_digit_captions_place_digits_left_to_right(caption_data, data_dir):
  """Words name the digits; boxes are disjoint in columns, ordered, and hold the split's digits."""
  builder = digit_captions.DigitCaptions(
    config='small', data_dir=data_dir, file_format='array_record'
  )
  known = {
    split: dict(zip(map(bytes, i.reshape(len(i), -1)), l))
    for split, (i, l) in digits.digit_splits().items()
  }
  for split, size in (('train', 2000), ('validation', 200), ('test', 200)):
    records = read_all(builder.as_data_source(split=split))
    assert len(records) == size
    for r in records[:200]:
      image, boxes, labels = r['image'][..., 0], r['boxes'], r['digits']
      assert r['caption'].decode() == ' '.join(digit_captions.NAMES[d] for d in labels)
      assert 2 <= len(labels) <= 4 and boxes.shape == (len(labels), 4)
      assert np.all(boxes[:, 2:] - boxes[:, :2] == 8) and boxes.min() >= 0
      assert boxes[:, 2].max() <= 32 and boxes[:, 3].max() <= 64
      assert np.all(boxes[1:, 1] >= boxes[:-1, 3])  # The next digit starts after this one ends.
      rest = image.copy()
      for (top, left, bottom, right), label in zip(boxes, labels):
        assert known[split][image[top:bottom, left:right].tobytes()] == label
        rest[top:bottom, left:right] = 0
      assert not rest.any()
  generated = digit_captions.generate_split(builder.builder_config, 'test')
  assert sorted(e['image'].tobytes() for e in generated) == sorted(
    r['image'].tobytes() for r in read_all(builder.as_data_source(split='test'))
  )


def _write(folder, images_by_class):
  """Writes `{class: [uint8 image, ...]}` as PNGs under `folder`; returns (bytes, label) rows."""
  rows = []
  for label, (name, arrays) in enumerate(sorted(images_by_class.items())):
    (folder / name).mkdir(parents=True, exist_ok=True)
    for i, array in enumerate(arrays):
      Image.fromarray(array).save(folder / name / f'{i}.png')
      rows.append((np.atleast_3d(array).tobytes(), label))
  return sorted(rows)


def test_image_folder_class_layout(tmp_path, rng):
  """root/CLASS/*.png: every image read back exactly, one per class held out twice."""
  expected = _write(
    tmp_path / 'pets',
    {
      name: [rng.integers(0, 256, (4, 6, 3), dtype=np.uint8) for _ in range(5)]
      for name in ('cat', 'dog')
    },
  )
  (tmp_path / 'pets' / 'README.txt').write_text('Files directly in the root are ignored.')
  data = image_classification.build(
    {'name': 'image_folder', 'folder': str(tmp_path / 'pets'), 'data_dir': str(tmp_path / 'tfds')}
  )
  assert data.label_names == ['cat', 'dog'] and data.image_shape == (4, 6, 3)
  splits = {s: _rows(data.pixels(s), data.labels(s)) for s in ('train', 'validation', 'test')}
  assert [sorted(l for _, l in rows) for rows in splits.values()] == [
    [0] * 3 + [1] * 3,
    [0, 1],
    [0, 1],
  ]
  assert sorted(r for rows in splits.values() for r in rows) == expected


def test_image_folder_split_layout_and_new_config_on_edit(tmp_path, rng):
  """root/SPLIT/CLASS: the given splits ('L' images keep one channel); edits rename the config."""
  root = tmp_path / 'letters'

  def make(n):  # n grayscale images, saved as 'L' PNGs.
    return [rng.integers(0, 256, (5, 3), dtype=np.uint8) for _ in range(n)]

  train = _write(root / 'train', {'a': make(2), 'b': make(1)})
  test = _write(root / 'test', {'a': make(1), 'b': make(1)})
  data = image_classification.build(
    {'name': 'image_folder', 'folder': str(root), 'data_dir': str(tmp_path / 'tfds')}
  )
  assert data.image_shape == (5, 3, 1)
  assert _rows(data.pixels('train'), data.labels('train')) == train
  assert _rows(data.pixels('test'), data.labels('test')) == test
  with pytest.raises(ValueError, match=r"'validation' is not a split .* \['test', 'train'\]"):
    data.pixels('validation')
  before = image_folder.config_for_path(str(root)).name
  Image.fromarray(make(1)[0]).save(root / 'test' / 'b' / '0.png')
  assert image_folder.config_for_path(str(root)).name != before


@pytest.mark.parametrize(
  'case, message',
  [
    ('mixed_sizes', r"'.*a/0\.png' is \(4, 6, 3\) and '.*b/1\.png' is \(5, 6, 3\)"),
    ('empty_class', r"class folder '.*empty' holds no image"),
    ('not_an_image', r"'.*a/notes\.txt' is not an image"),
    ('no_classes', r'has no class folders'),
  ],
)
def test_image_folder_rejects_bad_folders_before_preparing(tmp_path, rng, case, message):
  """Each bad folder raises one ValueError naming the file or folder; nothing is written."""
  root = tmp_path / 'bad'
  root.mkdir()
  if case != 'no_classes':
    _write(root, {'a': [rng.integers(0, 256, (4, 6, 3), dtype=np.uint8)] * 3})
  if case == 'mixed_sizes':
    _write(root, {'b': [rng.integers(0, 256, (h, 6, 3), dtype=np.uint8) for h in (4, 5)]})
  elif case == 'empty_class':
    (root / 'empty').mkdir()
  elif case == 'not_an_image':
    (root / 'a' / 'notes.txt').write_text('not a picture')
  with pytest.raises(ValueError, match=message):
    image_classification.build(
      {'name': 'image_folder', 'folder': str(root), 'data_dir': str(tmp_path / 'd')}
    )
  assert not (tmp_path / 'd').exists()


@pytest.mark.parametrize(
  'config, error, message',
  [
    ({'name': 'image_folder'}, ValueError, r'config\.dataset\.folder must name a folder'),
    ({'name': 'image_folder', 'folder': '/no/such/dir'}, FileNotFoundError, 'no such folder'),
    ({'shift': -1}, ValueError, r'config\.dataset\.shift must be 0'),
    ({'vocab_size': 10}, ValueError, r"unknown field\(s\) \['vocab_size'\]"),
    ({'name': 'no_such_set'}, ValueError, r"\['digits', 'image_folder'\] or a registered TFDS"),
    ({'label_key': 'image'}, ValueError, r"label_key='image' is not a ClassLabel .* \['label'\]"),
  ],
)
def test_bad_image_configs(data_dir, config, error, message):
  with pytest.raises(error, match=message):
    image_classification.build({'data_dir': data_dir, **config})


def test_eval_batches_pad_and_normalize(digit_data):
  """Split order, normalized images, a padded last batch; train pixels have mean 0, std 1."""
  pixels, labels = digit_data.pixels('validation'), digit_data.labels('validation')
  batches = list(
    digit_data.batches('validation', batch_size=100, shuffle=False, seed=0, num_epochs=1)
  )
  assert [b['images'].shape for b in batches] == [(100, 8, 8, 1)] * 3
  assert {k: v.dtype for k, v in batches[0].items()} == {
    'images': np.float32,
    'labels': np.int32,
    'index': np.int32,
  }
  index = np.concatenate([b['index'] for b in batches])
  np.testing.assert_array_equal(index, list(range(269)) + [-1] * 31)
  last = batches[-1]
  assert not last['images'][69:].any() and not last['labels'][69:].any()
  for b in batches:
    real = b['index'] >= 0
    np.testing.assert_array_equal(b['labels'][real], labels[b['index'][real]])
    np.testing.assert_allclose(b['images'][real], digit_data.normalize(pixels[b['index'][real]]))
  train = np.concatenate(
    [
      b['images'][b['index'] >= 0]
      for b in digit_data.batches('train', batch_size=256, shuffle=False, seed=0, num_epochs=1)
    ]
  )
  assert len(train) == 1259
  np.testing.assert_allclose(train.mean((0, 1, 2)), [0], atol=1e-5)
  np.testing.assert_allclose(train.std((0, 1, 2)), [1], atol=1e-5)


def test_training_batches_shift_resume_and_split_over_hosts(digit_data):
  """Shifts move pixels by at most 1, reproducibly; set_state resumes; hosts split batches."""
  pixels = digit_data.pixels('train')
  it = digit_data.batches('train', batch_size=64, shuffle=True, seed=3)
  for _ in range(5):
    next(it)
  state = it.get_state()
  expected = [next(it) for _ in range(3)]
  resumed = digit_data.batches('train', batch_size=64, shuffle=True, seed=3)
  resumed.set_state(json.loads(json.dumps(state)))
  for want, got in zip(expected, [next(resumed) for _ in range(3)]):
    for key in want:
      np.testing.assert_array_equal(got[key], want[key])
  batch = expected[0]
  padded = np.pad(pixels, ((0, 0), (1, 1), (1, 1), (0, 0)))
  moved = 0
  for image, i in zip(batch['images'], batch['index']):
    shifts = [
      digit_data.normalize(padded[i, 1 - dy : 9 - dy, 1 - dx : 9 - dx])
      for dy in (-1, 0, 1)
      for dx in (-1, 0, 1)
    ]
    matches = [s for s, shifted in enumerate(shifts) if np.allclose(image, shifted)]
    assert matches, 'every image is its source moved by at most one pixel'
    moved += 4 not in matches
  assert moved > 32
  first = next(digit_data.batches('train', batch_size=64, shuffle=True, seed=3))
  hosts = [
    next(
      digit_data.batches(
        'train', batch_size=64, shuffle=True, seed=3, process_index=p, process_count=2
      )
    )
    for p in (0, 1)
  ]
  assert all(h['images'].shape == (32, 8, 8, 1) for h in hosts)
  np.testing.assert_array_equal(np.concatenate([h['index'] for h in hosts]), first['index'])


def test_tfds_image_datasets_by_name_under_mock_data(tmp_path):
  """mnist from TFDS's registry gives batches; images of several shapes name the split."""
  with tfds.testing.mock_data(num_examples=10):
    mnist = image_classification.build({'name': 'mnist', 'data_dir': str(tmp_path)})
    batch = next(mnist.batches('train', batch_size=4, shuffle=True, seed=0))
    cats = image_classification.build({'name': 'cats_vs_dogs', 'data_dir': str(tmp_path)})
    with pytest.raises(ValueError, match=r"Split 'train' of cats_vs_dogs has images of diff"):
      cats.pixels('train')
  assert mnist.label_names == [str(d) for d in range(10)] and mnist.image_shape == (28, 28, 1)
  assert batch['images'].shape == (4, 28, 28, 1) and batch['images'].dtype == np.float32
  assert set(batch['labels']) <= set(range(10))


def test_caption_targets_decode_to_captions(caption_data):
  """Targets are the caption's word ids then EOS; batches have fixed shapes; boxes match words."""
  assert caption_data.tokenizer.vocab_size == 14  # The 10 digit names and 4 specials.
  examples = caption_data.examples('validation')
  targets = caption_data.targets('validation')
  assert targets.shape == (200, 17)
  for example, row in zip(examples, targets):
    words = example.caption.split()
    assert row[len(words)] == EOS_ID and np.all(row[len(words) + 1 :] == PAD_ID)
    assert caption_data.tokenizer.decode(row) == example.caption
    assert example.references == (example.caption,) and len(example.boxes) == len(words)
  batch = next(caption_data.batches('validation', batch_size=64, shuffle=False, seed=0))
  assert batch['images'].shape == (64, 32, 64, 1) and batch['targets'].shape == (64, 17)
  np.testing.assert_array_equal(batch['targets'], targets[batch['index']])


def test_caption_vocabulary_saved_and_reloaded_and_truncation(
  caption_data, data_dir, vocab_dir, caplog
):
  """A saved vocabulary is reused; long captions are cut to max_length with one warning."""
  assert json.loads((vocab_dir / MANIFEST).read_text())['dataset'] == 'digit_captions/small'
  with caplog.at_level(logging.WARNING):
    cut = captioning.build(
      {'builder_config': 'small', 'data_dir': data_dir, 'max_length': 2}, str(vocab_dir)
    )
    targets = cut.targets('validation')
  assert cut.tokenizer.vocab == caption_data.tokenizer.vocab
  long = sum(len(e.caption.split()) > 2 for e in cut.examples('validation'))
  assert [r.getMessage() for r in caplog.records if 'truncated' in r.getMessage()] == [
    f'digit_captions/small validation: truncated {long} of 200 captions to max_length=2 words.'
  ]
  full = caption_data.targets('validation')
  np.testing.assert_array_equal(targets[:, :2], full[:, :2])
  assert np.all(targets[:, 2] == EOS_ID) and targets.shape == (200, 3)


def test_generic_captioning_datasets(tmp_path):
  """A registered TFDS dataset by name (ai2dcaption, mocked with fixed-size images) reads its
  Text or Sequence-of-Text captions; coco_captions, which needs TensorFlow, says so."""
  rng = np.random.default_rng(0)
  records = [
    {
      'image': rng.integers(0, 256, (6, 5, 3), dtype=np.uint8),
      'caption': f'A Diagram, number {i}.',
      'relationships': [f'x{i} eats y', 'z'],
    }
    for i in range(6)
  ]

  class Source(list):
    def __getitems__(self, keys):
      return [self[k] for k in keys]

  with tfds.testing.mock_data(as_data_source_fn=lambda self, split, **_: Source(records)):
    data = captioning.build({'name': 'ai2dcaption', 'data_dir': str(tmp_path)}, str(tmp_path / 'a'))
    nested = captioning.build(
      {'name': 'ai2dcaption', 'caption_key': 'relationships', 'data_dir': str(tmp_path)},
      str(tmp_path / 'b'),
    )
    assert data.examples('train')[3] == captioning.CaptionExample(
      'a diagram , number 3 .', ('a diagram , number 3 .',), ()
    )
    assert nested.examples('train')[1].references == ('x1 eats y', 'z')
    batch = next(data.batches('train', batch_size=4, shuffle=False, seed=0))
  assert data.image_shape == (6, 5, 3) and batch['images'].shape == (4, 6, 5, 3)
  assert data.tokenizer.decode(batch['targets'][0]) == 'a diagram , number 0 .'
  with pytest.raises(ValueError, match=r"name='coco_captions' needs TensorFlow"):
    captioning.build({'name': 'coco_captions', 'data_dir': str(tmp_path)}, str(tmp_path / 'c'))
