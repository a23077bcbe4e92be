"""Splits of Attend's generated datasets (`mqar`, `key_sentence_docs`): seeded and disjoint.

Test is generated first, then validation, then train, from one `random.Random(seed)`, each
skipping texts already used. Generating the held-out splits first keeps them the same in a
config that only asks for more training examples, so results on both compare on one test set.
"""

from collections.abc import Callable
import dataclasses
import random

import tensorflow_datasets as tfds

SPLITS = ('test', 'validation', 'train')  # The order they are generated in.


@dataclasses.dataclass(eq=False)
class GeneratedConfig(tfds.core.BuilderConfig):
  """Split sizes and seed; a dataset's config subclasses it to add the task's own sizes.

  Attributes:
    train_size: examples in the train split.
    validation_size: examples in the validation split.
    test_size: examples in the test split.
    seed: seed of the generator.
  """

  train_size: int = 10_000
  validation_size: int = 1_000
  test_size: int = 1_000
  seed: int = 0


def disjoint_splits(
  config: GeneratedConfig, generate: Callable[[random.Random], dict], distinct: int | None = None
) -> dict[str, list[dict]]:
  """Every split's examples, no 'text' in two of them, reproducible from `config.seed`.

  Args:
    config: the split sizes and seed.
    generate: `rng -> example`, a dict with a 'text'; it advances `rng`.
    distinct: how many distinct texts `generate` can give, where that is known; asking for more
      raises instead of looping forever.

  Returns:
    `{'test': [...], 'validation': [...], 'train': [...]}`, each of its configured size.

  Raises:
    ValueError: if the splits ask for more than `distinct` examples.
  """
  sizes = {split: getattr(config, f'{split}_size') for split in SPLITS}
  if distinct is not None and sum(sizes.values()) > distinct:
    raise ValueError(
      f'{type(config).__name__} {config.name!r} asks for {sum(sizes.values())} '
      f'examples but has only {distinct} distinct ones.'
    )
  rng = random.Random(config.seed)
  seen = set()
  splits = {}
  for split, size in sizes.items():
    examples = []
    while len(examples) < size:
      example = generate(rng)
      if example['text'] not in seen:
        seen.add(example['text'])
        examples.append(example)
    splits[split] = examples
  return splits
