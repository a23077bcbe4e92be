"""`key_sentence_docs`: documents whose topic is stated by one or two key sentences among others.

Offline and deterministic. Each document has 4-8 sentences: 1 or 2 key sentences that mention
a keyword of the label's topic affirmatively ("Everyone talked about the orchestra for days."),
neutral filler ("Dr. Novak arrived at 7.30 and sat near the window."), and, in about half of the
documents, as many negated distractors as key sentences, all naming keywords of ONE other topic
("Nobody mentioned the recipe."). The affirmative templates are shared by all topics, so only
the keyword says which topic a sentence is about; in documents with distractors two topics have
the same keyword count, so a bag of words cannot do better than a coin flip there (about 75%
overall). A model has to find the key sentence and read it.

Filler sentences hold abbreviations, initials and decimals, so that `data.sentences` is
exercised: `split_sentences(text)` gives back exactly the generated sentences, and feature
'key_sentences' holds the positions of the key sentences in that list. Splits are disjoint by
text: test is generated first, then validation, then train, each skipping texts already used
(`data.builders.generated`).
"""

import dataclasses
import random

import numpy as np
import tensorflow_datasets as tfds

from data.builders.generated import GeneratedConfig, disjoint_splits

TOPICS = {
  'sports': (
    'goal',
    'referee',
    'stadium',
    'striker',
    'tournament',
    'goalkeeper',
    'league',
    'penalty',
    'championship',
    'midfielder',
    'coach',
    'scoreboard',
  ),
  'science': (
    'experiment',
    'laboratory',
    'microscope',
    'hypothesis',
    'molecule',
    'telescope',
    'physicist',
    'chemist',
    'specimen',
    'genome',
    'electron',
    'equation',
  ),
  'music': (
    'orchestra',
    'guitar',
    'melody',
    'concert',
    'violin',
    'drummer',
    'symphony',
    'chorus',
    'album',
    'pianist',
    'saxophone',
    'rhythm',
  ),
  'food': (
    'recipe',
    'soup',
    'bakery',
    'chef',
    'dessert',
    'pastry',
    'omelette',
    'spice',
    'risotto',
    'sandwich',
    'casserole',
    'kitchen',
  ),
}
LABELS = tuple(TOPICS)

# Affirmative: the sentence is about the keyword. Shared by all topics (see the docstring).
KEY_TEMPLATES = (
  'Everyone talked about the {kw} for days.',
  '{name} said the {kw} was the highlight of the week.',
  'The {kw} turned out to be the best part of the trip.',
  '{name} wrote a long letter about the {kw}.',
  'That evening the {kw} finally got the attention it deserved.',
  '{name} could not stop thinking about the {kw}.',
  'Most of the visitors came just for the {kw}.',
)
# Negated or irrelevant: the keyword (of another topic) says nothing about the document.
NEGATED_TEMPLATES = (
  'Nobody mentioned the {kw}.',
  'It had nothing to do with the {kw}.',
  'There was no word about the {kw} at all.',
  '{name} never asked about the {kw}.',
  'The {kw} was not part of the plan.',
  'Nobody cared about the {kw} that day.',
)
FILLER_TEMPLATES = (
  'Dr. {surname} arrived at {time} and sat near the window.',
  'The bus left at {time} in the morning.',
  'Ms. {surname} checked the schedule twice.',
  'Prof. {surname} and Mr. {surname2} shared a table.',
  '{initial}. {surname} signed the form at the front desk.',
  'The meeting ran for {decimal} hours.',
  'The shop near St. {saint} Square opened at {time}.',
  'The parcel from {surname} Ltd. arrived a day late.',
  'The letter came from the U.S. Embassy in {city}.',
  'It rained for most of the week, i.e. Monday to Friday.',
  'The temperature rose to {decimal} degrees by noon.',
  'Room No. {number} was empty all weekend.',
  'The weather stayed mild for most of the week.',
  'A small van was parked outside the gate.',
  'The report was {number} pages long.',
  '{name} read the newspaper at {time}.',
  '{name} and {name2} met Mrs. {surname} at the station.',
)
_SLOTS = {
  'name': (
    'Anna',
    'Ben',
    'Carla',
    'David',
    'Elena',
    'Farid',
    'Grace',
    'Hugo',
    'Iris',
    'Jonas',
    'Kemal',
    'Lena',
    'Marco',
    'Nora',
    'Oscar',
    'Priya',
    'Quinn',
    'Rosa',
    'Sam',
    'Tara',
  ),
  'surname': (
    'Lee',
    'Novak',
    'Okafor',
    'Schmidt',
    'Garcia',
    'Kowalski',
    'Tanaka',
    'Moreau',
    'Silva',
    'Brennan',
    'Haddad',
    'Lindqvist',
  ),
  'saint': ('Anne', 'George', 'Mary', 'Patrick', 'Peter', 'Stephen'),
  'city': ('Lisbon', 'Oslo', 'Nairobi', 'Lima', 'Hanoi', 'Dublin', 'Quito', 'Tunis'),
  'initial': tuple('ABCDEFGHJKLMNPRSTW'),
}


@dataclasses.dataclass(eq=False)
class KeySentenceDocsConfig(GeneratedConfig):
  """Split sizes (in documents) and seed, see `GeneratedConfig`."""


def _fill(template: str, rng: random.Random, kw: str = '') -> str:
  slots = {
    'kw': kw,
    'time': f'{rng.randint(6, 11)}.{rng.choice((0, 15, 30, 45)):02d}',
    'decimal': f'{rng.randint(1, 30)}.{rng.randint(1, 9)}',
    'number': rng.randint(2, 99),
  }
  for slot, values in _SLOTS.items():
    if '{' + slot in template:
      first = rng.choice(values)
      slots[slot] = first
      slots[slot + '2'] = rng.choice([v for v in values if v != first])
  return template.format(**slots)


def generate_document(rng: random.Random) -> tuple[list[str], int, list[int]]:
  """One random document.

  Args:
    rng: the random source (advanced).

  Returns:
    `(sentences, label, key_sentences)`: the sentences in order, the topic's index in `LABELS`,
    and the positions of the key sentences.
  """
  label = rng.randrange(len(LABELS))
  num_keys = rng.randint(1, 2)
  num_negated = num_keys if rng.random() < 0.5 else 0
  num_sentences = rng.randint(4, 8)
  other = (label + rng.randint(1, len(LABELS) - 1)) % len(LABELS)
  keys = [
    _fill(rng.choice(KEY_TEMPLATES), rng, kw) for kw in rng.sample(TOPICS[LABELS[label]], num_keys)
  ]
  negated = [
    _fill(rng.choice(NEGATED_TEMPLATES), rng, kw)
    for kw in rng.sample(TOPICS[LABELS[other]], num_negated)
  ]
  fillers = [
    _fill(template, rng)
    for template in rng.sample(FILLER_TEMPLATES, num_sentences - num_keys - num_negated)
  ]
  kinds = ['key'] * num_keys + ['negated'] * num_negated + ['filler'] * len(fillers)
  rng.shuffle(kinds)
  pools = {'key': iter(keys), 'negated': iter(negated), 'filler': iter(fillers)}
  sentences = [next(pools[kind]) for kind in kinds]
  return sentences, label, [i for i, kind in enumerate(kinds) if kind == 'key']


def _generate_example(rng: random.Random) -> dict:
  sentences, label, key_sentences = generate_document(rng)
  return {
    'text': ' '.join(sentences),
    'label': label,
    'key_sentences': key_sentences,
    'sentences': sentences,
  }


def generate_splits(config: KeySentenceDocsConfig) -> dict[str, list[dict]]:
  """Every split's examples `{'text', 'label', 'key_sentences', 'sentences'}`, disjoint by text.

  'text' is the sentences joined by single spaces; 'sentences' is not a feature of the dataset
  (`split_sentences(text)` gives it back).
  """
  # No count of distinct documents guards the sizes: there are far more than any split needs.
  return disjoint_splits(config, _generate_example)


class KeySentenceDocs(tfds.core.GeneratorBasedBuilder):
  """Topic classification where one or two sentences carry the label."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.'}
  BUILDER_CONFIGS = [
    KeySentenceDocsConfig(name='default', description='12,000 documents.'),
    # The same validation and test documents (generated first, from the same seed), five
    # times the training documents: for models with less inductive bias than HAN's.
    KeySentenceDocsConfig(name='large', description='52,000 documents.', train_size=50_000),
  ]
  DEFAULT_CONFIG_NAME = 'default'

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
      builder=self,
      description=__doc__,
      features=tfds.features.FeaturesDict(
        {
          'text': tfds.features.Text(),
          'label': tfds.features.ClassLabel(names=LABELS),
          'key_sentences': tfds.features.Sequence(np.int32),
        }
      ),
      supervised_keys=('text', 'label'),
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download.
    splits = generate_splits(self.builder_config)
    return {split: self._generate_examples(examples) for split, examples in splits.items()}

  def _generate_examples(self, examples: list[dict]):
    for i, example in enumerate(examples):
      yield i, {key: example[key] for key in ('text', 'label', 'key_sentences')}
