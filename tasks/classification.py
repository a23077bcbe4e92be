"""Classification: a sentence or a document in, one label out; attention pooling made visible.

Reads a labelled text dataset of `data/classification.py` (the generated key-sentence documents,
a local `text<TAB>label` file, or a TFDS text-classification dataset), trains a
`models.Classifier` (HAN or the Transformer classifier) with label-smoothed cross-entropy, and
evaluates accuracy, macro-F1, per-class precision and recall, the confusion matrix and, where the
data records which sentences carry the label, the attention hit rate: how often the highest
sentence weight falls on a key sentence.
"""

import functools
import json
import os
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from data import classification
from models import interventions
from models.interfaces import Classifier
from tasks import document_pictures, picture_weights, pictures
from tasks.base import VOCAB_DIR, Batch, Task, one_row
from tasks.losses import cross_entropy

Array = jax.Array


def example_counts(logits: Array, labels: Array, real: Array) -> dict[str, Array]:
  """Real examples (padding rows have `real` False) and correctly classified ones."""
  correct = (jnp.argmax(logits, -1) == labels) & real
  return dict(examples=real.sum(), correct=correct.sum())


@functools.partial(jax.jit, static_argnums=0)
def _classify(graphdef: nnx.GraphDef, state: nnx.State, inputs: Array):
  """`(probabilities [B, C], pooling weights)` of the model `graphdef, state` (no dropout): the
  `'word'` weights in the shape of `inputs` and, for documents, the `'sentence'` weights `[B, S]`,
  each where the model lists and records them (mean pooling has none)."""
  model = nnx.merge(graphdef, state)
  logits, captured = interventions.capture(model, inputs, method='classify')
  names = model.attention_names
  weights = {}
  for level, shape in (('word', inputs.shape), ('sentence', inputs.shape[:2])):
    if level not in names or (level == 'sentence' and inputs.ndim == 2):
      continue
    try:
      value = interventions.stack(captured, names[level])  # [B, 1, ...]
    except KeyError:  # listed, not recorded: e.g. mean pooling pools without weights
      continue
    # The one shape fix: a level's weights as the input has them; HAN pools words sentence by
    # sentence, `[B*S, 1, W]`, a Transformer reads the whole input, `[B, 1, T]` or `[B, 1, S, W]`.
    weights[level] = value.reshape(shape)
  return jax.nn.softmax(logits), weights


def _self_attention(model, ids: Array) -> Array:
  """Self-attention `[B, L, N, T, T]` over ids `[B, T]`, the [CLS] position (if any, first)
  left out."""
  weights = interventions.attention(model, 'self', ids, method='classify')  # [B, L, N, T', T']
  return weights[..., -ids.shape[1] :, -ids.shape[1] :]


def confusion_matrix(labels: list[int], predictions: list[int], num_classes: int) -> np.ndarray:
  """`[C, C]` counts: row = true class, column = predicted class."""
  matrix = np.zeros((num_classes, num_classes), np.int64)
  np.add.at(matrix, (np.asarray(labels, int), np.asarray(predictions, int)), 1)
  return matrix


def class_metrics(matrix: np.ndarray, names: list[str]) -> dict[str, float]:
  """Accuracy, macro-F1 and per-class precision and recall from a confusion matrix.

  A class never predicted has precision 0; one absent from the labels has recall 0 (both count
  in the macro average, as scikit-learn's `zero_division=0`).
  """
  true_positive = np.diag(matrix).astype(float)
  predicted, actual = matrix.sum(0), matrix.sum(1)
  precision = np.divide(
    true_positive, predicted, out=np.zeros_like(true_positive), where=predicted > 0
  )
  recall = np.divide(true_positive, actual, out=np.zeros_like(true_positive), where=actual > 0)
  denominator = precision + recall
  f1 = np.divide(
    2 * precision * recall, denominator, out=np.zeros_like(denominator), where=denominator > 0
  )
  metrics = dict(
    accuracy=float(true_positive.sum() / max(matrix.sum(), 1)), macro_f1=float(f1.mean())
  )
  for name, p, r in zip(names, precision, recall):
    metrics[f'precision/{name}'] = float(p)
    metrics[f'recall/{name}'] = float(r)
  return metrics


class Classification(Task):
  """Labelled texts through a classifier; see the module docstring.

  Batches: `{'inputs': int32 [B, T] (sentence layout) or [B, S, W] (document layout),
  'labels': int32 [B], 'index': int32 [B]}`, padded with the tokenizer's padding id.
  """

  interface = Classifier
  unit = 'examples'
  samples_header = 'text | label | prediction | confidence'
  samples_file = 'predictions.txt'
  selection_metric = 'accuracy'

  @staticmethod
  def dataset_config():
    return classification.default_config()

  def __init__(self, config, workdir: str):
    self.data = classification.build(config.dataset, os.path.join(workdir, VOCAB_DIR))
    self.tokenizer = self.data.tokenizer
    self.label_names = list(self.data.label_names)
    self.label_smoothing = config.label_smoothing

  def model_args(self) -> dict[str, Any]:
    return dict(
      vocab_size=self.tokenizer.vocab_size,
      num_classes=len(self.label_names),
      pad_id=self.tokenizer.pad_id,
    )

  def logits(self, model: nnx.Module, batch: Batch, **kwargs) -> Any:
    """The model's logits `[B, C]` for the batch's inputs (`kwargs`: the `classify` options)."""
    return model.classify(batch['inputs'], **kwargs)

  def loss(self, model, batch: Batch, rng):
    logits = self.logits(model, batch, deterministic=False, rngs=nnx.Rngs(dropout=rng))
    real = batch['index'] >= 0
    losses = cross_entropy(logits, batch['labels'], self.label_smoothing, where=real)
    return losses.sum() / jnp.maximum(real.sum(), 1), example_counts(logits, batch['labels'], real)

  def eval_counts(self, model, batch: Batch):
    logits = self.logits(model, batch, deterministic=True)
    real = batch['index'] >= 0
    loss_sum = cross_entropy(logits, batch['labels'], where=real).sum()
    return dict(loss_sum=loss_sum, **example_counts(logits, batch['labels'], real))

  def summarize(self, counts):
    examples = max(counts['examples'], 1)
    metrics = {'accuracy': counts['correct'] / examples}
    if 'loss_sum' in counts:  # evaluation: the unsmoothed loss
      metrics['loss'] = counts['loss_sum'] / examples
    return metrics

  def predict(self, model, batch, options):
    probabilities, weights = _classify(*nnx.split(model), batch['inputs'])
    return dict(
      probabilities=probabilities,
      **{f'{level}_weights': w for level, w in weights.items() if level in ('word', 'sentence')},
    )

  def sample(self, split, row):
    return self._record(row, self.data.examples(split)[row['index']])

  def text_sample(self, model, text, options):
    batch = self.data.text_batch(text)
    return self._record(one_row(self, model, batch, options), self.data.unlabeled(text))

  def _label_name(self, label: int | None) -> str:
    return '' if label is None else self.label_names[label]

  def _record(self, row: dict[str, Any], example) -> dict[str, Any]:
    probabilities = np.asarray(row['probabilities'])
    prediction = int(probabilities.argmax())
    label, predicted = self._label_name(example.label), self.label_names[prediction]
    inputs = np.asarray(row['inputs'])
    units = inputs if inputs.ndim == 2 else inputs[None]  # [S, W]
    # The example's sentences that made it into the batch (documents may have been truncated);
    # sentence i of the record is sentence i of the example, so key sentence indices hold.
    count = min(len(example.sentences), len(units))
    units, real = units[:count], units[:count] != self.tokenizer.pad_id
    record = dict(
      index=row['index'],
      text=example.text,
      label=example.label,
      ids=inputs.reshape(-1),  # as the encoder reads them (documents flattened)
      prediction=prediction,
      confidence=float(probabilities[prediction]),
      key_sentences=list(example.key_sentences),
      tokens=[self.tokenizer.tokens(ids[keep]) for ids, keep in zip(units, real)],
      line=f'{example.text} | {label} | {predicted} | {probabilities[prediction]:.3f}',
    )
    if 'word_weights' in row:
      words = np.asarray(row['word_weights']).reshape(inputs.shape)
      words = words if words.ndim == 2 else words[None]
      record['word_weights'] = [w[keep].tolist() for w, keep in zip(words[:count], real)]
    if 'sentence_weights' in row:
      record['sentence_weights'] = np.asarray(row['sentence_weights'])[:count].tolist()
    return record

  def prediction_metrics(self, samples):
    """Accuracy, macro-F1, per-class precision/recall and, where known, the attention hit rate."""
    if not samples:
      return {}
    matrix = confusion_matrix(
      [s['label'] for s in samples], [s['prediction'] for s in samples], len(self.label_names)
    )
    metrics = class_metrics(matrix, self.label_names)
    rate = hit_rate(samples)
    if rate is not None:
      metrics['attention_hit_rate'] = rate
    return metrics

  def save_confusion(self, samples: list[dict[str, Any]], out_dir: str) -> list[str]:
    """Writes the samples' confusion matrix as JSON and PNG; returns their paths."""
    matrix = confusion_matrix(
      [s['label'] for s in samples], [s['prediction'] for s in samples], len(self.label_names)
    )
    path = os.path.join(out_dir, 'confusion_matrix.json')
    with open(path, 'w', encoding='utf-8') as f:
      json.dump(dict(labels=self.label_names, matrix=matrix.tolist()), f, indent=1)
    return [
      path,
      pictures.save_confusion_matrix(
        os.path.join(out_dir, 'confusion_matrix.png'), matrix, self.label_names
      ),
    ]

  def draw(self, model, samples, out_dir, options):
    """The confusion matrix (PNG and JSON) and, per drawn example, its attention as the HAN
    paper shows it: sentence weights as bars, words shaded by their weights (PNG and HTML)."""
    del model  # the weights were computed with the predictions
    labelled = [sample for sample in samples if sample['label'] is not None]
    paths = self.save_confusion(labelled, out_dir) if labelled else []
    for sample in samples[: options.num_pictures]:
      if 'word_weights' not in sample:  # mean pooling has no attention to show
        break
      label = '' if sample['label'] is None else f'label {self.label_names[sample["label"]]}, '
      title = (
        f'{label}predicted {self.label_names[sample["prediction"]]} ({sample["confidence"]:.2f})'
      )
      stem = os.path.join(out_dir, f'attention_{sample["index"]:04d}')
      args = (
        sample['tokens'],
        sample['word_weights'],
        sample.get('sentence_weights'),
        sample['key_sentences'],
        title,
      )
      document_pictures.save_document_attention(stem + '.png', *args)
      with open(stem + '.html', 'w', encoding='utf-8') as f:
        f.write(document_pictures.document_attention_html(*args))
      paths += [stem + '.png', stem + '.html']
    return paths

  def explore(self, model, samples, options):
    """Per sample, its words shaded by their weights and its sentences' weights as bars, and a
    Transformer's self-attention of every layer and head over the real tokens."""
    del options
    records = []
    for s, weights in zip(samples, self.self_attention(model, samples)):
      views = []
      if 'word_weights' in s:  # mean pooling has no pooling weights to show
        views.append(
          dict(
            kind='document',
            tokens=s['tokens'],
            word=s['word_weights'],
            sentence=s.get('sentence_weights'),
            key=s['key_sentences'],
          )
        )
      if weights is not None:
        real = s['ids'] != self.tokenizer.pad_id
        tokens = self.tokenizer.tokens(s['ids'][real])
        views.append(
          dict(
            kind='attention',
            maps=[
              dict(
                name='self-attention',
                rows=tokens,
                cols=tokens,
                weights=weights[:, :, real][..., real],
              )
            ],
          )
        )
      records.append(
        dict(
          index=s['index'],
          reference=self._label_name(s['label']),
          prediction=f'{self.label_names[s["prediction"]]} ({s["confidence"]:.2f})',
          correct=None if s['label'] is None else s['label'] == s['prediction'],
          views=views,
        )
      )
    return records

  def self_attention(self, model, samples) -> list[np.ndarray | None]:
    """Per sample, a Transformer's self-attention `[L, N, T, T]` over its ids (padding included,
    [CLS] left out); Nones for a model without self-attention (HAN)."""
    if 'self' not in model.attention_names:
      return [None] * len(samples)
    return list(
      picture_weights.batched_weights(
        _self_attention,
        model,
        [(s['ids'],) for s in samples],
        pad_ids=(self.tokenizer.pad_id,),
        crop=(0, 0),
      )
    )


def hit_rate(samples: list[dict[str, Any]]) -> float | None:
  """The share of samples whose highest sentence weight falls on a key sentence, over the
  samples that have both; None when none has (no key sentences recorded, or no sentence weights).
  """
  hits = [
    int(np.argmax(s['sentence_weights'])) in s['key_sentences']
    for s in samples
    if s.get('key_sentences') and s.get('sentence_weights')
  ]
  return float(np.mean(hits)) if hits else None
