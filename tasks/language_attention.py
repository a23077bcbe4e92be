"""Where a language model's attention goes: the hit rate of each head against the positions the
data marks as evidence (MQAR: the matching key), and every head's weights over a sequence, drawn
as a picture per sample and as maps of the explorer page.

`tasks.language` reads the weights through the forwards here (`logits_and_last_weights` for its
predictions, `self_attention` for its pictures) and hands them back.
"""

import functools
import os

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from models import interventions
from models.attention_paths import describe, gated, head_count, head_layers, sparse, stack_layers
from tasks import picture_weights, pictures

Array = jax.Array
# Layers of a deep model the explorer page holds (evenly spaced): SmolLM2's 30 layers of 256-token
# rows made a 26 MB page; prompt.py attention --layers=all shows every layer of a prompt.
EXPLORED_LAYERS = 8


def self_attention_layers(model) -> dict[str, nnx.Module]:
  """`{path: layer}` of the model's self-attention layers, whatever their mechanism
  (`models.attention_paths.head_layers`: a hybrid stack's delta-rule layers too)."""
  return {path: layer for path, layer in head_layers(model).items() if path.endswith('self_attn')}


@functools.partial(jax.jit, static_argnums=0)
def logits_and_last_weights(graphdef: nnx.GraphDef, state: nnx.State, inputs: Array):
  """`(logits [B, T, V], the last layer's weights [B, N, T, T])` without dropout: of the last
  layer that forms weights (a hybrid stack's layers may have other numbers of heads)."""
  model = nnx.merge(graphdef, state)
  logits, captured = interventions.capture(model, inputs, method='token_logits')
  names = [f'{path}/weights' for path in self_attention_layers(model)]
  return logits, captured[[name for name in names if name in captured][-1]]


def self_attention(model, ids: Array) -> Array:
  """Every layer's self-attention weights `[B, L, N, T, T]` over ids `[B, T]` (no dropout), N
  the most heads of a layer: NaN for the heads a layer lacks (a differential layer's maps are
  per pair of heads) and for a layer that forms no weights."""
  _, captured = interventions.capture(model, ids, method='token_logits')
  return stack_layers(captured, list(self_attention_layers(model)), 'weights')


def gate_means(model, ids: Array) -> Array:
  """Every layer's output gate (`output_gate`), the mean over its d_v features, `[B, L, N, T]`;
  NaN for a layer without one."""
  _, captured = interventions.capture(model, ids, method='token_logits')
  return jnp.mean(stack_layers(captured, list(self_attention_layers(model)), 'gate'), axis=-1)


def selections(model, ids: Array) -> Array:
  """Every layer's keys chosen per query by DeepSeek Sparse Attention's indexer, `[B, L, T, T]`:
  1 chosen, 0 not, NaN for a layer without an indexer."""
  _, captured = interventions.capture(model, ids, method='token_logits')
  paths = list(self_attention_layers(model))
  return stack_layers(captured, paths, 'selected', heads=False)


def attention_hits(weights: Array, support: Array) -> Array:
  """Per head, the queries whose strongest weight lands where the data says it should.

  A hit is the support position (MQAR: the matching key) or the one right after it (its value):
  in a causal model only the value's state, which has read its key in the layer below, can hold
  the answer, so an induction head looks there.

  Args:
    weights: `[B, N, T, S]` attention weights of one layer.
    support: int `[B, T]`, the position each query should find, -1 = no such query.

  Returns:
    int32 `[B, N]` hit counts.
  """
  strongest = jnp.argmax(weights, axis=-1)  # [B, N, T]
  target = support[:, None, :]  # [B, 1, T]
  hit = (target >= 0) & ((strongest == target) | (strongest == target + 1))
  return hit.sum(-1).astype(jnp.int32)


def save_head_grids(samples, weights, tokens, out_dir: str) -> list[str]:
  """Every head's attention over each sample's sequence, one PNG each: every layer, or for a
  deep model `pictures.spread_layers` of them; squares mark the support of each query.

  Args:
    samples: the task's sample records (their 'index', 'inputs' and 'support').
    weights: per sample, its self-attention weights `[L, N, T, T]`.
    tokens: ids -> token strings, the axes' labels.
    out_dir: where the pictures go.

  Returns:
    The paths written.
  """
  paths = []
  for sample, sample_weights in zip(samples, weights):
    queries = [(t, s) for t, s in enumerate(sample['support']) if s >= 0]
    path = os.path.join(out_dir, f'attention_heads_{sample["index"]:04d}.png')
    layers = pictures.spread_layers(len(sample_weights))
    which = 'every layer' if len(layers) == len(sample_weights) else f'layers {layers}'
    pictures.save_head_grid(
      path,
      sample_weights[layers],
      tokens(sample['inputs']),
      marks=queries,
      title=f'example {sample["index"]}: attention of {which}, every '
      'head' + (' (squares: the matching key)' if queries else ''),
      layers=layers,
    )
    paths.append(path)
  return paths


def mechanism_readings(model, samples, tokenizer) -> dict:
  """What the explorer shows of each self-attention layer besides its weights (one jitted
  forward per reading, only where a layer has it): `{'labels': [what each layer is
  (`attention_paths.describe`)], 'counts': [its heads], 'gate': per sample `[L, N, T]`
  (`gate_means`) or None, 'selected': per sample `[L, T, T]` (`selections`) or None}`; the
  samples' inputs are padded with `tokenizer.pad_id`."""
  layers = list(self_attention_layers(model).values())
  examples = [(sample['inputs'],) for sample in samples]

  def read(forward, crop):
    return list(
      picture_weights.batched_weights(
        forward, model, examples, pad_ids=(tokenizer.pad_id,), crop=crop
      )
    )

  return dict(
    labels=[describe(layer) for layer in layers],
    counts=[head_count(layer) for layer in layers],
    gate=read(gate_means, (0,)) if any(map(gated, layers)) else None,
    selected=read(selections, (0, 0)) if any(map(sparse, layers)) else None,
  )


def attention_view(
  weights,
  tokens: list[str],
  layers: list[int],
  labels,
  counts,
  *,
  prefix: str = 'self-attention, ',
  together: bool = True,
) -> dict:
  """The explorer's view of self-attention weights `[L, N, T, T]` (NaN-padded as
  `self_attention` gives them) over `tokens`, of the `layers` shown: with `together`, one map of
  them all where they are every layer and each has every head; else a map per layer, named
  `prefix` + its number, and what it is where the layers differ (`labels`, `counts`: what each
  layer is and its heads, `mechanism_readings`; empty where unknown). A layer that forms no
  weights is a note, not a map."""
  uniform = not np.isnan(weights).any()
  if together and uniform and len(layers) == len(weights):
    maps = [dict(name='self-attention', rows=tokens, cols=tokens, weights=weights)]
    return dict(kind='attention', maps=maps)
  mixed = bool(labels) and (not uniform or len(set(labels)) > 1)
  maps, notes = [], []
  for layer in layers:
    label = f'layer {layer}' + (f': {labels[layer]}' if mixed else '')
    present = ~np.isnan(weights[layer]).all(axis=(1, 2))  # [N]: the heads this layer has
    if not present.any():
      notes.append(f'{label} forms no attention weights (no map of queries over keys).')
      continue
    w = weights[layer : layer + 1, : counts[layer] if counts else int(present.sum())]
    maps.append(dict(name=prefix + label, rows=tokens, cols=tokens, weights=w))
  return dict(kind='attention', maps=maps, notes=notes)


def mechanism_views(tokens: list[str], layers: list[int], labels, counts, gate, selected):
  """The explorer's views of the output gates (`gate [L, N, T]`, NaN where a layer has none) and
  of the keys DeepSeek Sparse Attention selected (`selected [L, T, T]`) of the `layers` shown."""
  views = []
  shown = lambda values: [l for l in layers if values is not None and not np.isnan(values[l]).all()]
  gates = [(f'layer {l}: {labels[l]}', gate[l, : counts[l]]) for l in shown(gate)]
  if gates:
    views.append(dict(kind='gate', name='output gate (mean over d_v)', tokens=tokens, layers=gates))
  chosen = [(f'layer {l}: {labels[l]}', selected[l] > 0.5) for l in shown(selected)]
  if chosen:
    views.append(dict(kind='selected', name='keys selected', tokens=tokens, layers=chosen))
  return views


def explorer_records(samples, weights, tokens, readings: dict | None = None) -> list[dict]:
  """Per sample, its self-attention of every head over its model inputs as the explorer page's
  record: of every layer, or for a deep model of `EXPLORED_LAYERS` evenly spaced (`attention_view`),
  with the output gates and the sparse attention's chosen keys of those layers where the model
  has them (`mechanism_views`).

  Args:
    samples: the task's sample records.
    weights: per sample, its self-attention weights `[L, N, T, T]` (`self_attention`).
    tokens: ids -> token strings, the maps' rows and columns.
    readings: `mechanism_readings`, or None (no labels, no gates, no chosen keys).
  """
  readings = readings or {}
  labels, counts = readings.get('labels') or [], readings.get('counts') or []
  records = []
  for i, (sample, sample_weights) in enumerate(zip(samples, weights)):
    names = tokens(sample['inputs'])
    layers = pictures.spread_layers(len(sample_weights), EXPLORED_LAYERS)
    views = [attention_view(sample_weights, names, layers, labels, counts)]
    extra = [readings.get(key) for key in ('gate', 'selected')]
    views += mechanism_views(
      names, layers, labels, counts, *(None if x is None else x[i] for x in extra)
    )
    records.append(
      dict(
        index=sample['index'],
        reference=sample['reference'],
        prediction=sample['prediction'],
        correct=sample['correct'],
        views=views,
      )
    )
  return records
