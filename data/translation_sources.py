"""Where translation pairs come from: Attend's own builders (`number_words`, `dates`, and
`tsv_parallel` for a user's TSV files), prepared offline, or any registered TFDS translation set.
"""

import ml_collections
import tensorflow_datasets as tfds

from data.builders.dates import Dates
from data.builders.number_words import NumberWords
from data.readers import tsv_parallel
from data.tfds_reading import make_builder

OWN_BUILDERS = {
  'dates': Dates,
  'number_words': NumberWords,
  'tsv_parallel': tsv_parallel.TsvParallel,
}


def translation_builder(config: ml_collections.FrozenConfigDict) -> tfds.core.DatasetBuilder:
  """`make_builder` for a translation dataset; an unknown name lists TFDS's translation sets."""
  if config.name not in OWN_BUILDERS:
    # The legacy translation builders (wmt14_translate, ...) register only when imported.
    import tensorflow_datasets.translate  # noqa: F401  pylint: disable=g-import-not-at-top
  file_config = (
    tsv_parallel.config_for_path(  # Its config is the files'.
      config.tsv_path, validation_path=config.validation_path, test_path=config.test_path
    )
    if config.name == 'tsv_parallel'
    else None
  )
  return make_builder(
    config,
    OWN_BUILDERS,
    kind='translation',
    builder_config=file_config,
    examples=lambda: (
      n for n in tfds.list_builders(with_community_datasets=False) if 'translate' in n
    ),
  )
