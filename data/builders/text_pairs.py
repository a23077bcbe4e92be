"""The features every Attend TFDS builder has: one source and one target text."""

import tensorflow_datasets as tfds


def text_pair_info(builder: tfds.core.DatasetBuilder, description: str) -> tfds.core.DatasetInfo:
  """DatasetInfo with text features 'source' and 'target' (also the supervised keys)."""
  return tfds.core.DatasetInfo(
    builder=builder,
    description=description,
    features=tfds.features.FeaturesDict(
      {'source': tfds.features.Text(), 'target': tfds.features.Text()}
    ),
    supervised_keys=('source', 'target'),
  )
