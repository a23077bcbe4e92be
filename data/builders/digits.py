"""`digits`: scikit-learn's bundled 8x8 handwritten digits, as an offline TFDS dataset.

The 1,797 images of `sklearn.datasets.load_digits()` (read from a file inside the wheel, no
network) are scaled from 0..16 to 0..255 and split per class by a fixed seed: 15% of each
class to validation, 15% to test, the rest to train, so every split holds every digit in about
the same proportion. `digit_splits` is the one place the split assignment is made; the
`digit_captions` dataset draws its digits from the same splits.
"""

import functools

import numpy as np
import tensorflow_datasets as tfds

LABELS = tuple(str(d) for d in range(10))
SPLITS = ('train', 'validation', 'test')
HOLDOUT_FRACTION = 0.15  # Of each class, for validation and again for test.
SIZE = 8  # Images are SIZE x SIZE pixels.
_SEED = 0


@functools.cache
def digit_splits() -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """The digits of each split, disjoint and stratified by class, the same on every call.

  Returns:
    `{split: (images, labels)}` for 'train', 'validation' and 'test': images uint8
    `[N, 8, 8]` in 0..255, labels int64 `[N]` in 0..9, in the order of `load_digits()`. The
    arrays are read-only (they are cached and shared).
  """
  # Imported here: scikit-learn takes over a second to import, which every train.py and eval.py
  # would otherwise pay, whatever the task.
  from sklearn import datasets  # pylint: disable=import-outside-toplevel

  digits = datasets.load_digits()
  images = np.round(digits.images * (255 / 16)).astype(np.uint8)  # [1797, 8, 8]
  labels = digits.target.astype(np.int64)  # [1797]
  rng = np.random.default_rng(_SEED)
  parts = {split: [] for split in SPLITS}
  for label in range(len(LABELS)):
    members = rng.permutation(np.flatnonzero(labels == label))
    holdout = round(HOLDOUT_FRACTION * len(members))
    parts['validation'].append(members[:holdout])
    parts['test'].append(members[holdout : 2 * holdout])
    parts['train'].append(members[2 * holdout :])
  out = {}
  for split, members in parts.items():
    index = np.sort(np.concatenate(members))
    split_images, split_labels = images[index], labels[index]
    split_images.flags.writeable = split_labels.flags.writeable = False
    out[split] = (split_images, split_labels)
  return out


class Digits(tfds.core.GeneratorBasedBuilder):
  """Handwritten digits 0-9, 8x8 grayscale, from scikit-learn."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.'}

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
      builder=self,
      description=__doc__,
      # A Tensor, not an Image feature: encoding Images needs TensorFlow.
      features=tfds.features.FeaturesDict(
        {
          'image': tfds.features.Tensor(shape=(SIZE, SIZE, 1), dtype=np.uint8),
          'label': tfds.features.ClassLabel(names=LABELS),
        }
      ),
      supervised_keys=('image', 'label'),
      homepage='https://scikit-learn.org/stable/modules/generated/'
      'sklearn.datasets.load_digits.html',
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # The data ships with scikit-learn.
    return {split: self._generate_examples(*arrays) for split, arrays in digit_splits().items()}

  def _generate_examples(self, images: np.ndarray, labels: np.ndarray):
    for i, (image, label) in enumerate(zip(images, labels)):
      yield i, {'image': image[:, :, None], 'label': int(label)}
