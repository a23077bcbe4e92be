"""`mqar`: multi-query associative recall (Arora et al. 2023, "Zoology"), offline and generated.

Each example is a line of whitespace-separated words, one token each for a word tokenizer:
`num_pairs` key-value pairs (`k12 v3 k40 v3 ...`, distinct keys, values drawn with replacement),
then every key once more in a random order, each followed by its value. A language model reads
the line left to right and is scored only on the values of the query section (feature
'answers': their token positions). The key-to-value mapping is drawn afresh for every example,
so no weight can memorize it: the only way to predict `v3` after the query `k12` is to find
`k12` earlier in the context and read the token after it. That lookup is what attention does
and what fixed-size recurrent states struggle with as `num_pairs` grows, so the task separates
mechanisms cleanly. Feature 'support' holds, per answer, the position of the matching key in
the pair section: where attention from the query should land.

Splits are disjoint by text: test is generated first, then validation, then train, from one
`random.Random(seed)`, each skipping texts already used (`data.builders.generated`).
"""

import dataclasses
import functools
import math
import random

import numpy as np
import tensorflow_datasets as tfds

from data.builders.generated import GeneratedConfig, disjoint_splits

RECALL_PAIRS = (4, 8, 16, 32)  # the recall study's sizes: a builder config 'pairs_N' each


@dataclasses.dataclass(eq=False)
class MqarConfig(GeneratedConfig):
  """Task sizes; split sizes and seed as in `GeneratedConfig`, with 20,000 training examples.

  Attributes:
    num_pairs: key-value pairs per example (the sequence has 4 * num_pairs tokens).
    num_keys: key names `k0 .. k{num_keys - 1}` to draw the distinct keys from.
    num_values: value names `v0 .. v{num_values - 1}`, drawn with replacement.
  """

  num_pairs: int = 16
  num_keys: int = 64
  num_values: int = 64
  train_size: int = 20_000


def generate_example(rng: random.Random, num_pairs: int, num_keys: int, num_values: int) -> dict:
  """One random example.

  Args:
    rng: the random source (advanced).
    num_pairs: key-value pairs, at most `num_keys`.
    num_keys: number of key names.
    num_values: number of value names.

  Returns:
    `{'text': str, 'answers': [N] list of int, 'support': [N] list of int}` with N = num_pairs:
    the answers are the positions 2N+1, 2N+3, ... of the query section's values, and support[q]
    is the position of answer q's key in the pair section.
  """
  keys = rng.sample(range(num_keys), num_pairs)
  values = [rng.randrange(num_values) for _ in keys]
  order = rng.sample(range(num_pairs), num_pairs)  # The query section's pairs.
  words = [
    f'{prefix}{n}'
    for i in list(range(num_pairs)) + order
    for prefix, n in (('k', keys[i]), ('v', values[i]))
  ]
  return {
    'text': ' '.join(words),
    'answers': [2 * num_pairs + 2 * q + 1 for q in range(num_pairs)],
    'support': [2 * i for i in order],
  }


def generate_splits(config: MqarConfig) -> dict[str, list[dict]]:
  """Every split's examples (see `generate_example`), disjoint by text.

  Raises:
    ValueError: if the keys cannot be distinct or there are fewer distinct examples than the
      splits ask for.
  """
  if config.num_pairs > config.num_keys:
    raise ValueError(
      f'mqar config {config.name!r}: num_pairs={config.num_pairs} distinct keys '
      f'need num_keys >= num_pairs, got {config.num_keys}.'
    )
  # Key sequences x value sequences x query orders; asking for more could never finish.
  distinct = (
    math.perm(config.num_keys, config.num_pairs)
    * config.num_values**config.num_pairs
    * math.factorial(config.num_pairs)
  )
  return disjoint_splits(
    config,
    functools.partial(
      generate_example,
      num_pairs=config.num_pairs,
      num_keys=config.num_keys,
      num_values=config.num_values,
    ),
    distinct,
  )


class Mqar(tfds.core.GeneratorBasedBuilder):
  """Multi-query associative recall: recall each key's value from earlier in the context."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.'}
  BUILDER_CONFIGS = [
    MqarConfig(
      name='default', description='16 pairs of 64 keys and 64 values, 22,000 examples of 64 tokens.'
    ),
    MqarConfig(
      name='small',
      description='8 pairs of 64 keys and 64 values, 7,000 examples of 32 tokens.',
      num_pairs=8,
      train_size=5_000,
    ),
  ]
  BUILDER_CONFIGS += [
    MqarConfig(
      name=f'pairs_{n}',
      description=f'{n} pairs of 64 keys and 64 values, 20,000 '
      f'training examples of {4 * n} tokens (configs/study_recall.py).',
      num_pairs=n,
    )
    for n in RECALL_PAIRS
  ]
  DEFAULT_CONFIG_NAME = 'default'

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
      builder=self,
      description=__doc__,
      features=tfds.features.FeaturesDict(
        {
          'text': tfds.features.Text(),
          'answers': tfds.features.Sequence(np.int32),
          'support': tfds.features.Sequence(np.int32),
        }
      ),
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download.
    splits = generate_splits(self.builder_config)
    return {split: self._generate_examples(examples) for split, examples in splits.items()}

  def _generate_examples(self, examples: list[dict]):
    yield from enumerate(examples)
