"""Image classification: an image in, one label out; where a Vision Transformer looks, drawn.

Reads an image dataset of `data/image_classification.py` (scikit-learn's handwritten digits, a local
image folder, or a TFDS image dataset such as mnist or cifar10), trains a `models.ImageClassifier`
(the ViT) with label-smoothed cross-entropy, and evaluates accuracy, macro-F1, per-class precision
and recall and the confusion matrix. Each drawn example shows the image beside two heat maps over
it: the attention rollout of all layers (Abnar & Zuidema 2020) and the last layer's class-token
attention, both read from the class token's row (or, for mean pooling, the
mean row).
"""

import functools
import os
from typing import Any

from flax import nnx
import jax
import numpy as np

import attention
from data import image_classification
from models import interventions
from models.interfaces import ImageClassifier
from tasks import pictures
from tasks.base import Batch, Task
from tasks.classification import Classification

Array = jax.Array


@functools.partial(jax.jit, static_argnums=(0, 3))
def _classify(graphdef: nnx.GraphDef, state: nnx.State, pixels: Array, pooled_row: bool):
  """Probabilities `[B, C]`, rollout and last-layer maps `[B, T]` over the tokens, and every
  layer's and head's map `[B, L, N, T]` (no dropout).

  The maps are the class token's row (token 0) when `pooled_row` is False, else the mean row.
  """
  model = nnx.merge(graphdef, state)
  logits, captured = interventions.capture(model, pixels, method='classify_image')
  weights = interventions.stack(captured, model.attention_names['self'])  # [B, L, N, T, T]
  rollout = attention.attention_rollout(weights)  # [B, T, T]
  read = (lambda w: w.mean(axis=-2)) if pooled_row else (lambda w: w[..., 0, :])
  heads = read(weights)  # [B, L, N, T]
  # A row is linear in the weights, so the last layer's head-averaged map is its heads' mean.
  return jax.nn.softmax(logits), read(rollout), heads[:, -1].mean(axis=1), heads


class ImageClassification(Classification):
  """Labelled images through an image classifier; see the module docstring.

  Batches: `{'images': float32 [B, H, W, C] (normalised), 'labels': int32 [B], 'index': [B]}`.
  """

  interface = ImageClassifier
  unit = 'examples'
  samples_header = 'index | label | prediction | confidence'

  @staticmethod
  def dataset_config():
    return image_classification.default_config()

  def __init__(self, config, workdir: str):  # pylint: disable=super-init-not-called
    del workdir  # nothing is derived from the data but the normalisation, computed each time
    self.data = image_classification.build(config.dataset)
    self.label_names = list(self.data.label_names)
    self.label_smoothing = config.label_smoothing

  def model_args(self) -> dict[str, Any]:
    return dict(image_shape=tuple(self.data.image_shape), num_classes=len(self.label_names))

  text_sample = Task.text_sample  # an image is not text: refused, not Classification's reading

  def logits(self, model, batch: Batch, **kwargs):
    return model.classify_image(batch['images'], **kwargs)

  def predict(self, model, batch, options):
    graphdef, state = nnx.split(model)
    pooled_row = getattr(model, 'pooling', 'cls') != 'cls'
    probabilities, rollout, last, heads = _classify(graphdef, state, batch['images'], pooled_row)
    return dict(probabilities=probabilities, rollout=rollout, last_layer=last, heads=heads)

  def sample(self, split, row):
    probabilities = np.asarray(row['probabilities'])
    prediction, label = int(probabilities.argmax()), int(self.data.labels(split)[row['index']])
    confidence = float(probabilities[prediction])
    return dict(
      index=row['index'],
      label=label,
      prediction=prediction,
      confidence=confidence,
      pixels=self.data.pixels(split)[row['index']],
      rollout=np.asarray(row['rollout']),
      last_layer=np.asarray(row['last_layer']),
      heads=np.asarray(row['heads']),  # [L, N, T]
      line=f'{row["index"]} | {self.label_names[label]} | '
      f'{self.label_names[prediction]} | {confidence:.3f}',
    )

  def draw(self, model, samples, out_dir, options):
    """The confusion matrix (PNG, JSON) and, per drawn example, the image with its rollout and
    last-layer class-token attention as heat maps over it (one PNG each)."""
    if not samples:
      return []
    paths = self.save_confusion(samples, out_dir)
    grid = model.grid
    for sample in samples[: options.num_pictures]:
      # The maps cover every token; the patches are the last gh * gw of them.
      patches = lambda m: m[-grid[0] * grid[1] :].reshape(grid)  # [gh, gw]
      path = os.path.join(out_dir, f'attention_{sample["index"]:04d}.png')
      pictures.save_image_attention(
        path,
        sample['pixels'],
        [
          ('attention rollout', patches(sample['rollout'])),
          ('last layer, class token', patches(sample['last_layer'])),
        ],
        title=f'label {self.label_names[sample["label"]]}, predicted '
        f'{self.label_names[sample["prediction"]]} ({sample["confidence"]:.2f})',
      )
      paths.append(path)
    return paths

  def explore(self, model, samples, options):
    """Per sample, the image with its attention rollout, the last layer's class-token attention
    and each layer's and head's over the patches."""
    del options  # the maps were computed with the predictions
    patches = lambda m: m[-model.grid[0] * model.grid[1] :].reshape(model.grid)  # [gh, gw]
    return [
      dict(
        index=s['index'],
        reference=self.label_names[s['label']],
        prediction=f'{self.label_names[s["prediction"]]} ({s["confidence"]:.2f})',
        correct=s['label'] == s['prediction'],
        views=[
          dict(
            kind='image',
            pixels=s['pixels'],
            maps=[
              ('attention rollout', patches(s['rollout'])),
              ('last layer, class token', patches(s['last_layer'])),
            ]
            + [
              (f'layer {l}, head {h}', patches(s['heads'][l, h]))
              for l in range(s['heads'].shape[0])
              for h in range(s['heads'].shape[1])
            ],
          )
        ],
      )
      for s in samples
    ]
