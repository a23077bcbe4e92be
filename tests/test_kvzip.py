"""KVzip's scores against NumPy, written from kvpress's `KVzipPress.score_kvzip` (one chunk); its
kept sets on a tiny decoder are in tests/test_press_decoding.py."""

import jax
import jax.numpy as jnp
import numpy as np

from attention import presses


def kvzip_reference(queries, keys, *, scale, context, prefix, sink):
  """kvpress's steps in NumPy: the sink keys, the chunk's, the repeat block's (causal); softmax;
  the chunk's columns; max over the repeating queries and a head's query heads; the first `sink`
  positions 1, the rest of the template's opening 0."""
  b, n, r, _ = queries.shape
  kv = keys.shape[1]
  first = min(sink, prefix)
  chosen = np.concatenate(
    [keys[:, :, :first], keys[:, :, prefix:context], keys[:, :, context : context + r]], axis=2
  )
  chosen = np.repeat(chosen, n // kv, axis=1)
  logits = np.einsum('bnth,bnsh->bnts', queries, chosen) * scale
  mask = np.triu(np.full((r, r), -np.inf), k=1)  # the repeat block sees itself causally
  logits[..., -r:] += mask
  weights = np.exp(logits - logits.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  chunk = weights[..., first : first + context - prefix].max(axis=2)  # [B, N, context - prefix]
  chunk = chunk.reshape(b, kv, n // kv, -1).max(axis=2)
  scores = np.zeros((b, kv, context))
  scores[..., :sink] = 1.0
  scores[..., prefix:] = chunk
  return scores


def test_kvzip_scores_equal_kvpress_formula():
  rng = np.random.default_rng(0)
  b, n, kv, h, context, r = 2, 6, 2, 8, 30, 12
  queries = rng.normal(size=(b, n, r, h))
  keys = rng.normal(size=(b, kv, context + r, h))
  with jax.enable_x64(True):
    # An opening shorter and longer than the sink; the repeating queries in one block and in
    # three, the last one short.
    for prefix, block in ((2, 128), (7, 128), (7, 5)):
      got = presses.kvzip_scores(
        jnp.asarray(queries),
        jnp.asarray(keys),
        None,
        scale=0.3,
        context=context,
        prefix=prefix,
        block=block,
      )
      expected = kvzip_reference(queries, keys, scale=0.3, context=context, prefix=prefix, sink=4)
      np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-10, atol=1e-12)
