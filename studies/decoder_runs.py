"""What the studies of a pretrained decoder (streaming.py, attention_distance.py,
decoder_heads.py) share: the checkpoint and a text's tokens loaded, each head's readings of one
pass, the first-token weight, and their flags' comma-separated integers.
"""

import os
from typing import Callable

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from models import interventions
import sources


def read_stream(path: str, tokenizer, tokens: int) -> np.ndarray:
  """The first `tokens` ids of the text file at `path`, `[tokens]` int32."""
  if not os.path.isfile(path):
    raise ValueError(
      f'--text={path!r} is not a file; give a plain UTF-8 English text, e.g. '
      "shared/data/books/pride_and_prejudice.txt of the project's data folder."
    )
  with open(path, encoding='utf-8') as f:
    ids = tokenizer.encode(f.read())
  if len(ids) < tokens:
    raise ValueError(f'--text={path!r} has {len(ids)} tokens; --tokens={tokens} asks for more.')
  return np.asarray(ids[:tokens], np.int32)


def load_with_stream(checkpoint: str, text: str, tokens: int):
  """The checkpoint or workdir (`sources.load_decoder`) as a causal language model, and
  the first `tokens` ids of the `text` file in its own tokenizer (`read_stream`)."""
  decoder = sources.load_decoder(checkpoint)
  return decoder.model, read_stream(text, decoder.tokenizer, tokens)


def first_token_weight(weights, first_query: int = 1):
  """The mean weight that queries `first_query` .. T-1 give position 0 (the attention sink),
  over them and the rows: causal weights `[B, ..., N, T, T]` -> `[..., N]` (NumPy or JAX)."""
  return weights[..., first_query:, 0].mean(axis=(0, -1))


def per_head(
  model: nnx.Module, ids: np.ndarray, reduce: Callable[[jax.Array], dict[str, jax.Array]]
) -> dict[str, np.ndarray]:
  """Each layer and head's readings of one pass of `ids [B, T]` through the model's
  self-attention: `reduce` turns one layer's weights `[B, N, T, T]` into named readings `[N]`
  inside the compiled call, so no `[L, N, T, T]` array is kept; each comes back `[L, N]` (keys
  sorted, as `jax.jit` returns a dict)."""
  graphdef, state = nnx.split(model)
  pattern = model.attention_names['self']

  @jax.jit
  def measure(state, ids):
    _, captured = interventions.capture(nnx.merge(graphdef, state), ids, method='encode')
    reduced = {name: reduce(value) for name, value in captured.items() if name.endswith('/weights')}
    return {
      kind: interventions.stack({name: r[kind][None] for name, r in reduced.items()}, pattern)[0]
      for kind in next(iter(reduced.values()))
    }

  out = measure(state, jnp.asarray(ids))
  return {kind: np.asarray(value) for kind, value in out.items()}


def integers(text: str, flag: str, *, zero: bool) -> tuple[int, ...]:
  """`flag`'s comma-separated integers, each at least 1 (at least 0 with `zero`).

  Raises:
    ValueError: `text` is not such a list; the message names `flag`.
  """
  try:
    values = tuple(int(part) for part in text.split(','))
  except ValueError:
    values = ()
  if not values or min(values) < (0 if zero else 1):
    kind = 'non-negative' if zero else 'positive'
    raise ValueError(f'{flag} must be {kind} integers separated by commas, got {text!r}.')
  return values
