"""Greedy and beam search on hand-written toy models with known answers; generate()'s checks; the
searches' argmax.

generate() on a real Seq2Seq is tested in test_seq2seq.py, where a compiled model is at hand."""

import itertools

from flax import nnx
import jax.numpy as jnp
import numpy as np
import pytest

from models.decoding import argmax, beam_search, greedy_search, length_penalty
from models.generation import generate
from models.seq2seq import Seq2Seq

TOL = dict(atol=1e-5, rtol=1e-5)
PAD, BOS, EOS, A, B = 0, 1, 2, 3, 4
VOCAB = 5
IDS = dict(bos_id=BOS, eos_id=EOS, pad_id=PAD)


def first_order(rows: dict[int, dict[int, float]]):
  """A model whose next-token distribution is a fixed table row chosen by the previous token."""
  table = np.full((VOCAB, VOCAB), 1e-12)
  for prev, dist in rows.items():
    for token, p in dist.items():
      table[prev, token] = p
  log_table = jnp.asarray(np.log(table), jnp.float32)

  def tokens_to_logits(ids, step, cache):
    del step
    return log_table[ids], cache

  return tokens_to_logits


def second_order(seed: int):
  """A random model conditioned on the last two tokens; the older one is read from the cache, so
  the search must reorder the cache with its beams. PAD and BOS are (almost) never predicted."""
  logits = np.random.default_rng(seed).normal(size=(VOCAB, VOCAB, VOCAB)) * 2.0
  logits[..., [PAD, BOS]] = -1e9
  table = jnp.asarray(logits, jnp.float32)

  def tokens_to_logits(ids, step, cache):
    del step
    return table[cache['prev'], ids], {'prev': ids}

  logits = logits.astype(np.float32).astype(np.float64)
  return tokens_to_logits, logits - np.log(np.exp(logits).sum(-1, keepdims=True))


def _brute_force(log_table, max_length, alpha, k):
  """All sequences over {EOS, A, B} that end in EOS within max_length, best k by penalised score."""
  found = []
  for n in range(1, max_length + 1):
    for body in itertools.product([A, B], repeat=n - 1):
      seq, prev2, prev, logp = (*body, EOS), BOS, BOS, 0.0
      for token in seq:
        logp += log_table[prev2, prev, token]
        prev2, prev = prev, token
      found.append((logp / ((5.0 + n) / 6.0) ** alpha, list(seq) + [0] * (max_length - n)))
  found.sort(key=lambda item: -item[0])
  return np.array([ids for _, ids in found[:k]]), np.array([s for s, _ in found[:k]])


# The greedy trap: A (0.55) beats B (0.45) first, but B is almost surely followed by EOS.
TRAP = {
  BOS: {A: 0.55, B: 0.45},
  A: {A: 0.4, B: 0.35, EOS: 0.25},
  B: {EOS: 0.9, A: 0.05, B: 0.05},
  EOS: {EOS: 1.0},
}


def test_greedy_falls_into_trap_beam_escapes():
  """Greedy takes A A A (p=.088); a beam of 2 finds B EOS (p=.405), then A B EOS (p=.17325)."""
  fn = first_order(TRAP)
  greedy = greedy_search(fn, {}, batch_size=1, max_length=3, **IDS)
  np.testing.assert_array_equal(greedy, [[A, A, A]])
  ids, scores = beam_search(fn, {}, batch_size=1, beam_size=2, max_length=3, alpha=0.0, **IDS)
  np.testing.assert_array_equal(ids, [[[B, EOS, 0], [A, B, EOS]]])
  np.testing.assert_allclose(scores, [[np.log(0.405), np.log(0.55 * 0.35 * 0.9)]], **TOL)


def test_length_penalty_flips_ranking():
  """[EOS] (p=.5) beats [A, EOS] (p=.45) unpenalised; with alpha=2 the longer one wins:
  log(.45) / (7/6)^2 = -0.5867 > log(.5) / 1 = -0.6931."""
  fn = first_order({BOS: {EOS: 0.5, A: 0.5}, A: {EOS: 0.9, B: 0.1}, B: {EOS: 1.0}})
  ids, scores = beam_search(fn, {}, batch_size=1, beam_size=2, max_length=3, alpha=0.0, **IDS)
  np.testing.assert_array_equal(ids, [[[EOS, 0, 0], [A, EOS, 0]]])
  np.testing.assert_allclose(scores, [[np.log(0.5), np.log(0.45)]], **TOL)
  ids, scores = beam_search(fn, {}, batch_size=1, beam_size=2, max_length=3, alpha=2.0, **IDS)
  np.testing.assert_array_equal(ids, [[[A, EOS, 0], [EOS, 0, 0]]])
  np.testing.assert_allclose(scores, [[np.log(0.45) / (7 / 6) ** 2, np.log(0.5)]], **TOL)
  np.testing.assert_allclose(length_penalty(3, 0.6), (8 / 6) ** 0.6, **TOL)


def test_greedy_eos_per_row_and_zeros_after():
  """Row 0 ends after two tokens (EOS kept, zeros after); row 1 never ends and fills max_length."""
  tables = np.full((2, VOCAB, VOCAB), -10.0, np.float32)
  tables[0, BOS, A] = tables[0, A, EOS] = 0.0  # row 0: A EOS
  tables[1, BOS, B] = tables[1, B, B] = 0.0  # row 1: B B B B
  tables = jnp.asarray(tables)

  def fn(ids, step, cache):
    return tables[cache['row'], ids], cache

  ids = greedy_search(fn, {'row': jnp.arange(2)}, batch_size=2, max_length=4, **IDS)
  np.testing.assert_array_equal(ids, [[A, EOS, 0, 0], [B, B, B, B]])
  assert ids.dtype == jnp.int32


def test_beam_equals_exhaustive_search():
  """With K=6 >= all live prefixes, beam search must return the exact 6 best EOS-terminated
  sequences of a second-order model, scores length-penalised (alpha=0.6), best first; both
  rows of a batch of two get that answer, so beams of different rows never mix."""
  fn, log_table = second_order(0)
  ids, scores = beam_search(
    fn, {'prev': jnp.full((2,), BOS)}, batch_size=2, beam_size=6, max_length=3, alpha=0.6, **IDS
  )
  want_ids, want_scores = _brute_force(log_table, 3, 0.6, 6)
  for row in range(2):
    np.testing.assert_array_equal(ids[row], want_ids)
    np.testing.assert_allclose(scores[row], want_scores, **TOL)


def test_beam_size_one_equals_greedy():
  """Unpenalised (alpha=0), a beam of one keeps exactly the greedy path on a random model."""
  fn, _ = second_order(1)
  cache = {'prev': jnp.full((3,), BOS)}
  greedy = greedy_search(fn, cache, batch_size=3, max_length=6, **IDS)
  ids, _ = beam_search(fn, cache, batch_size=3, beam_size=1, max_length=6, alpha=0.0, **IDS)
  np.testing.assert_array_equal(ids[:, 0], greedy)


@pytest.mark.parametrize(
  'kwargs, field',
  [
    (dict(max_length=0), 'max_length'),
    (dict(beam_size=0), 'beam_size'),
    (dict(batch_size=0), 'batch_size'),
  ],
)
def test_bad_sizes_raise(kwargs, field):
  """Sizes below 1 raise ValueError naming the field before any tracing."""
  fn = first_order(TRAP)
  args = dict(batch_size=1, beam_size=2, max_length=3) | kwargs
  with pytest.raises(ValueError, match=field):
    beam_search(fn, {}, **args, **IDS)
  if field != 'beam_size':
    with pytest.raises(ValueError, match=field):
      greedy_search(fn, {}, batch_size=args['batch_size'], max_length=args['max_length'], **IDS)


def test_generate_bad_sizes_raise():
  """generate() rejects beam_size < 1 and max_length < 1 with a ValueError naming the field."""
  model = nnx.eval_shape(  # abstract: the checks come before any computation
    lambda: Seq2Seq(input_vocab_size=5, output_vocab_size=5, pad_id=PAD, rngs=nnx.Rngs(0))
  )
  x = jnp.ones((1, 3), jnp.int32)
  with pytest.raises(ValueError, match='beam_size'):
    generate(model, x, max_length=3, beam_size=0, **IDS)
  with pytest.raises(ValueError, match='max_length'):
    generate(model, x, max_length=0, **IDS)


def test_searches_use_the_special_ids_they_are_given():
  """Specials that are not 0/1/2: BOS=3 starts, EOS=4 stops, PAD=1 fills the rest of the row."""
  fn = first_order({3: {0: 1.0}, 0: {4: 1.0}, 4: {4: 1.0}})
  ids = dict(bos_id=3, eos_id=4, pad_id=1)
  np.testing.assert_array_equal(
    greedy_search(fn, {}, batch_size=1, max_length=4, **ids), [[0, 4, 1, 1]]
  )
  beams, _ = beam_search(fn, {}, batch_size=1, beam_size=2, max_length=4, **ids)
  np.testing.assert_array_equal(beams[0, 0], [0, 4, 1, 1])


def test_argmax_is_numpys_first_maximum_and_first_nan():
  """Ties go to the lowest index; a NaN counts as the maximum (its first occurrence, as
  `jnp.argmax` and NumPy do); -inf rows and infinities are ordinary values."""
  inf, nan = np.inf, np.nan
  logits = np.array(
    [
      [1.0, 3.0, 3.0, 2.0],
      [-inf, -inf, -inf, -inf],
      [0.0, nan, 5.0, nan],
      [inf, 2.0, inf, -inf],
      [-1.0, -2.0, -0.5, -0.5],
    ],
    np.float32,
  )
  got = argmax(jnp.asarray(logits))
  assert got.dtype == jnp.int32
  np.testing.assert_array_equal(got, [1, 0, 1, 0, 2])
  np.testing.assert_array_equal(got, np.argmax(logits, axis=-1))
  batched = np.random.default_rng(0).integers(0, 4, (2, 3, 50)).astype(np.float32)  # many ties
  np.testing.assert_array_equal(argmax(jnp.asarray(batched)), np.argmax(batched, axis=-1))
