"""`babi_tasks`: offline, deterministic stories with questions in the style of Facebook's bAbI.

Three of the 20 bAbI tasks (Weston et al. 2015), over the original's small vocabularies:

- task 1, single supporting fact: "Mary moved to the bathroom. John went to the hallway.
  Where is Mary?" -> bathroom; supporting = Mary's last move.
- task 2, two supporting facts: people move and pick up or drop objects. "Where is the
  football?" -> the place of the person who holds it, or of the person where they dropped it;
  supporting = the pick-up (or drop) and that person's last move before it, in story order.
- task 16, basic induction: "Brian is a frog. Brian is yellow. ... Greg is a frog. What color is
  Greg?" -> yellow; supporting = [Greg is a frog., Brian is a frog., Brian is yellow.]. Every
  animal has one color within a story, so the answer is determined.

As in the original files, a story has several questions (tasks 1 and 2: five; task 16: one),
and each question is one example: the story's sentences so far (questions excluded), the
question, the one-word answer and the 0-based indices of the supporting sentences. Splits are
disjoint by story and question: test is generated first, then validation, then train, from one
`random.Random(seed)`, each skipping examples already used; so the 1k and 10k configs of a task
share the same test set.
"""

from collections.abc import Callable
import dataclasses
import random

import numpy as np
import tensorflow_datasets as tfds

from data.builders.generated import SPLITS, GeneratedConfig

PEOPLE = ('Mary', 'John', 'Sandra', 'Daniel')
PLACES = ('bathroom', 'hallway', 'garden', 'office', 'kitchen', 'bedroom')
OBJECTS = ('football', 'apple', 'milk')
MOVES = ('moved to', 'went to', 'journeyed to', 'travelled to', 'went back to')
PICKS = ('picked up', 'got', 'grabbed', 'took')
DROPS = ('dropped', 'discarded', 'put down', 'left')
NAMES = ('Lily', 'Bernhard', 'Greg', 'Julius', 'Brian')
ANIMALS = ('swan', 'lion', 'frog', 'rhino')
COLORS = ('white', 'gray', 'yellow', 'green')
QUESTIONS_PER_STORY = 5  # Tasks 1 and 2, as in the original files.


def _example(story: list[str], question: str, answer: str, supporting: list[int]) -> dict:
  return {
    'story': list(story),
    'question': question,
    'answer': answer,
    'supporting': list(supporting),
  }


def single_supporting_fact(rng: random.Random) -> list[dict]:
  """The examples of one task-1 story: two moves, then a question about someone who moved."""
  story, examples = [], []
  at = {}  # person -> (place, index of their last move)
  for _ in range(QUESTIONS_PER_STORY):
    for _ in range(2):
      person, place = rng.choice(PEOPLE), rng.choice(PLACES)
      at[person] = (place, len(story))
      story.append(f'{person} {rng.choice(MOVES)} the {place}.')
    person = rng.choice(sorted(at))
    place, move = at[person]
    examples.append(_example(story, f'Where is {person}?', place, [move]))
  return examples


def two_supporting_facts(rng: random.Random) -> list[dict]:
  """The examples of one task-2 story: 2-4 moves, pick-ups or drops before each question."""
  story, examples = [], []
  at = {}  # person -> (place, index of their last move)
  held = {}  # object -> (person, index of the pick-up)
  dropped = {}  # object -> (place, supporting indices)
  while len(examples) < QUESTIONS_PER_STORY:
    for _ in range(rng.randint(2, 4)):
      person, i = rng.choice(PEOPLE), len(story)
      mine = sorted(obj for obj, (holder, _) in held.items() if holder == person)
      free = [obj for obj in OBJECTS if obj not in held]
      # Only someone whose place is known picks up, so every object has a known place.
      actions = ['move'] * 2 + ['pick'] * bool(person in at and free) + ['drop'] * bool(mine)
      action = rng.choice(actions)
      if action == 'move':
        place = rng.choice(PLACES)
        at[person] = (place, i)
        story.append(f'{person} {rng.choice(MOVES)} the {place}.')
      elif action == 'pick':
        obj = rng.choice(free)
        held[obj] = (person, i)
        dropped.pop(obj, None)
        story.append(f'{person} {rng.choice(PICKS)} the {obj}.')
      else:
        obj = rng.choice(mine)
        del held[obj]
        place, move = at[person]
        dropped[obj] = (place, [move, i])
        story.append(f'{person} {rng.choice(DROPS)} the {obj}.')
    known = sorted([*held, *dropped])
    if not known:
      continue
    obj = rng.choice(known)
    if obj in held:
      person, pick = held[obj]
      place, move = at[person]
      supporting = sorted([pick, move])
    else:
      place, supporting = dropped[obj]
    examples.append(_example(story, f'Where is the {obj}?', place, supporting))
  return examples


def basic_induction(rng: random.Random) -> list[dict]:
  """The one example of a task-16 story: four animals' species and colors, then a fifth's."""
  *others, asked = rng.sample(NAMES, len(NAMES))
  color_of = {animal: rng.choice(COLORS) for animal in ANIMALS}
  species = {name: rng.choice(ANIMALS) for name in others}
  facts = [(name, kind) for name in others for kind in ('species', 'color')]
  rng.shuffle(facts)
  story = [
    f'{name} is a {species[name]}.'
    if kind == 'species'
    else f'{name} is {color_of[species[name]]}.'
    for name, kind in facts
  ]
  animal = rng.choice([species[name] for name in others])
  story.append(f'{asked} is a {animal}.')
  kin = next(name for name in others if species[name] == animal)
  supporting = [len(story) - 1, facts.index((kin, 'species')), facts.index((kin, 'color'))]
  return [_example(story, f'What color is {asked}?', color_of[animal], supporting)]


TASKS: dict[int, Callable[[random.Random], list[dict]]] = {
  1: single_supporting_fact,
  2: two_supporting_facts,
  16: basic_induction,
}


@dataclasses.dataclass(eq=False)
class BabiConfig(GeneratedConfig):
  """The bAbI task, plus the split sizes (in questions) and seed of `GeneratedConfig`.

  Attributes:
    task: the bAbI task number, a key of `TASKS`.
  """

  task: int = 1


def generate_splits(config: BabiConfig) -> dict[str, list[dict]]:
  """Every split's examples `{'story', 'question', 'answer', 'supporting'}`, disjoint.

  Returns:
    `{'test': [...], 'validation': [...], 'train': [...]}`, each of its configured size; no
    story and question occur twice. A split takes whole stories but maybe its last.
  """
  rng = random.Random(config.seed)
  seen = set()
  splits = {}
  for split in SPLITS:
    size = getattr(config, f'{split}_size')
    examples = []
    while len(examples) < size:
      for example in TASKS[config.task](rng):
        key = '\n'.join([*example['story'], example['question']])
        if key not in seen and len(examples) < size:
          seen.add(key)
          examples.append(example)
    splits[split] = examples
  return splits


def qa_info(builder: tfds.core.DatasetBuilder, description: str) -> tfds.core.DatasetInfo:
  """The features of a question-answering dataset, shared by `babi_tasks` and `babi_files`."""
  return tfds.core.DatasetInfo(
    builder=builder,
    description=description,
    features=tfds.features.FeaturesDict(
      {
        'story': tfds.features.Sequence(tfds.features.Text()),
        'question': tfds.features.Text(),
        'answer': tfds.features.Text(),
        'supporting': tfds.features.Tensor(shape=(None,), dtype=np.int32),
      }
    ),
  )


def _config(task: int, train_size: int) -> BabiConfig:
  return BabiConfig(
    name=f'qa{task}_{train_size // 1000}k',
    task=task,
    train_size=train_size,
    validation_size=train_size // 10,
    test_size=1_000,
    description=f'bAbI task {task} ({TASKS[task].__name__.replace("_", " ")}), '
    f'{train_size:,} training questions.',
  )


class BabiTasks(tfds.core.GeneratorBasedBuilder):
  """bAbI-style stories and questions for tasks 1, 2 and 16, generated offline."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.'}
  BUILDER_CONFIGS = [_config(task, size) for task in TASKS for size in (1_000, 10_000)]
  DEFAULT_CONFIG_NAME = 'qa1_10k'

  def _info(self) -> tfds.core.DatasetInfo:
    return qa_info(self, __doc__)

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download.
    splits = generate_splits(self.builder_config)
    return {split: self._generate_examples(examples) for split, examples in splits.items()}

  def _generate_examples(self, examples: list[dict]):
    for i, example in enumerate(examples):
      yield i, {**example, 'supporting': np.asarray(example['supporting'], np.int32)}
