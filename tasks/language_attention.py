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

from models import interventions
from tasks import pictures

Array = jax.Array
# Layers of a deep model the explorer page holds (evenly spaced): SmolLM2's 30 layers of 256-token
# rows made a 26 MB page; prompt.py attention --layers=all shows every layer of a prompt.
EXPLORED_LAYERS = 8


@functools.partial(jax.jit, static_argnums=0)
def logits_and_last_weights(graphdef: nnx.GraphDef, state: nnx.State, inputs: Array):
  """`(logits [B, T, V], last layer's weights [B, N, T, T])` without dropout."""
  model = nnx.merge(graphdef, state)
  logits, captured = interventions.capture(model, inputs, method='token_logits')
  return logits, interventions.stack(captured, model.attention_names['self'])[:, -1]


def self_attention(model, ids: Array) -> Array:
  """Every layer's self-attention weights `[B, L, N, T, T]` over ids `[B, T]` (no dropout)."""
  return interventions.attention(model, 'self', ids, method='token_logits')


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


def explorer_records(samples, weights, tokens) -> list[dict]:
  """Per sample, its self-attention of every head over its model inputs as the explorer page's
  record: of every layer, or for a deep model of `EXPLORED_LAYERS` evenly spaced, one map each.

  Args:
    samples: the task's sample records.
    weights: per sample, its self-attention weights `[L, N, T, T]`.
    tokens: ids -> token strings, the maps' rows and columns.
  """
  records = []
  for sample, sample_weights in zip(samples, weights):
    labels = tokens(sample['inputs'])
    layers = pictures.spread_layers(len(sample_weights), EXPLORED_LAYERS)
    maps = (
      [('self-attention', sample_weights)]
      if len(layers) == len(sample_weights)
      else [
        (f'self-attention, layer {layer}', sample_weights[layer : layer + 1]) for layer in layers
      ]
    )
    records.append(
      dict(
        index=sample['index'],
        reference=sample['reference'],
        prediction=sample['prediction'],
        correct=sample['correct'],
        views=[
          dict(
            kind='attention',
            maps=[dict(name=n, rows=labels, cols=labels, weights=w) for n, w in maps],
          )
        ],
      )
    )
  return records
