"""The attention weights that pictures show, from one jitted forward over padded batches.

A task that runs its model to draw runs it here, never once per example: an eager forward per
example compiles every operation again for each new shape, and a thousand pictures of a Seq2Seq
ran out of memory maps (LLVM "Cannot allocate memory", then a segmentation fault). Every field
of every example is padded to its longest over the examples drawn, and every batch to one size,
so the forward compiles once per call; the models mask their padding, so a real position's
weights are the ones the example alone gets.
"""

from collections.abc import Callable, Iterator, Sequence
import functools

from flax import nnx
import jax
import numpy as np

# Examples per forward: large enough that few forwards run, small enough that a batch of
# weights [B, L, N, T, S] of a large model stays a few hundred MB at most.
BATCH_SIZE = 32


def as_heads(weights: jax.Array, queries: int) -> jax.Array:
  """Attention stacked over layers (`interventions.stack`) as heads, `[B, L, N, T, S]`.

  A recurrent decoder attends once a step with one query, recorded `[B, L, T, 1, S]`: the same
  array as one head `[B, L, 1, T, S]`. A Transformer's `[B, L, N, T, S]` stays as it is.
  """
  return weights.reshape(*weights.shape[:2], -1, queries, weights.shape[-1])


@functools.partial(jax.jit, static_argnums=(0, 1))
def _forward(
  forward: Callable[..., jax.Array],
  graphdef: nnx.GraphDef,
  state: nnx.State,
  arrays: tuple[jax.Array, ...],
) -> jax.Array:
  """`forward(model, *arrays)` of the model `graphdef, state`; compiled once per shape."""
  return forward(nnx.merge(graphdef, state), *arrays)


def batched_weights(
  forward: Callable[..., jax.Array],
  model: nnx.Module,
  examples: Sequence[Sequence[Sequence[int]]],
  *,
  pad_ids: Sequence[int],
  crop: Sequence[int],
  batch_size: int = BATCH_SIZE,
) -> Iterator[np.ndarray]:
  """Per example, in order, the weights `forward` computes for it alone, cropped to its lengths.

  Args:
    forward: `(model, *fields) -> weights [B, ..., X1, X2, ...]` with one int32 `[B, length]`
      array per field; a module-level function, so that its compilation is reused.
    model: the NNX model (run without dropout by `forward`).
    examples: per example, its fields: id sequences (e.g. source ids, decoder inputs).
    pad_ids: per field, the id that pads it, one the model masks (or, after a causal position,
      never reads).
    crop: per trailing axis X1, X2, ... of the weights, the field whose length it has, e.g.
      `(1, 0)` for cross-attention `[..., T, S]` of decoder inputs (field 1) over a source (0).
    batch_size: examples per forward; fewer examples than this run as one smaller batch.

  Yields:
    NumPy weights `[..., len(example[crop[0]]), len(example[crop[1]]), ...]` per example, a
    batch's worth at a time (so a batch is freed once its pictures are drawn).
  """
  if not examples:
    return
  lengths = np.array([[len(field) for field in example] for example in examples])  # [E, F]
  longest = lengths.max(axis=0)  # [F]
  size = min(batch_size, len(examples))
  graphdef, state = nnx.split(model)
  for start in range(0, len(examples), size):
    chunk = list(examples[start : start + size])
    chunk += [chunk[0]] * (size - len(chunk))  # rows that fill the last batch, dropped below
    arrays = tuple(
      np.stack(
        [
          np.pad(
            np.asarray(example[f], np.int32), (0, longest[f] - len(example[f])), constant_values=pad
          )
          for example in chunk
        ]
      )  # [B, longest[f]]
      for f, pad in enumerate(pad_ids)
    )
    weights = np.asarray(_forward(forward, graphdef, state, arrays))  # [B, ..., X1, X2, ...]
    for row, sizes in zip(weights, lengths[start : start + size]):
      yield row[(..., *(slice(0, sizes[f]) for f in crop))]
