"""`babi_files`: the original bAbI files of one task from a local folder, read unchanged.

E.g. the folder `tasks_1-20_v1-2/en-10k/` of the bAbI download, with `qaN_*_train.txt`,
`qaN_*_test.txt` and, optionally, `qaN_*_valid.txt`. Every line is `ID text`; ID 1 starts a new
story and IDs then count up by one. A statement line holds a sentence; a question line holds
`question<TAB>answer<TAB>supporting IDs` (space separated), the IDs naming earlier statements of
its story. Each question is one example with the same features as `babi_tasks`: the story's
statements before it (question lines are not statements), the question, the answer, and the
supporting IDs as 0-based indices into those statements.

Without a valid file, validation is the last 10% of the train file's stories (at least one).
The builder config is named after the folder, the task and a hash of the files' bytes (see
`config_for_folder`), so edited files are prepared afresh; every file is parsed there, so a
malformed line raises before anything is prepared.
"""

import dataclasses
import hashlib
import re

from etils import epath
import numpy as np
import tensorflow_datasets as tfds

from data.builders.babi import qa_info

VALIDATION_FRACTION = 0.1
_FILE_SPLITS = {'train': 'train', 'valid': 'validation', 'test': 'test'}


@dataclasses.dataclass(eq=False)
class BabiFilesConfig(tfds.core.BuilderConfig):
  """The task's files.

  Attributes:
    files: `((split, path), ...)`; 'validation' only when the folder has a valid file.
  """

  files: tuple[tuple[str, str], ...] = ()


def task_files(folder: str, task: int) -> dict[str, epath.Path]:
  """`{split: path}` of the `qa{task}_*_{train,valid,test}.txt` files in `folder`.

  Raises:
    FileNotFoundError: if `folder` is not a folder.
    ValueError: if the train or test file is missing, or a split has several files.
  """
  root = epath.Path(folder).expanduser()
  if not root.is_dir():
    raise FileNotFoundError(f'config.dataset.folder: no such folder: {folder!r}.')
  files = {}
  for suffix, split in _FILE_SPLITS.items():
    found = sorted(root.glob(f'qa{task}_*_{suffix}.txt'))
    if len(found) > 1:
      raise ValueError(
        f'config.dataset.task={task} matches several {suffix} files in {folder}: '
        f'{[p.name for p in found]}.'
      )
    if found:
      files[split] = found[0]
  if 'train' not in files or 'test' not in files:
    tasks = sorted(
      {
        int(m.group(1))
        for p in root.glob('qa*_*_train.txt')
        if (m := re.match(r'qa(\d+)_', p.name))
      }
    )
    raise ValueError(
      f'config.dataset.task={task} has no qa{task}_*_train.txt and '
      f'qa{task}_*_test.txt in {folder}; tasks there: {tasks}.'
    )
  return files


def read_stories(path: epath.Path) -> list[list[dict]]:
  """The examples of a bAbI file, grouped by story (stories without a question are dropped).

  Returns:
    One list per story of `{'story': [str], 'question', 'answer', 'supporting': [int]}`.

  Raises:
    ValueError: naming the file and line of a line without an ID, an ID out of sequence, a
      question without a tab-separated answer and supporting IDs, or a supporting ID that is
      not an earlier statement of its story.
  """
  stories = []
  statements, line_to_statement, last_id = [], {}, 0
  for number, line in enumerate(path.read_text(encoding='utf-8').splitlines(), start=1):
    where = f'{path}, line {number}'
    if not line.strip():
      continue
    match = re.fullmatch(r'\s*(\d+) (.*)', line)
    if not match:
      raise ValueError(f"{where}: expected 'ID text', got {line!r}.")
    line_id, text = int(match.group(1)), match.group(2)
    if line_id == 1:
      stories.append([])
      statements, line_to_statement = [], {}
    elif line_id != last_id + 1:
      raise ValueError(
        f'{where}: ID {line_id} follows ID {last_id}; expected {last_id + 1}, or 1 '
        'to start a story.'
      )
    last_id = line_id
    if '\t' not in text:
      line_to_statement[line_id] = len(statements)
      statements.append(text.strip())
      continue
    columns = [c.strip() for c in text.split('\t')]
    if len(columns) < 3 or not columns[0] or not columns[1]:
      raise ValueError(
        f"{where}: a question needs 'question<TAB>answer<TAB>supporting IDs', got {line!r}."
      )
    ids = columns[2].split()
    if not all(i.isdigit() and int(i) in line_to_statement for i in ids):
      raise ValueError(
        f'{where}: supporting IDs {columns[2]!r} must name earlier statements of '
        f'the story, which are {sorted(line_to_statement)}.'
      )
    stories[-1].append(
      {
        'story': list(statements),
        'question': columns[0],
        'answer': columns[1],
        'supporting': [line_to_statement[int(i)] for i in ids],
      }
    )
  return [story for story in stories if story]


def read_splits(config: BabiFilesConfig) -> dict[str, list[dict]]:
  """The examples of every split, validation cut from train's last stories when it has no file.

  Raises:
    ValueError: for a malformed line (see `read_stories`), or a train file with fewer than two
      stories when validation must be cut from it.
  """
  stories = {split: read_stories(epath.Path(path)) for split, path in config.files}
  if 'validation' not in stories:
    train = stories['train']
    if len(train) < 2:
      raise ValueError(
        f'{dict(config.files)["train"]} has {len(train)} story with a question; '
        'cutting validation from it needs at least 2 (or add a valid file).'
      )
    cut = len(train) - min(len(train) - 1, max(1, round(VALIDATION_FRACTION * len(train))))
    stories['train'], stories['validation'] = train[:cut], train[cut:]
  return {split: [ex for story in parts for ex in story] for split, parts in stories.items()}


def config_for_folder(folder: str, task: int) -> BabiFilesConfig:
  """A config named `<folder>_qa<task>_<hash of the files>`, after checking every line.

  Raises:
    FileNotFoundError: if `folder` is not a folder.
    ValueError: for missing task files or a malformed line (naming the file and line).
  """
  files = task_files(folder, task)
  digest = hashlib.sha256()
  for split in sorted(files):
    digest.update(split.encode() + files[split].read_bytes())
  stem = re.sub(r'[^a-z0-9]+', '_', epath.Path(folder).expanduser().name.lower()).strip('_')
  config = BabiFilesConfig(
    name=f'{stem or "babi"}_qa{task}_{digest.hexdigest()[:12]}',
    files=tuple((split, str(path)) for split, path in sorted(files.items())),
    description=f'bAbI task {task} from {folder}.',
  )
  read_splits(config)  # Malformed lines raise here, before anything is prepared.
  return config


class BabiFiles(tfds.core.GeneratorBasedBuilder):
  """The original bAbI files of one task; build its config with `config_for_folder`."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.'}

  def _info(self) -> tfds.core.DatasetInfo:
    return qa_info(self, __doc__)

  def _split_generators(self, dl_manager):
    del dl_manager  # The files are local.
    if self.builder_config is None or not self.builder_config.files:
      raise ValueError(
        'babi_files needs a config from data.readers.babi_files.config_for_folder(folder, task).'
      )
    splits = read_splits(self.builder_config)
    return {split: self._generate_examples(examples) for split, examples in splits.items()}

  def _generate_examples(self, examples: list[dict]):
    for i, example in enumerate(examples):
      yield i, {**example, 'supporting': np.asarray(example['supporting'], np.int32)}
