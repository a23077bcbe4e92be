"""Language-modelling data: `build(config.dataset, vocab_dir) -> LanguageData`, then batches.

    lm = language.build(config.dataset, workdir)
    it = lm.batches('train', batch_size=64, shuffle=True, seed=0)
    batch = next(it)  # {'inputs', 'targets', 'weights', 'support', 'index'}, each [B, seq_length]

A row holds `seq_length + 1` tokens: the model reads `inputs = row[:-1]` and predicts
`targets = row[1:]`; no BOS is added. Packing 'stream' joins a split's examples (EOS after
each) and cuts the stream into windows, every target weighted. Packing 'example' gives each
example a PAD-filled row of its own, weighted at its real targets or, when the dataset marks
answers (`mqar`), only where an answer is predicted; 'support' then says, per weighted target,
which input position holds the evidence, so attention maps can be checked against it (rows are
cut in data.language_rows).
Datasets: Attend's `mqar` and `key_sentence_docs` (prepared offline), a local UTF-8 file
(`text_file`), or any TFDS text dataset (tiny_shakespeare, lm1b), prepared by TFDS as usual.
Vocabulary 'pretrained' is a checkpoint's own tokenizer (data.pretrained_tokenizer, written by
convert.py), saved in the vocabulary directory by `config.init_from`; its rows are framed as the
checkpoint was trained, `[CLS] pieces [SEP]`, and its `[MASK]` is the mask id.
"""

from collections.abc import Callable
import functools
import textwrap
from typing import Any

from absl import logging
import ml_collections
import numpy as np

from data.batch_source import BatchPlan, BatchSource
from data.language_rows import LanguageBatches, example_rows, framed_rows, stream_rows
from data.language_sources import (
  TEXT_FILE,
  Example,
  feature_keys,
  read_text_file,
  read_tfds,
  split_text_file,
)
from data.schema import checked_fields
from data.text import TextOptions
from data.tfds_reading import make_builder
from data.tokenizers import (
  EOS_ID,
  VOCAB_KINDS,
  Tokenizer,
  build_tokenizer,
  load_tokenizers,
  save_tokenizers,
)

PACKINGS = ('example', 'stream')
MASK_TOKEN = '<mask>'
PRETRAINED = 'pretrained'  # vocab: the tokenizer.json of a converted checkpoint's workdir
VOCABS = (*VOCAB_KINDS, PRETRAINED)
# SentencePiece skips training sentences over 4192 bytes, and a text file is one long text.
_SPM_CHUNK_CHARS = 1000


def default_config() -> ml_collections.ConfigDict:
  """Returns the language-modelling `config.dataset` with every field at its default."""
  c = ml_collections.ConfigDict()
  c.name = 'mqar'  # 'mqar', 'key_sentence_docs', 'text_file' or a TFDS text dataset.
  c.builder_config = ''  # TFDS builder config; '' = the default.
  c.data_dir = ''  # TFDS data dir to prepare datasets in; '' = ~/tensorflow_datasets.
  c.text_path = ''  # text_file: a local UTF-8 plain-text file.
  c.text_key = 'text'  # Feature holding the text.
  c.answers_key = 'answers'  # Token positions that carry the loss; '' or absent = every token.
  c.support_key = 'support'  # Per answer, the position to attend to; '' or absent = none.
  c.vocab = 'word'  # 'char', 'word', 'sentencepiece' (from train) or 'pretrained'.
  c.vocab_size = 8000  # Word and SentencePiece vocabulary cap, 4 specials included.
  c.lowercase = False  # Lower-case the text.
  c.split_punctuation = False  # Put spaces around punctuation ('boy.' -> 'boy .').
  c.keep_whitespace = False  # Keep line breaks and runs of spaces (char-level text models).
  c.packing = 'example'  # 'example': one example per row; 'stream': joined, then cut.
  c.seq_length = 64  # Tokens per row fed to the model.
  c.eval_lengths = ()  # Other row lengths every evaluation also reports ('loss@256').
  c.held_out = 0.05  # text_file: the fraction for validation, then as much for test.
  c.batch_size = 64  # Global training batch size (split evenly across hosts).
  c.eval_batch_size = 256  # Global evaluation batch size.
  c.train_split = 'train'  # Split for training and for building the vocabulary.
  c.eval_split = 'validation'  # Split evaluated during training.
  c.test_split = 'test'  # Split for the final evaluation.
  return c


_POSITIVE = ('seq_length', 'batch_size', 'eval_batch_size')
_NON_EMPTY = ('name', 'text_key', 'train_split', 'eval_split', 'test_split')


def validate_config(config: Any) -> ml_collections.FrozenConfigDict:
  """Checks `config.dataset` against the schema and fills fields it leaves out with defaults.

  Raises:
    ValueError: naming the first bad field and what it accepts.
  """
  merged = checked_fields(config, default_config(), positive=_POSITIVE, non_empty=_NON_EMPTY)
  for field, choices in (('vocab', VOCABS), ('packing', PACKINGS)):
    if merged[field] not in choices:
      raise ValueError(
        f'config.dataset.{field}={merged[field]!r} is not valid; valid: {list(choices)}.'
      )
  lengths = merged['eval_lengths']
  if not all(type(n) is int and n > 0 for n in lengths) or len(set(lengths)) < len(lengths):
    raise ValueError(f'config.dataset.eval_lengths must be distinct positive ints, got {lengths}.')
  if not 0 < merged['held_out'] < 0.5:
    raise ValueError(f'config.dataset.held_out must be in (0, 0.5), got {merged["held_out"]}.')
  if merged['name'] == TEXT_FILE:
    if not merged['text_path']:
      raise ValueError(
        f'config.dataset.text_path must name a file when config.dataset.name is {TEXT_FILE!r}.'
      )
    if merged['packing'] != 'stream':
      raise ValueError(
        f"config.dataset.packing must be 'stream' when config.dataset.name is "
        f'{TEXT_FILE!r} (the file is one text), got {merged["packing"]!r}.'
      )
  return ml_collections.FrozenConfigDict(merged)


def text_options(config: ml_collections.FrozenConfigDict) -> TextOptions:
  """The preprocessing a validated `config.dataset` asks for, applied to every text before it is
  encoded (and written into an exported tokenizer.json: data.tokenizer_json)."""
  return TextOptions(
    lowercase=config.lowercase,
    split_punctuation=config.split_punctuation,
    keep_whitespace=config.keep_whitespace,
  )


class LanguageData(BatchSource):
  """A language-modelling dataset with its tokenizer.

  Batches: `{'inputs': int32 [b, L], 'targets': int32 [b, L], 'weights': float32 [b, L],
  'support': int32 [b, L], 'index': int32 [b]}`, `L = seq_length` (see `rows`); without
  shuffling, the rows' order. Rows of a partial last batch are PAD with weight 0 and support -1.

  Attributes:
    name: the dataset, e.g. 'mqar/default' or 'text_file'.
    config: the validated `config.dataset`.
    preprocess: the text preprocessing, `str -> str` (apply it to new text before encoding).
    tokenizer: the tokenizer (set by `build`).
    mask_id: the id of '<mask>' when built with `mask_token=True`, else None.
  """

  def __init__(
    self, name: str, config: ml_collections.FrozenConfigDict, read: Callable[[str], list[Example]]
  ):
    """Wraps a split reader; `build` is the usual way to get one."""
    self.name = name
    self.config = config
    self.preprocess = text_options(config)
    self.tokenizer: Tokenizer | None = None
    self.mask_id: int | None = None
    self._read = read
    self._examples: dict[str, list[Example]] = {}
    self._rows: dict[str, dict[str, np.ndarray]] = {}

  def at_length(self, seq_length: int) -> 'LanguageData':
    """The same examples and tokenizer cut into rows of `seq_length` tokens."""
    config = self.config.as_configdict()
    config.seq_length = seq_length
    other = LanguageData(self.name, ml_collections.FrozenConfigDict(config), self._read)
    other.tokenizer, other.mask_id, other._examples = self.tokenizer, self.mask_id, self._examples
    return other

  def examples(self, split: str) -> list[Example]:
    """Every example of `split` ('train', 'validation', 'test', or a TFDS slice), cached."""
    if split not in self._examples:
      self._examples[split] = self._read(split)
      logging.info('%s %s: %d examples.', self.name, split, len(self._examples[split]))
    return self._examples[split]

  def texts(self, split: str) -> list[str]:
    """The raw texts of `split`, e.g. to show samples."""
    return [e.text for e in self.examples(split)]

  def _ids(self, example: Example) -> list[int]:
    return self.tokenizer.encode(self.preprocess(example.text))

  def rows(self, split: str) -> dict[str, np.ndarray]:
    """The split's rows, cached.

    Returns:
      `{'tokens': int32 [N, seq_length + 1], 'weights': float32 [N, seq_length] (1 where target
      t = tokens[t + 1] counts in the loss), 'support': int32 [N, seq_length] (the input position
      that holds target t's evidence, -1 = none), 'index': int32 [N] (the example for 'example'
      packing, the window for 'stream')}`.

    Raises:
      ValueError: if the split is too short for one window, has no examples, or marks
        answer or support positions outside its examples.
    """
    if split not in self._rows:
      rows = self._cut(split)
      rows['index'] = np.arange(len(rows['tokens']), dtype=np.int32)
      self._rows[split] = rows
    return self._rows[split]

  def _cut(self, split: str) -> dict[str, np.ndarray]:
    """The split's rows, cut as the packing and the tokenizer say (data.language_rows)."""
    length, tokenizer, where = self.config.seq_length, self.tokenizer, (self.name, split)
    if self.config.packing != 'stream':
      return example_rows(self.examples(split), self._ids, length, *where)
    if tokenizer.kind != PRETRAINED:
      ids = (i for e in self.examples(split) for i in [*self._ids(e), EOS_ID])
      return stream_rows(np.fromiter(ids, np.int32), length, *where)
    pieces = lambda e: tokenizer.encode_pieces(self.preprocess(e.text))
    if self.mask_id is not None:  # a masked LM reads windows as BERT was pretrained on them
      ids = np.fromiter((i for e in self.examples(split) for i in pieces(e)), np.int32)
      return framed_rows(ids, length, tokenizer.bos_id, tokenizer.eos_id, *where)
    # A pretrained decoder reads its own pieces, each text closed by its end token if any.
    end = [] if tokenizer.eos_id is None else [tokenizer.eos_id]
    ids = (i for e in self.examples(split) for i in [*pieces(e), *end])
    return stream_rows(np.fromiter(ids, np.int32), length, *where)

  def _batches(self, split: str, plan: BatchPlan) -> 'LanguageBatches':
    return LanguageBatches(self.rows(split), **plan.iterator_args())


def _own_builders() -> dict[str, type]:
  """Attend's own text datasets' builders, by name. Their modules import TFDS (about a second of
  CPU), so they are imported only for a dataset TFDS reads: a text file or a converted
  checkpoint's workdir (prompt.py, generate.py) never needs them."""
  from data.builders import key_sentence, mqar  # pylint: disable=g-import-not-at-top

  return {'key_sentence_docs': key_sentence.KeySentenceDocs, 'mqar': mqar.Mqar}


def build(dataset_config: Any, vocab_dir: str, *, mask_token: bool = False) -> LanguageData:
  """Prepares the dataset and its tokenizer.

  The dataset is prepared into `dataset_config.data_dir` if it is not there yet. The tokenizer
  is loaded from `vocab_dir` when it holds one (so eval and resumed runs use exactly the
  training vocabulary); otherwise it is built from the train split and saved there.

  Args:
    dataset_config: the language-modelling `config.dataset` (see `default_config()`); missing
      fields take defaults.
    vocab_dir: directory for the vocabulary files (usually the workdir).
    mask_token: give the vocabulary a '<mask>' token (the last id when added), for masked
      language models; a loaded vocabulary without one gains it and is saved again. A
      pretrained tokenizer's own [MASK] serves instead.

  Returns:
    The dataset.

  Raises:
    ValueError: for a bad config field, mask_token with a SentencePiece vocabulary, a saved
      vocabulary of another kind, or vocab 'pretrained' without a saved pretrained tokenizer.
    FileNotFoundError: if `text_path` names no file.
  """
  config = validate_config(dataset_config)
  if mask_token and config.vocab == 'sentencepiece':
    raise ValueError(
      'mask_token=True (masked language modelling) needs config.dataset.vocab='
      "'char' or 'word', got 'sentencepiece'."
    )
  data = _language_data(config)
  loaded = load_tokenizers(vocab_dir)
  tokenizer = _saved_tokenizer(config, loaded[0], vocab_dir) if loaded else _new_tokenizer(data)
  if tokenizer.kind == PRETRAINED:  # the checkpoint's own [MASK]: nothing to add or save
    if mask_token and tokenizer.mask_id is None:
      raise ValueError(
        "config.dataset.vocab='pretrained': the checkpoint's tokenizer has no "
        '[MASK] token, so it cannot serve a masked language model.'
      )
    data.tokenizer, data.mask_id = tokenizer, tokenizer.mask_id if mask_token else None
    return data
  data.tokenizer = tokenizer
  if mask_token and MASK_TOKEN not in tokenizer.vocab:
    data.tokenizer = type(tokenizer)([*tokenizer.vocab, MASK_TOKEN])
  if data.tokenizer is not tokenizer or not loaded:
    save_tokenizers(vocab_dir, data.tokenizer, data.tokenizer, dataset=data.name)
  if mask_token:
    data.mask_id = data.tokenizer.vocab.index(MASK_TOKEN)
  return data


def _language_data(config: ml_collections.FrozenConfigDict) -> LanguageData:
  """The dataset a validated `config.dataset` names, with no tokenizer yet: a text file cut into
  its splits, or a TFDS dataset prepared into `config.data_dir` if it is not there yet.

  Raises:
    ValueError: for an unknown dataset, or features the dataset does not have.
    FileNotFoundError: if `text_path` names no file.
  """
  if config.name == TEXT_FILE:
    texts = split_text_file(config)
    return LanguageData(TEXT_FILE, config, functools.partial(read_text_file, texts))
  builder = make_builder(
    config,
    _own_builders(),
    kind='text',
    extra_names=[TEXT_FILE],
    examples=('lm1b', 'tiny_shakespeare'),
  )
  builder.download_and_prepare()
  name = builder.info.full_name.rsplit('/', 1)[0]
  keys = feature_keys(config, builder.info.features, name, default_config())
  return LanguageData(name, config, functools.partial(read_tfds, builder, config.text_key, *keys))


def _saved_tokenizer(
  config: ml_collections.FrozenConfigDict, tokenizer: Tokenizer, vocab_dir: str
) -> Tokenizer:
  """The tokenizer saved in `vocab_dir`, if it is of the kind `config.dataset.vocab` names.

  Raises:
    ValueError: if it is of another kind.
  """
  if tokenizer.kind != config.vocab:
    raise ValueError(
      f'config.dataset.vocab={config.vocab!r} but the vocabulary saved in '
      f'{vocab_dir} is {tokenizer.kind!r}; use that or another directory.'
    )
  logging.info('Loaded the vocabulary from %s.', vocab_dir)
  return tokenizer


def _new_tokenizer(data: LanguageData) -> Tokenizer:
  """A tokenizer of the kind `config.dataset.vocab` names, built from the train split's texts.

  Raises:
    ValueError: for vocab 'pretrained', whose tokenizer only a checkpoint can give.
  """
  config = data.config
  if config.vocab == PRETRAINED:
    raise ValueError(
      "config.dataset.vocab='pretrained' reads the checkpoint's tokenizer from "
      'config.init_from, which holds none; set it to a workdir written by '
      'python convert.py.'
    )
  texts = [data.preprocess(t) for t in data.texts(config.train_split)]
  if config.vocab == 'sentencepiece':
    texts = [chunk for t in texts for chunk in textwrap.wrap(t, _SPM_CHUNK_CHARS)]
  tokenizer = build_tokenizer(config.vocab, texts, config.vocab_size)
  logging.info(
    'Built a %s vocabulary of %d from %s %s.',
    config.vocab,
    tokenizer.vocab_size,
    data.name,
    config.train_split,
  )
  return tokenizer
