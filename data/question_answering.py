"""Question answering over stories: `build(config.dataset, vocab_dir) -> QAData`, then batches.

    qa_data = question_answering.build(config.dataset, workdir)
    it = qa_data.batches('train', batch_size=32, shuffle=True, seed=0)
    batch = next(it)  # {'story': [B, M, L], 'query': [B, L], 'answer': [B], 'support': [B, M],
                      #  'index': [B]}

For end-to-end memory networks: each story sentence is one memory slot of up to `L` word ids,
the most recent `M = memory_size` sentences kept, oldest first, PAD_ID slots after them. Words
are lower-cased (`lowercase`) with punctuation dropped ("Where is Mary?" -> where is mary); the
answer is one vocabulary word. Datasets: Attend's `babi_tasks` (generated offline) and
`babi_files` (the original bAbI files from a local folder).
"""

import dataclasses
import functools
from typing import Any
import unicodedata

from absl import logging
import ml_collections
import numpy as np
import tensorflow_datasets as tfds

from data.batch_source import BatchPlan, BatchSource
from data.builders import babi
from data.pipeline import DenseBatches
from data.readers import babi_files
from data.schema import checked_fields
from data.sentences import split_sentences
from data.text import TextOptions
from data.tfds_reading import as_text, make_builder, read_split
from data.tokenizers import PAD_ID, UNK_ID, WordTokenizer, load_tokenizers, save_tokenizers

OWN_BUILDERS = {'babi_tasks': babi.BabiTasks, 'babi_files': babi_files.BabiFiles}


def default_config() -> ml_collections.ConfigDict:
  """Returns the question-answering `config.dataset` with every field at its default."""
  c = ml_collections.ConfigDict()
  c.name = 'babi_tasks'  # 'babi_tasks' (generated) or 'babi_files' (original files).
  c.builder_config = 'qa1_10k'  # babi_tasks: 'qa{1,2,16}_{1k,10k}'.
  c.data_dir = ''  # TFDS data dir to prepare datasets in; '' = ~/tensorflow_datasets.
  c.folder = ''  # babi_files: folder of qaN_*_{train,valid,test}.txt files.
  c.task = 1  # babi_files: N of the qaN files to read.
  c.memory_size = 50  # Most recent sentences kept per story (memory slots).
  c.sentence_length = 0  # Words kept per sentence; 0 = the longest in train.
  c.lowercase = True  # Lower-case the text.
  c.batch_size = 32  # Global training batch size (split evenly across hosts).
  c.eval_batch_size = 256  # Global evaluation batch size.
  c.train_split = 'train'  # Split for training and for building the vocabulary.
  c.eval_split = 'validation'  # Split evaluated during training.
  c.test_split = 'test'  # Split for the final evaluation.
  return c


_POSITIVE = ('task', 'memory_size', 'batch_size', 'eval_batch_size')
_NON_EMPTY = ('name', 'train_split', 'eval_split', 'test_split')


def validate_config(config: Any) -> ml_collections.FrozenConfigDict:
  """Checks `config.dataset` against the schema and fills fields it leaves out with defaults.

  Raises:
    ValueError: naming the first bad field and what it accepts.
  """
  merged = checked_fields(config, default_config(), positive=_POSITIVE, non_empty=_NON_EMPTY)
  if merged['name'] not in OWN_BUILDERS:
    raise ValueError(
      f'config.dataset.name={merged["name"]!r} is not a question-answering '
      f'dataset; valid: {sorted(OWN_BUILDERS)}.'
    )
  if merged['sentence_length'] < 0:
    raise ValueError(
      f'config.dataset.sentence_length must be 0 (the longest in train) or more '
      f'words, got {merged["sentence_length"]}.'
    )
  if merged['name'] == 'babi_files' and not merged['folder']:
    raise ValueError(
      "config.dataset.folder must name a folder when config.dataset.name is 'babi_files'."
    )
  return ml_collections.FrozenConfigDict(merged)


@dataclasses.dataclass(frozen=True)
class QAExample:
  """One question about a story, as the dataset gives it.

  Attributes:
    story: the story's sentences before the question, oldest first, not truncated.
    question: the question.
    answer: the answer, one word; '' for a researcher's own question (`typed_example`).
    supporting: indices into `story` of the sentences the answer follows from.
  """

  story: tuple[str, ...]
  question: str
  answer: str
  supporting: tuple[int, ...]


class QAData(BatchSource):
  """A prepared question-answering dataset with its word vocabulary.

  Batches: `{'story': int32 [b, M, L], 'query': int32 [b, L], 'answer': int32 [b], 'support':
  int32 [b, M], 'index': int32 [b]}`; without shuffling, the split's order. 'story' slot 0 is the
  oldest kept sentence, PAD_ID slots follow the real ones; 'answer' is a word id; 'support' is 1
  where a slot holds a supporting sentence. Rows of a partial last batch are zeros. A split with
  an answer outside the vocabulary raises ValueError.

  Attributes:
    name: the dataset, e.g. 'babi_tasks'.
    config: the validated `config.dataset`.
    tokenizer: the word tokenizer of stories, questions and answers.
    memory_size: M, memory slots (sentences) per story.
  """

  def __init__(
    self,
    builder: tfds.core.DatasetBuilder,
    config: ml_collections.FrozenConfigDict,
    tokenizer: WordTokenizer | None = None,
  ):
    """Wraps a prepared builder; `build` is the usual way to get one."""
    self.name = builder.info.full_name.rsplit('/', 1)[0]
    self.config = config
    self.tokenizer = tokenizer
    self.memory_size = config.memory_size
    self._builder = builder
    self._normalize = TextOptions(lowercase=config.lowercase, split_punctuation=True)
    self._examples: dict[str, list[QAExample]] = {}
    self._arrays: dict[str, dict[str, np.ndarray]] = {}

  def examples(self, split: str) -> list[QAExample]:
    """Every example of `split` ('train', 'validation', 'test' or a TFDS slice), cached."""
    if split not in self._examples:
      self._examples[split] = [
        QAExample(
          story=tuple(as_text(s) for s in r['story']),
          question=as_text(r['question']),
          answer=as_text(r['answer']),
          supporting=tuple(int(i) for i in r['supporting']),
        )
        for r in read_split(self._builder, split, self.name)
      ]
      logging.info('%s %s: %d questions.', self.name, split, len(self._examples[split]))
    return self._examples[split]

  def words(self, text: str) -> str:
    """`text` as the vocabulary sees it: lower-cased (`lowercase`), punctuation dropped."""
    return ' '.join(
      w
      for w in self._normalize(text).split()
      if not all(unicodedata.category(c).startswith('P') for c in w)
    )

  def answer_word(self, answer: str) -> str:
    """The vocabulary word of an answer (lower-cased with `lowercase`, punctuation kept, so
    bAbI's list answers such as 'apple,football' stay one word)."""
    return answer.lower() if self.config.lowercase else answer

  def texts(self, split: str) -> list[str]:
    """Every sentence, question and answer word of `split`, as the vocabulary sees them."""
    return [
      text
      for e in self.examples(split)
      for text in (*map(self.words, e.story), self.words(e.question), self.answer_word(e.answer))
    ]

  @functools.cached_property
  def sentence_length(self) -> int:
    """L, words per sentence: `config.sentence_length`, or 0 for the longest in train."""
    if self.config.sentence_length:
      return self.config.sentence_length
    return max(
      len(self.words(s).split())
      for e in self.examples(self.config.train_split)
      for s in (*e.story, e.question)
    )

  def _encode(self, text: str) -> np.ndarray:
    """The first L word ids of `text`, PAD_ID-padded: int32 `[L]`."""
    row = np.full(self.sentence_length, PAD_ID, np.int32)
    ids = self.tokenizer.encode(self.words(text))[: self.sentence_length]
    row[: len(ids)] = ids
    return row

  def arrays(self, split: str) -> dict[str, np.ndarray]:
    """The encoded examples of `split`: 'story' `[N, M, L]`, 'query' `[N, L]`, 'answer' `[N]`,
    'support' `[N, M]`, all int32 (see `batches`), computed once.

    Raises:
      ValueError: if an answer is not one word of the vocabulary.
    """
    if split not in self._arrays:
      examples, m, length = self.examples(split), self.memory_size, self.sentence_length
      encoded = [self.encode_example(e) for e in examples]
      truncated = sum(len(e.story) > m for e in examples)
      if truncated:
        logging.warning(
          '%s %s: %d of %d examples have stories of more than memory_size=%d '
          'sentences; kept the most recent %d of each.',
          self.name,
          split,
          truncated,
          len(examples),
          m,
          m,
        )
      self._arrays[split] = {
        **{
          key: np.asarray([e[key] for e in encoded], np.int32).reshape(len(examples), *shape)
          for key, shape in (('story', (m, length)), ('query', (length,)), ('support', (m,)))
        },
        'answer': self._answer_ids(split, examples),
      }
    return self._arrays[split]

  def encode_example(self, example: QAExample) -> dict[str, np.ndarray]:
    """One example's rows of `arrays` but its answer: 'story' `[M, L]` (its most recent M
    sentences, oldest first), 'query' `[L]` and 'support' `[M]`."""
    m = self.memory_size
    story = np.full((m, self.sentence_length), PAD_ID, np.int32)
    support = np.zeros(m, np.int32)
    first = max(0, len(example.story) - m)  # The oldest sentence kept.
    for slot, sentence in enumerate(example.story[first:]):
      story[slot] = self._encode(sentence)
    support[[i - first for i in example.supporting if i >= first]] = 1
    return dict(story=story, query=self._encode(example.question), support=support)

  @staticmethod
  def typed_example(text: str) -> QAExample:
    """A researcher's story and question as one example, with no answer: the sentences of
    `text`, the last of them the question.

    Raises:
      ValueError: unless `text` has a story and ends with a question.
    """
    sentences = split_sentences(text)
    if len(sentences) < 2 or not sentences[-1].endswith('?'):
      raise ValueError(
        'Give a story and then its question, ending with "?", e.g. "Mary went to the '
        'kitchen. John went to the garden. Where is Mary?".'
      )
    return QAExample(story=tuple(sentences[:-1]), question=sentences[-1], answer='', supporting=())

  def _answer_ids(self, split: str, examples: list[QAExample]) -> np.ndarray:
    ids = np.zeros(len(examples), np.int32)
    for n, e in enumerate(examples):
      encoded = self.tokenizer.encode(self.answer_word(e.answer))
      if len(encoded) != 1 or encoded[0] == UNK_ID:
        raise ValueError(
          f'Answer {e.answer!r} of split {split!r} of {self.name} is not a word '
          f'of the vocabulary built from config.dataset.train_split='
          f'{self.config.train_split!r}.'
        )
      ids[n] = encoded[0]
    return ids

  def answer_ids(self) -> list[int]:
    """Sorted word ids that occur as answers in the train split (to restrict an output layer)."""
    return sorted({int(i) for i in self.arrays(self.config.train_split)['answer']})

  def _batches(self, split: str, plan: BatchPlan) -> DenseBatches:
    return DenseBatches(self.arrays(split), **plan.iterator_args())


def build(dataset_config: Any, vocab_dir: str) -> QAData:
  """Prepares the dataset and its word vocabulary.

  The dataset is prepared into `dataset_config.data_dir` if it is not there yet. The vocabulary
  is loaded from `vocab_dir` when it holds one; otherwise it is built from the train split's
  sentences, questions and answers and saved there. The eval and test splits are encoded here,
  so an answer the vocabulary lacks is reported before training starts.

  Args:
    dataset_config: the question-answering `config.dataset` (see `default_config()`); missing
      fields take defaults.
    vocab_dir: directory for the vocabulary file (usually the workdir).

  Returns:
    The dataset.

  Raises:
    ValueError: for a bad config field, a malformed bAbI file (naming file and line), a saved
      vocabulary that is not a word vocabulary, or an eval/test answer outside the vocabulary.
    FileNotFoundError: if `folder` names no folder.
  """
  config = validate_config(dataset_config)
  file_config = (
    babi_files.config_for_folder(config.folder, config.task)
    if config.name == 'babi_files'
    else None
  )
  builder = make_builder(
    config, OWN_BUILDERS, kind='question answering', examples=(), builder_config=file_config
  )
  builder.download_and_prepare()
  data = QAData(builder, config)
  loaded = load_tokenizers(vocab_dir)
  if loaded:
    if loaded[0].kind != 'word':
      raise ValueError(
        f'The vocabulary saved in {vocab_dir} is a {loaded[0].kind!r} vocabulary, '
        'not a word vocabulary; use another directory.'
      )
    data.tokenizer = loaded[0]
    logging.info('Loaded the vocabulary from %s.', vocab_dir)
  else:
    data.tokenizer = WordTokenizer.build(data.texts(config.train_split))
    save_tokenizers(vocab_dir, data.tokenizer, data.tokenizer, dataset=data.name)
    logging.info(
      'Built a vocabulary of %d words from %s %s and saved it in %s.',
      data.tokenizer.vocab_size,
      data.name,
      config.train_split,
      vocab_dir,
    )
  for split in (config.eval_split, config.test_split):
    data.arrays(split)
  return data
