"""`image_folder`: a local folder of images, one subfolder per class, for image classification.

Two layouts (TFDS's ImageFolder's and the plain one):

    root/SPLIT/CLASS/*.png   SPLIT in train, validation, test; the splits as given.
    root/CLASS/*.png         held out per class by a fixed seed: 10% to validation and 10% to
                             test (one each from a class of 3 to 14 images, none from a class
                             of fewer), the rest to train.

The layout is the first when every subfolder of root is named after a split and one is 'train'.
A split without images (no test/ folder, or only classes of 1-2 images) is left out.
Files are read with PIL (PNG, JPEG, or any format it opens); 'L' images keep their one channel
and all others are converted to RGB, so 'RGBA' or palette images become 3 channels. Every image
must have the same size and channel count. Files and folders whose names start with '.' are
skipped (hidden files, .DS_Store), as are files directly in root (a README, a license) and
folders inside a class folder.

Feature 'image' is a uint8 Tensor `[H, W, C]`, 'label' a ClassLabel of the sorted class folder
names. The builder config is named after the folder and a hash of its file names and contents
(see `config_for_path`), so an edited folder is prepared afresh.
"""

import dataclasses
import functools
import hashlib
import io
import re

from etils import epath
import numpy as np
from PIL import Image
import tensorflow_datasets as tfds

SPLITS = ('train', 'validation', 'test')
HOLDOUT_FRACTION = 0.1  # Of each class, for validation and again for test (plain layout).
_SEED = 0


@dataclasses.dataclass(eq=False)
class ImageFolderConfig(tfds.core.BuilderConfig):
  """The folder.

  Attributes:
    path: the root folder.
  """

  path: str = ''


@dataclasses.dataclass(frozen=True)
class Folder:
  """What a folder holds, checked.

  Attributes:
    class_names: the class folder names, sorted; labels index into them.
    splits: `{split: [(file, label), ...]}` for each of 'train', 'validation' and 'test' that
      has images.
    shape: the shape every image has once read, `(H, W, C)`.
    digest: a hash of the images' names and contents.
  """

  class_names: tuple[str, ...]
  splits: dict[str, list[tuple[epath.Path, int]]]
  shape: tuple[int, int, int]
  digest: str


def _visible(folder: epath.Path, dirs: bool) -> list[epath.Path]:
  return sorted(p for p in folder.iterdir() if not p.name.startswith('.') and p.is_dir() == dirs)


def _class_files(split_root: epath.Path) -> dict[str, list[epath.Path]]:
  """`{class name: its files}` under `split_root`, each class folder checked to hold files."""
  classes = {folder.name: _visible(folder, dirs=False) for folder in _visible(split_root, True)}
  for name, files in classes.items():
    if not files:
      raise ValueError(
        f'config.dataset.folder: class folder {str(split_root / name)!r} holds no '
        'image; remove it or add images.'
      )
  return classes


def _held_out(classes: dict[str, list[epath.Path]]) -> dict[str, dict[str, list[epath.Path]]]:
  """The plain layout's classes split per class by a fixed seed (see the module docstring)."""
  rng = np.random.default_rng(_SEED)
  splits = {split: {} for split in SPLITS}
  for name, files in classes.items():
    order = rng.permutation(len(files))
    holdout = max(1, round(HOLDOUT_FRACTION * len(files))) if len(files) >= 3 else 0
    parts = {
      'validation': order[:holdout],
      'test': order[holdout : 2 * holdout],
      'train': order[2 * holdout :],
    }
    for split, part in parts.items():
      splits[split][name] = [files[i] for i in sorted(part)]
  return splits


def _shape(file: epath.Path, data: bytes) -> tuple[int, int, int]:
  """The `(H, W, C)` of the image `data` read from `file`, once converted as it will be."""
  try:
    with Image.open(io.BytesIO(data)) as image:  # Reads the header only.
      return image.height, image.width, 1 if image.mode == 'L' else 3
  except OSError:  # PIL's UnidentifiedImageError is an OSError.
    raise ValueError(
      f'config.dataset.folder: {str(file)!r} is not an image PIL can open; '
      'remove it or convert it to PNG or JPEG.'
    ) from None


def read_folder(path: str) -> Folder:
  """Lists, checks and hashes the images of the folder at `path`.

  Raises:
    FileNotFoundError: if there is no folder at `path`.
    ValueError: for a folder without class folders, an empty class folder, a file PIL cannot
      open, images of two sizes or channel counts, or a class without train images.
  """
  root = epath.Path(path).expanduser()
  if not root.is_dir():
    raise FileNotFoundError(f'config.dataset.folder: no such folder: {path!r}.')
  names = {p.name for p in _visible(root, dirs=True)}
  if 'train' in names and names <= set(SPLITS):
    splits = {split: _class_files(root / split) if split in names else {} for split in SPLITS}
  else:
    splits = _held_out(_class_files(root))
  class_names = tuple(sorted({name for classes in splits.values() for name in classes}))
  if not class_names:
    raise ValueError(
      f'config.dataset.folder {path!r} has no class folders; expected '
      'root/CLASS/image files or root/SPLIT/CLASS/image files.'
    )
  missing = [name for name in class_names if not splits['train'].get(name)]
  if missing:
    raise ValueError(
      f'config.dataset.folder {path!r}: class(es) {missing} have no train image; '
      'add some under train/.'
    )
  digest = hashlib.sha256()
  shapes = {}  # One file per shape, to name in the error.
  for file in sorted(f for classes in splits.values() for files in classes.values() for f in files):
    data = file.read_bytes()
    digest.update(str(file.relative_to(root)).encode() + b'\0' + data)
    shapes.setdefault(_shape(file, data), file)
  if len(shapes) > 1:
    (first, a), (second, b) = list(shapes.items())[:2]
    raise ValueError(
      f'config.dataset.folder: images must share one size and channel count, but '
      f'{str(a)!r} is {first} and {str(b)!r} is {second} (height, width, channels).'
    )
  labels = {name: i for i, name in enumerate(class_names)}
  # TFDS cannot write an empty split; a split without images is left out.
  return Folder(
    class_names,
    {
      split: [(file, labels[name]) for name, files in classes.items() for file in files]
      for split, classes in splits.items()
      if any(classes.values())
    },
    next(iter(shapes)),
    digest.hexdigest()[:12],
  )


def config_for_path(path: str) -> ImageFolderConfig:
  """A config named `<folder name>_<hash of file names and contents>`, the folder checked.

  Raises:
    FileNotFoundError: if there is no folder at `path`.
    ValueError: for a folder `read_folder` rejects, before anything is prepared.
  """
  folder = read_folder(path)
  root = epath.Path(path).expanduser()
  stem = re.sub(r'[^a-z0-9]+', '_', root.name.lower()).strip('_') or 'images'
  return ImageFolderConfig(
    name=f'{stem}_{folder.digest}', path=str(root), description=f'Images from {root}.'
  )


def read_image(file: epath.Path) -> np.ndarray:
  """The image in `file` as uint8 `[H, W, C]`: C = 1 for an 'L' image, else RGB's 3.

  Raises:
    ValueError: naming the file, if its pixels cannot be decoded (e.g. a truncated file).
  """
  try:
    with Image.open(file) as image:
      if image.mode == 'L':
        return np.asarray(image)[:, :, None]
      return np.asarray(image.convert('RGB'))
  except OSError as error:  # only the header was checked when the folder was listed
    raise ValueError(
      f'config.dataset.folder: {str(file)!r} cannot be decoded ({error}); '
      'remove it or replace it with a complete image.'
    ) from None


class ImageFolder(tfds.core.GeneratorBasedBuilder):
  """A local folder of class folders of images; build its config with `config_for_path`."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.'}

  @functools.cached_property
  def _folder(self) -> Folder:
    """The folder's listing: `_info` needs the class names and shape before the splits."""
    config = self.builder_config
    if config is None or not config.path:
      raise ValueError(
        'image_folder needs a config from data.readers.image_folder.config_for_path(path).'
      )
    return read_folder(config.path)

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
      builder=self,
      description=__doc__,
      # A Tensor, not an Image feature: encoding Images needs TensorFlow.
      features=tfds.features.FeaturesDict(
        {
          'image': tfds.features.Tensor(shape=self._folder.shape, dtype=np.uint8),
          'label': tfds.features.ClassLabel(names=self._folder.class_names),
        }
      ),
      supervised_keys=('image', 'label'),
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # The folder is local.
    return {split: self._generate_examples(files) for split, files in self._folder.splits.items()}

  def _generate_examples(self, files: list[tuple[epath.Path, int]]):
    root = epath.Path(self.builder_config.path)
    for file, label in files:
      yield str(file.relative_to(root)), {'image': read_image(file), 'label': label}
