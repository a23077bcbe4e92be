"""Image classification data: `build(config.dataset) -> ImageData`, then batches.

    images = image_classification.build(config.dataset)
    it = images.batches('train', batch_size=64, shuffle=True, seed=0)
    batch = next(it)  # {'images': float32 [B, H, W, C], 'labels': int32 [B], 'index': int32 [B]}

Images are held as uint8 `[N, H, W, C]` per split (a split must fit in memory) and normalized
per channel with the train split's mean and standard deviation, the same for training and
evaluation. Training batches may be augmented by random translations (`shift`).
Datasets: Attend's `digits` and `image_folder` (prepared offline), or any TFDS image
classification dataset (mnist, cifar10, ...), prepared by TFDS as usual.
"""

import abc
import functools
from typing import Any

from absl import logging
import ml_collections
import numpy as np
import tensorflow_datasets as tfds

from data.batch_source import BatchPlan, BatchSource
from data.builders import digits
from data.pipeline import DenseBatches
from data.readers import image_folder
from data.schema import checked_fields
from data.tfds_reading import make_builder, read_split

OWN_BUILDERS = {'digits': digits.Digits, 'image_folder': image_folder.ImageFolder}


def default_config() -> ml_collections.ConfigDict:
  """Returns the image classification `config.dataset` with every field at its default."""
  c = ml_collections.ConfigDict()
  c.name = 'digits'  # 'digits', 'image_folder' or a TFDS dataset ('mnist', 'cifar10').
  c.builder_config = ''  # TFDS builder config; '' = the default.
  c.data_dir = ''  # TFDS data dir to prepare datasets in; '' = ~/tensorflow_datasets.
  c.folder = ''  # image_folder: root/CLASS/images or root/SPLIT/CLASS/images.
  c.image_key = 'image'  # Feature holding the image (uint8 [H, W] or [H, W, C]).
  c.label_key = 'label'  # Feature holding the label (ClassLabel).
  c.shift = 0  # Training: translate by up to this many pixels, zero-filled.
  c.batch_size = 64  # Global training batch size (split evenly across hosts).
  c.eval_batch_size = 256  # Global evaluation batch size.
  c.train_split = 'train'  # Split for training and for the normalization statistics.
  c.eval_split = 'validation'  # Split evaluated during training.
  c.test_split = 'test'  # Split for the final evaluation.
  return c


_POSITIVE = ('batch_size', 'eval_batch_size')
_NON_EMPTY = ('name', 'image_key', 'label_key', 'train_split', 'eval_split', 'test_split')


def validate_config(config: Any) -> ml_collections.FrozenConfigDict:
  """Checks `config.dataset` against the schema and fills fields it leaves out with defaults.

  Raises:
    ValueError: naming the first bad field and what it accepts.
  """
  merged = checked_fields(config, default_config(), positive=_POSITIVE, non_empty=_NON_EMPTY)
  check_shift(merged['shift'])
  if merged['name'] == 'image_folder' and not merged['folder']:
    raise ValueError(
      "config.dataset.folder must name a folder when config.dataset.name is 'image_folder'."
    )
  return ml_collections.FrozenConfigDict(merged)


def check_shift(shift: int) -> None:
  """Checks `config.dataset.shift`, shared by image classification and captioning."""
  if shift < 0:
    raise ValueError(
      f'config.dataset.shift must be 0 (no augmentation) or more pixels, got {shift}.'
    )


def shift_images(images: np.ndarray, shift: int, rng: np.random.Generator) -> np.ndarray:
  """Each image translated by its own random `(dy, dx)` in `[-shift, shift]`, zeros filled in.

  Args:
    images: `[B, H, W, C]`.
    shift: the largest translation, in pixels.
    rng: the random source (advanced).

  Returns:
    `[B, H, W, C]` of the same dtype: pixel `(i, j)` of image b is its pixel
    `(i - dy[b], j - dx[b])`, or 0 where that is outside.
  """
  b, h, w = images.shape[:3]
  padded = np.pad(images, ((0, 0), (shift, shift), (shift, shift), (0, 0)))  # [B, H+2s, W+2s, C]
  dy, dx = rng.integers(-shift, shift + 1, size=(2, b))
  rows = np.arange(h)[None, :] + (shift - dy)[:, None]  # [B, H]
  cols = np.arange(w)[None, :] + (shift - dx)[:, None]  # [B, W]
  return padded[np.arange(b)[:, None, None], rows[:, :, None], cols[:, None, :]]


def check_image_feature(
  config: ml_collections.FrozenConfigDict, builder: tfds.core.DatasetBuilder
) -> None:
  """Checks `config.image_key` names a uint8 image feature of rank 2 or 3."""
  features = builder.info.features
  name = builder.info.full_name.rsplit('/', 1)[0]
  if config.image_key not in features:
    raise ValueError(
      f'config.dataset.image_key={config.image_key!r} is not a feature of {name}; '
      f'valid: {sorted(features)}.'
    )
  feature = features[config.image_key]
  if not (
    isinstance(feature, (tfds.features.Image, tfds.features.Tensor))
    and feature.np_dtype == np.uint8
    and len(feature.shape) in (2, 3)
  ):
    raise ValueError(
      f'config.dataset.image_key={config.image_key!r} is a {feature!r} feature of '
      f'{name}; valid: a uint8 Image or Tensor of shape [H, W] or [H, W, C].'
    )


class ImageSource(BatchSource):
  """The images of a prepared dataset, read whole per split; the base of ImageData, CaptionData.

  Batches: 'images' float32 `[b, H, W, C]` (normalized; shifted by up to `config.shift` pixels
  when shuffling) and a subclass's `_per_image`; without shuffling, the split's order. Rows of a
  partial last batch are zeros.

  Attributes:
    name: the dataset, e.g. 'digits' or 'mnist'.
    config: the validated `config.dataset`.
  """

  def __init__(self, builder: tfds.core.DatasetBuilder, config: ml_collections.FrozenConfigDict):
    """Wraps a prepared builder whose image feature `check_image_feature` accepted."""
    self.name = builder.info.full_name.rsplit('/', 1)[0]
    self.config = config
    self._builder = builder
    self._pixels: dict[str, np.ndarray] = {}

  def _keep(self, split: str, records: list[dict[str, Any]]) -> None:
    """Keeps what a subclass needs of the records of `split`, read once with the pixels."""

  def pixels(self, split: str) -> np.ndarray:
    """Every image of `split` ('train', 'validation', 'test' or a TFDS slice), uint8
    `[N, H, W, C]`, in split order, cached."""
    if split not in self._pixels:
      records = read_split(self._builder, split, self.name)
      if not records:
        raise ValueError(f'Split {split!r} of {self.name} has no examples.')
      images = [np.asarray(r[self.config.image_key]) for r in records]
      shapes = {}  # One example per shape, to name in the error.
      for i, image in enumerate(images):
        shapes.setdefault(image.shape, i)
      if len(shapes) > 1:
        (a, i), (b, j) = list(shapes.items())[:2]
        raise ValueError(
          f'Split {split!r} of {self.name} has images of different shapes, e.g. '
          f'{a} (example {i}) and {b} (example {j}); this data needs one shape.'
        )
      pixels = np.stack(images)
      self._pixels[split] = pixels[..., None] if pixels.ndim == 3 else pixels
      self._keep(split, records)
      logging.info('%s %s: %d images of %s.', self.name, split, len(images), images[0].shape)
    return self._pixels[split]

  @functools.cached_property
  def image_shape(self) -> tuple[int, int, int]:
    """`(H, W, C)` of every image: the feature's, or the train split's if it leaves sizes open."""
    shape = tuple(self._builder.info.features[self.config.image_key].shape)
    if None in shape:
      return tuple(int(d) for d in self.pixels(self.config.train_split).shape[1:])
    return (*shape, 1) if len(shape) == 2 else shape

  @functools.cached_property
  def _channel_stats(self) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and standard deviation `[C]` of the train split scaled to [0, 1]."""
    pixels = self.pixels(self.config.train_split)
    values = np.arange(256) / 255
    # Exact and light: counts of each byte value, not a float copy of the split.
    counts = np.stack(
      [np.bincount(pixels[..., c].ravel(), minlength=256) for c in range(pixels.shape[-1])]
    )  # [C, 256]
    mean = counts @ values / counts.sum(-1)  # [C]
    std = np.sqrt(counts @ values**2 / counts.sum(-1) - mean**2)
    # A constant channel would divide by zero; one grey level keeps it finite.
    return mean.astype(np.float32), np.maximum(std, 1 / 255).astype(np.float32)

  def normalize(self, images: np.ndarray) -> np.ndarray:
    """uint8 images `[..., C]` as float32 in [0, 1], less the train mean, over the train std."""
    mean, std = self._channel_stats
    return (np.asarray(images, np.float32) / 255 - mean) / std

  @abc.abstractmethod
  def _per_image(self, split: str) -> dict[str, np.ndarray]:
    """The arrays batched beside the images of `split`, `{key: [N, ...]}` in split order."""

  def _batches(self, split: str, plan: BatchPlan) -> DenseBatches:
    shift = self.config.shift if plan.shuffle else 0

    def transform(rows: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
      images = shift_images(rows['images'], shift, rng) if shift else rows['images']
      return {**rows, 'images': self.normalize(images)}

    return DenseBatches(
      {'images': self.pixels(split), **self._per_image(split)},
      transform=transform,
      **plan.iterator_args(),
    )


class ImageData(ImageSource):
  """A prepared image classification dataset.

  Batches: `{'images': float32 [b, H, W, C], 'labels': int32 [b], 'index': int32 [b]}`.

  Attributes:
    name: the dataset, e.g. 'digits' or 'mnist'.
    config: the validated `config.dataset`.
    label_names: the class names; labels are indices into this list.
  """

  def __init__(
    self,
    builder: tfds.core.DatasetBuilder,
    config: ml_collections.FrozenConfigDict,
    label_names: list[str],
  ):
    """Wraps a prepared builder; `build` is the usual way to get one."""
    super().__init__(builder, config)
    self.label_names = list(label_names)
    self._labels: dict[str, np.ndarray] = {}

  def _keep(self, split: str, records: list[dict[str, Any]]) -> None:
    self._labels[split] = np.asarray([int(r[self.config.label_key]) for r in records], np.int32)

  def labels(self, split: str) -> np.ndarray:
    """The label of every image of `split`, int32 `[N]`, in split order."""
    self.pixels(split)
    return self._labels[split]

  def _per_image(self, split: str) -> dict[str, np.ndarray]:
    return {'labels': self.labels(split)}


def build(dataset_config: Any) -> ImageData:
  """Prepares the dataset into `dataset_config.data_dir` if it is not there yet.

  Args:
    dataset_config: the image classification `config.dataset` (see `default_config()`); missing
      fields take defaults.

  Returns:
    The dataset.

  Raises:
    ValueError: for a bad config field, or a folder `data.readers.image_folder` rejects.
    FileNotFoundError: if `folder` names no folder.
  """
  config = validate_config(dataset_config)
  folder_config = (
    image_folder.config_for_path(config.folder)  # Its config is the folder's.
    if config.name == 'image_folder'
    else None
  )
  builder = make_builder(
    config,
    OWN_BUILDERS,
    kind='image classification',
    examples=('cifar10', 'fashion_mnist', 'mnist'),
    builder_config=folder_config,
  )
  builder.download_and_prepare()
  check_image_feature(config, builder)
  features = builder.info.features
  name = builder.info.full_name.rsplit('/', 1)[0]
  class_labels = sorted(k for k, f in features.items() if isinstance(f, tfds.features.ClassLabel))
  if config.label_key not in class_labels:
    raise ValueError(
      f'config.dataset.label_key={config.label_key!r} is not a ClassLabel feature '
      f'of {name}; valid: {class_labels}.'
    )
  return ImageData(builder, config, list(features[config.label_key].names))
