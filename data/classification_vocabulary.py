"""A classification run's word vocabulary, saved beside its label names in the vocabulary directory
(usually the workdir), so that eval and resumed runs read texts with exactly the training ids.

A directory holds either a classification run's vocabulary (used if its labels are the dataset's),
or a pretraining run's (data.language; no labels), adopted for fine-tuning and saved again with the
labels. A directory with none gets one built from the train split.
"""

from collections.abc import Iterable
import json

from absl import logging
from etils import epath

from data.pretrained_tokenizer import PretrainedTokenizer
from data.tokenizers import MANIFEST, WordTokenizer, load_tokenizers, save_tokenizers


def saved_vocabulary(
  vocab_dir: str, name: str, label_names: list[str]
) -> WordTokenizer | PretrainedTokenizer | None:
  """The vocabulary saved in `vocab_dir` for dataset `name`, or None if it holds none.

  Raises:
    ValueError: if the saved vocabulary is not a word vocabulary or was saved for other labels
      (one saved without labels, e.g. by pretraining, is adopted).
  """
  loaded = load_tokenizers(vocab_dir)
  if not loaded:
    return None
  saved = json.loads((epath.Path(vocab_dir) / MANIFEST).read_text()).get('labels')
  # A pretrained checkpoint's tokenizer (data.pretrained_tokenizer) stands in for a word
  # vocabulary.
  if loaded[0].kind not in ('word', 'pretrained') or saved not in (None, label_names):
    raise ValueError(
      f'The vocabulary saved in {vocab_dir} is not a word vocabulary for labels '
      f'{label_names} (it has {loaded[0].kind!r}, {saved}); use another '
      'directory.'
    )
  if saved is None:  # A pretraining run's vocabulary (data.language), copied for fine-tuning.
    save_tokenizers(vocab_dir, loaded[0], loaded[0], dataset=name, labels=label_names)
  logging.info('Loaded the vocabulary from %s.', vocab_dir)
  return loaded[0]


def new_vocabulary(
  sentences: Iterable[str],
  vocab_dir: str,
  *,
  name: str,
  split: str,
  label_names: list[str],
  max_size: int,
) -> WordTokenizer:
  """A word vocabulary of at most `max_size` built from `sentences` (those of split `split` of
  dataset `name`), saved in `vocab_dir` with the label names."""
  tokenizer = WordTokenizer.build(sentences, max_size=max_size)
  save_tokenizers(vocab_dir, tokenizer, tokenizer, dataset=name, labels=label_names)
  logging.info(
    'Built a vocabulary of %d words from %s %s and saved it in %s.',
    tokenizer.vocab_size,
    name,
    split,
    vocab_dir,
  )
  return tokenizer
