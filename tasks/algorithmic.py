"""Algorithmic tasks: the Neural Turing Machine's copy task, bits in and the same bits out.

Reads `data/algorithmic.py` (random bit vectors, a delimiter, then blank steps to write them back
on), trains a `models.SequenceModel` (the NTM or its LSTM baseline) with sigmoid cross-entropy on
the output steps, and measures the bit error rate (thresholded outputs that differ from the
target bits) and how many sequences come back without a single wrong bit. The picture is the
paper's copy figure: inputs, outputs, and the NTM's write and read weightings over time.
"""

import functools
import os
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from data import algorithmic
from models import interventions
from models.interfaces import SequenceModel
from tasks import memory_pictures
from tasks.base import Batch, EvalOptions, Task

Array = jax.Array


def bit_counts(logits: Array, batch: Batch) -> dict[str, Array]:
  """Output bits, wrong bits, sequences and exactly copied sequences of a batch."""
  weights = batch['weights'][..., None]  # [B, T, 1]
  wrong = ((logits > 0) != (batch['targets'] > 0.5)) * weights  # [B, T, W]
  rows = batch['weights'].sum(-1) > 0  # [B]
  exact = (wrong.sum((1, 2)) == 0) & rows
  return dict(
    bits=batch['weights'].sum() * logits.shape[-1],
    bit_errors=wrong.sum(),
    sequences=rows.sum(),
    exact=exact.sum(),
  )


def _loss_sum(logits: Array, batch: Batch) -> Array:
  """Summed sigmoid cross-entropy over the output steps' bits."""
  losses = optax.sigmoid_binary_cross_entropy(logits, batch['targets'])  # [B, T, W]
  return (losses * batch['weights'][..., None]).sum()


@functools.partial(jax.jit, static_argnums=0)
def _predict(
  graphdef: nnx.GraphDef, state: nnx.State, inputs: Array
) -> tuple[Array, dict[str, Array]]:
  """Logits and the model's memory weightings by role, `{'read'|'write': [B, T, heads, N]}`
  (none for a model without attention; no dropout)."""
  model = nnx.merge(graphdef, state)
  names = model.attention_names
  roles = [role for role in ('read', 'write') if role in names]
  if not roles:  # nothing to capture (an LSTM)
    return model.sequence_logits(inputs), {}
  logits, captured = interventions.capture(model, inputs, method='sequence_logits')
  weights = {role: interventions.stack(captured, names[role]) for role in roles}
  # One name per role, its steps stacked: `[B, 1, T, heads, N]`; the panels want `[B, T, heads, N]`.
  return logits, {role: w[:, 0] if w.ndim == 5 else w for role, w in weights.items()}


class Copy(Task):
  """Bit sequences through a sequence model; see the module docstring.

  Batches: `{'inputs': float32 [B, T, W + 1], 'targets': float32 [B, T, W], 'weights': float32
  [B, T] (1 on the output steps), 'index': int32 [B]}`.
  """

  interface = SequenceModel
  unit = 'bits'
  selection_metric = 'sequence_accuracy'
  samples_header = 'length | wrong bits | input bits (one vector per group) | output bits'

  @staticmethod
  def dataset_config():
    return algorithmic.default_config()

  def __init__(self, config, workdir: str):
    del workdir  # nothing is derived from the data
    self.data = algorithmic.build(config.dataset)

  def model_args(self) -> dict[str, Any]:
    return dict(input_size=self.data.width + 1, output_size=self.data.width)

  def loss(self, model, batch, rng):
    logits = model.sequence_logits(batch['inputs'], deterministic=False, rngs=nnx.Rngs(dropout=rng))
    counts = bit_counts(logits, batch)
    return _loss_sum(logits, batch) / jnp.maximum(counts['bits'], 1), counts

  def eval_counts(self, model, batch):
    logits = model.sequence_logits(batch['inputs'], deterministic=True)
    return dict(loss_sum=_loss_sum(logits, batch), **bit_counts(logits, batch))

  def summarize(self, counts):
    metrics = dict(
      bit_error_rate=counts['bit_errors'] / max(counts['bits'], 1),
      sequence_accuracy=counts['exact'] / max(counts['sequences'], 1),
    )
    if 'loss_sum' in counts:  # evaluation: cross-entropy in nats per bit
      metrics['loss'] = counts['loss_sum'] / max(counts['bits'], 1)
    return metrics

  def predict(self, model, batch, options: EvalOptions):
    logits, weights = _predict(*nnx.split(model), batch['inputs'])
    return dict(outputs=logits > 0, **weights)

  def sample(self, split, row):
    sequences = self.data.sequences(split)
    length = int(sequences.lengths[row['index']])
    bits = sequences.bits[row['index'], :length]  # [L, W]
    outputs = np.asarray(row['outputs'])[length + 1 : 2 * length + 1]  # [L, W]
    wrong = int((outputs != bits).sum())
    show = lambda b: ' '.join(''.join(str(int(x)) for x in v) for v in b)
    record = dict(
      index=row['index'],
      length=length,
      wrong=wrong,
      bits=bits,
      outputs=outputs,
      inputs=np.asarray(row['inputs'])[: 2 * length + 1],
      line=f'{length} | {wrong} | {show(bits)} | {show(outputs)}',
    )
    for key in ('read', 'write'):
      if key in row:  # [T, heads, N], the first head, up to the last output step
        record[key] = np.asarray(row[key])[: 2 * length + 1, 0]
    return record

  def prediction_metrics(self, samples):
    """The bit error rate and exactly copied share of the predicted sequences."""
    if not samples:
      return {}
    bits = sum(s['length'] for s in samples) * self.data.width
    return dict(
      predicted_bit_error_rate=sum(s['wrong'] for s in samples) / bits,
      predicted_sequence_accuracy=float(np.mean([s['wrong'] == 0 for s in samples])),
    )

  def draw(self, model, samples, out_dir, options):
    """The copy figure per drawn sample: inputs, targets and outputs over time and, for a model
    with a memory, its write and read weightings over the slots (one PNG each)."""
    del model  # the weightings were computed with the predictions
    paths = []
    for sample in samples[: options.num_pictures]:
      path = os.path.join(out_dir, f'copy_{sample["index"]:04d}.png')
      memory_pictures.save_time_panels(
        path, self.panels(sample), title=f'length {sample["length"]}: {sample["wrong"]} wrong bits'
      )
      paths.append(path)
    return paths

  def explore(self, model, samples, options):
    """Per sample, the copy figure's panels over time."""
    del model, options  # the weightings were computed with the predictions
    show = lambda bits: ' '.join(''.join(str(int(x)) for x in v) for v in bits)
    return [
      dict(
        index=s['index'],
        reference=show(s['bits']),
        prediction=show(s['outputs']),
        correct=s['wrong'] == 0,
        views=[dict(kind='time', panels=self.panels(s))],
      )
      for s in samples
    ]

  def panels(self, sample) -> list[tuple[str, np.ndarray]]:
    """`(name, values [rows, T])` over the sample's time steps: inputs, the target bits and the
    outputs where they are due, then the write and read weightings over the memory slots."""
    steps, length = len(sample['inputs']), sample['length']
    targets, outputs = np.zeros((2, steps, self.data.width))
    targets[length + 1 :], outputs[length + 1 :] = sample['bits'], sample['outputs']
    return [('inputs', sample['inputs'].T), ('targets', targets.T), ('outputs', outputs.T)] + [
      (f'{key} weightings', sample[key].T) for key in ('write', 'read') if key in sample
    ]
