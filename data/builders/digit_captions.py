"""`digit_captions`: 2-4 real handwritten digits on a blank canvas, captioned left to right.

Offline and deterministic. Each image places 2-4 of scikit-learn's 8x8 digits
(`data.builders.digits`) at random rows and at columns that do not overlap, so "left to right" is
well defined; the caption names the digits in that order ("seven two nine"). Feature 'boxes' holds
each digit's box `(top, left, bottom, right)` in pixels (bottom and right exclusive) and 'digits'
its label, both in caption order: what a captioning model's attention should find when it says each
word.

The digits of a split come only from the same split of `digits`, so no handwritten image is
seen both in training and in evaluation. Each split has its own generator seeded from the
config's seed and the split's name.
"""

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from data.builders import digits
from data.builders.generated import GeneratedConfig

NAMES = ('zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine')


@dataclasses.dataclass(eq=False)
class DigitCaptionsConfig(GeneratedConfig):
  """Canvas and digit counts, plus the split sizes and seed of `GeneratedConfig`.

  Attributes:
    height: canvas rows.
    width: canvas columns; at least 8 per digit, so the digits fit side by side.
    min_digits: fewest digits per image.
    max_digits: most digits per image.
  """

  height: int = 32
  width: int = 64
  min_digits: int = 2
  max_digits: int = 4


def caption(labels: list[int]) -> str:
  """The caption of digits `labels` in left-to-right order, e.g. 'seven two nine'."""
  return ' '.join(NAMES[d] for d in labels)


def generate_split(config: DigitCaptionsConfig, split: str) -> list[dict]:
  """Every example of `split`, the same on every call.

  Args:
    config: canvas, digit counts, split sizes and seed.
    split: 'train', 'validation' or 'test'.

  Returns:
    `{'image': uint8 [height, width, 1], 'caption': str, 'boxes': int32 [n, 4],
    'digits': int32 [n]}` per example, boxes and digits in caption order.

  Raises:
    ValueError: if the canvas cannot hold `max_digits` digits side by side.
  """
  size = digits.SIZE
  if (
    config.height < size
    or config.width < size * config.max_digits
    or not (1 <= config.min_digits <= config.max_digits)
  ):
    raise ValueError(
      f'DigitCaptionsConfig {config.name!r}: a {config.height}x{config.width} '
      f'canvas cannot hold {config.min_digits}-{config.max_digits} digits of '
      f'{size}x{size} side by side.'
    )
  images, labels = digits.digit_splits()[split]
  rng = np.random.default_rng([config.seed, digits.SPLITS.index(split)])
  examples = []
  for _ in range(getattr(config, f'{split}_size')):
    n = int(rng.integers(config.min_digits, config.max_digits + 1))
    chosen = rng.integers(len(images), size=n)
    # Sorted offsets into the free columns, each digit shifted right by the widths before it:
    # uniform over the non-overlapping placements (stars and bars).
    free = config.width - size * n
    lefts = np.sort(rng.integers(free + 1, size=n)) + size * np.arange(n)
    tops = rng.integers(config.height - size + 1, size=n)
    canvas = np.zeros((config.height, config.width, 1), np.uint8)
    for i, top, left in zip(chosen, tops, lefts):
      canvas[top : top + size, left : left + size, 0] = images[i]
    examples.append(
      {
        'image': canvas,
        'caption': caption(labels[chosen].tolist()),
        'boxes': np.stack([tops, lefts, tops + size, lefts + size], axis=-1).astype(np.int32),
        'digits': labels[chosen].astype(np.int32),
      }
    )
  return examples


class DigitCaptions(tfds.core.GeneratorBasedBuilder):
  """Images of 2-4 handwritten digits with the digits' names as caption and their boxes."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.'}
  BUILDER_CONFIGS = [
    DigitCaptionsConfig(
      name='default', description='22,000 images of 32x64 pixels.', train_size=20_000
    ),
    DigitCaptionsConfig(
      name='small',
      description='2,400 images of 32x64 pixels, for tests.',
      train_size=2_000,
      validation_size=200,
      test_size=200,
    ),
  ]
  DEFAULT_CONFIG_NAME = 'default'

  def _info(self) -> tfds.core.DatasetInfo:
    c = self.builder_config
    return tfds.core.DatasetInfo(
      builder=self,
      description=__doc__,
      # Tensors, not an Image feature: encoding Images needs TensorFlow.
      features=tfds.features.FeaturesDict(
        {
          'image': tfds.features.Tensor(shape=(c.height, c.width, 1), dtype=np.uint8),
          'caption': tfds.features.Text(),
          'boxes': tfds.features.Tensor(shape=(None, 4), dtype=np.int32),
          'digits': tfds.features.Tensor(shape=(None,), dtype=np.int32),
        }
      ),
      supervised_keys=('image', 'caption'),
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Generated from the digits that ship with scikit-learn.
    return {split: self._generate_examples(split) for split in digits.SPLITS}

  def _generate_examples(self, split: str):
    for i, example in enumerate(generate_split(self.builder_config, split)):
      yield i, example
