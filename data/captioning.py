"""Image captioning data: `build(config.dataset, vocab_dir) -> CaptionData`, then batches.

    captions = captioning.build(config.dataset, workdir)
    it = captions.batches('train', batch_size=64, shuffle=True, seed=0)
    batch = next(it)  # {'images': float32 [B, H, W, C], 'targets': int32 [B, L + 1], 'index': [B]}

Targets are word ids (`WordTokenizer`, built from the train captions) then EOS, padded with PAD_ID
to `max_length + 1`; the captioning task prepends BOS for teacher forcing. Images are read and
normalized as in `data.image_classification` (`ImageSource`). A caption feature may be one Text or a
Sequence of Text: the first text is the training target, all of them are references for evaluation.
Datasets: Attend's `digit_captions` (prepared offline), or a TFDS captioning dataset whose images
share one shape; TFDS's coco_captions needs TensorFlow and images of one size.
"""

import dataclasses
from typing import Any

from absl import logging
import ml_collections
import numpy as np
import tensorflow_datasets as tfds

from data.builders import digit_captions
from data.image_classification import ImageSource, check_image_feature, check_shift
from data.schema import checked_fields
from data.text import TextOptions
from data.tfds_reading import as_text, make_builder
from data.tokenizers import EOS_ID, PAD_ID, WordTokenizer, load_tokenizers, save_tokenizers

OWN_BUILDERS = {'digit_captions': digit_captions.DigitCaptions}


def default_config() -> ml_collections.ConfigDict:
  """Returns the captioning `config.dataset` with every field at its default."""
  c = ml_collections.ConfigDict()
  c.name = 'digit_captions'  # 'digit_captions' or a TFDS captioning dataset.
  c.builder_config = ''  # TFDS builder config; '' = the default ('small' for tests).
  c.data_dir = ''  # TFDS data dir to prepare datasets in; '' = ~/tensorflow_datasets.
  c.image_key = 'image'  # Feature holding the image (uint8 [H, W] or [H, W, C]).
  c.caption_key = 'caption'  # Feature holding the caption: Text, or a Sequence of Text.
  c.boxes_key = 'boxes'  # Int [n, 4] (top, left, bottom, right) boxes; ''/absent = none.
  c.lowercase = True  # Lower-case the captions.
  c.split_punctuation = True  # Put spaces around punctuation ('dog.' -> 'dog .').
  c.vocab_size = 10000  # Word vocabulary cap, 4 specials included, built from train.
  c.max_length = 16  # Caption words kept, EOS excluded; longer ones are truncated.
  c.shift = 0  # Training: translate by up to this many pixels, zero-filled.
  c.batch_size = 64  # Global training batch size (split evenly across hosts).
  c.eval_batch_size = 256  # Global evaluation batch size.
  c.train_split = 'train'  # Split for training, the vocabulary and the normalization.
  c.eval_split = 'validation'  # Split evaluated during training.
  c.test_split = 'test'  # Split for the final evaluation.
  return c


_POSITIVE = ('max_length', 'batch_size', 'eval_batch_size')
_NON_EMPTY = ('name', 'image_key', 'caption_key', 'train_split', 'eval_split', 'test_split')


def validate_config(config: Any) -> ml_collections.FrozenConfigDict:
  """Checks `config.dataset` against the schema and fills fields it leaves out with defaults.

  Raises:
    ValueError: naming the first bad field and what it accepts.
  """
  merged = checked_fields(config, default_config(), positive=_POSITIVE, non_empty=_NON_EMPTY)
  check_shift(merged['shift'])
  return ml_collections.FrozenConfigDict(merged)


@dataclasses.dataclass(frozen=True)
class CaptionExample:
  """The text and boxes of one image.

  Attributes:
    caption: the training target, preprocessed.
    references: every caption of the image, preprocessed, the target first.
    boxes: `(top, left, bottom, right)` pixel boxes in the dataset's order (digit_captions:
      one per caption word); empty when the dataset has none.
  """

  caption: str
  references: tuple[str, ...]
  boxes: tuple[tuple[int, int, int, int], ...]


class CaptionData(ImageSource):
  """A prepared captioning dataset with its word tokenizer.

  Batches: `{'images': float32 [b, H, W, C], 'targets': int32 [b, max_length + 1], 'index':
  int32 [b]}`; the rows of a partial last batch have PAD_ID targets.

  Attributes:
    name: the dataset, e.g. 'digit_captions/small'.
    config: the validated `config.dataset`.
    preprocess: the caption preprocessing, `str -> str`.
    tokenizer: the word tokenizer (set by `build`).
  """

  def __init__(
    self, builder: tfds.core.DatasetBuilder, config: ml_collections.FrozenConfigDict, boxes_key: str
  ):
    """Wraps a prepared builder; `build` is the usual way to get one."""
    super().__init__(builder, config)
    self.preprocess = TextOptions(
      lowercase=config.lowercase, split_punctuation=config.split_punctuation
    )
    self.tokenizer: WordTokenizer | None = None
    self._boxes_key = boxes_key
    self._examples: dict[str, list[CaptionExample]] = {}
    self._targets: dict[str, np.ndarray] = {}

  def _keep(self, split: str, records: list[dict[str, Any]]) -> None:
    out = []
    for i, record in enumerate(records):
      value = record[self.config.caption_key]
      texts = [value] if isinstance(value, (bytes, str)) else list(value)
      if not texts:
        raise ValueError(f'Example {i} of split {split!r} of {self.name} has no caption.')
      references = tuple(self.preprocess(as_text(t)) for t in texts)
      boxes = (
        tuple(tuple(int(v) for v in box) for box in record[self._boxes_key])
        if self._boxes_key
        else ()
      )
      out.append(CaptionExample(references[0], references, boxes))
    self._examples[split] = out

  def examples(self, split: str) -> list[CaptionExample]:
    """Every example of `split`, in split order (the order of `pixels(split)`), cached."""
    self.pixels(split)
    return self._examples[split]

  def encode(self, caption: str) -> tuple[np.ndarray, bool]:
    """The target row of a preprocessed caption and whether it was cut.

    Returns:
      `(ids, cut)`: int32 `[max_length + 1]`, the first `max_length` word ids then EOS, padded
      with PAD_ID; `cut` says the caption had more words.
    """
    ids = self.tokenizer.encode(caption)
    limit = self.config.max_length
    row = np.full(limit + 1, PAD_ID, np.int32)
    row[: min(len(ids), limit)] = ids[:limit]
    row[min(len(ids), limit)] = EOS_ID
    return row, len(ids) > limit

  def targets(self, split: str) -> np.ndarray:
    """The target rows of every example of `split`, int32 `[N, max_length + 1]`, cached."""
    if split not in self._targets:
      rows, cut = zip(*(self.encode(e.caption) for e in self.examples(split)))
      if any(cut):
        logging.warning(
          '%s %s: truncated %d of %d captions to max_length=%d words.',
          self.name,
          split,
          sum(cut),
          len(cut),
          self.config.max_length,
        )
      self._targets[split] = np.stack(rows)
    return self._targets[split]

  def _per_image(self, split: str) -> dict[str, np.ndarray]:
    return {'targets': self.targets(split)}


def _text_keys(config: ml_collections.FrozenConfigDict, builder: tfds.core.DatasetBuilder) -> str:
  """Checks the caption and boxes features; returns the boxes feature ('' = none)."""
  features = builder.info.features
  name = builder.info.full_name.rsplit('/', 1)[0]
  texts = sorted(
    k
    for k, f in features.items()
    if isinstance(f, tfds.features.Text)
    or (isinstance(f, tfds.features.Sequence) and isinstance(f.feature, tfds.features.Text))
  )
  if config.caption_key not in texts:
    raise ValueError(
      f'config.dataset.caption_key={config.caption_key!r} is not a Text or '
      f'Sequence of Text feature of {name}; valid: {texts}.'
    )
  key = config.boxes_key
  if key and key not in features:
    if key != default_config().boxes_key:
      raise ValueError(
        f'config.dataset.boxes_key={key!r} is not a feature of {name}; valid: '
        f"{sorted(features)} or '' (none)."
      )
    return ''
  if key and not (
    features[key].shape[1:] == (4,) and np.issubdtype(features[key].np_dtype, np.integer)
  ):
    raise ValueError(
      f'config.dataset.boxes_key={key!r} is a {features[key]!r} feature of '
      f"{name}; valid: integer pixel boxes of shape [n, 4] or '' (none)."
    )
  return key


def build(dataset_config: Any, vocab_dir: str) -> CaptionData:
  """Prepares the dataset and its word tokenizer.

  The dataset is prepared into `dataset_config.data_dir` if it is not there yet. The tokenizer
  is loaded from `vocab_dir` when it holds one (so eval and resumed runs use exactly the training
  vocabulary); otherwise it is built from every caption of the train split and saved there.

  Args:
    dataset_config: the captioning `config.dataset` (see `default_config()`); missing fields
      take defaults.
    vocab_dir: directory for the vocabulary file (usually the workdir).

  Returns:
    The dataset.

  Raises:
    ValueError: for a bad config field, a dataset whose builder needs TensorFlow, or a saved
      vocabulary that is not a word vocabulary.
  """
  config = validate_config(dataset_config)
  try:
    builder = make_builder(
      config, OWN_BUILDERS, kind='image captioning', examples=('coco_captions',)
    )
  except ModuleNotFoundError as e:  # coco_captions' features, for one, are made with TensorFlow.
    if (e.name or '').split('.')[0] != 'tensorflow':
      raise
    raise ValueError(
      f'config.dataset.name={config.name!r} needs TensorFlow, which is not '
      "installed; install it or use 'digit_captions'."
    ) from None
  builder.download_and_prepare()
  check_image_feature(config, builder)
  data = CaptionData(builder, config, _text_keys(config, builder))
  loaded = load_tokenizers(vocab_dir)
  if loaded:
    if loaded[0].kind != 'word':
      raise ValueError(
        f'The vocabulary saved in {vocab_dir} is a {loaded[0].kind!r} vocabulary, '
        'not a word vocabulary; use another directory.'
      )
    data.tokenizer = loaded[0]
    logging.info('Loaded the vocabulary from %s.', vocab_dir)
    return data
  train = data.examples(config.train_split)
  data.tokenizer = WordTokenizer.build(
    (r for e in train for r in e.references), max_size=config.vocab_size
  )
  save_tokenizers(vocab_dir, data.tokenizer, data.tokenizer, dataset=data.name)
  logging.info(
    'Built a vocabulary of %d words from %s %s and saved it in %s.',
    data.tokenizer.vocab_size,
    data.name,
    config.train_split,
    vocab_dir,
  )
  return data
