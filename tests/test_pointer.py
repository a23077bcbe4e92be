"""`attention.copy_logits`, the joint generate-or-copy softmax, against a NumPy loop."""

import jax
import numpy as np

from attention import copy_logits


def _numpy_copy_logits(logits, scores, source_ids, source_mask):
  """`log(exp(logit_w) + Σ_{j real, source_j = w} exp(c_j))` per id held, in float64."""
  mass = np.exp(logits.astype(np.float64))
  b_size, t_size, _ = logits.shape
  for b in range(b_size):
    for t in range(t_size):
      for j, w in enumerate(source_ids[b]):
        if source_mask[b, j]:
          mass[b, t, w] += np.exp(np.float64(scores[b, t, j]))
  return np.log(mass)


def test_copy_logits_pool_repeated_ids_and_ignore_padding():
  rng = np.random.default_rng(0)
  logits = rng.standard_normal((3, 2, 10)).astype(np.float32)
  scores = 3 * rng.standard_normal((3, 2, 4)).astype(np.float32)
  # Example 0 holds id 7 twice (its mass adds up); example 1's padding holds id 4, which another
  # position holds too; example 2 is padding only (filling a last batch): nothing changes.
  source_ids = np.array([[7, 3, 7, 1], [2, 4, 9, 4], [5, 6, 5, 8]])
  source_mask = np.array([[True] * 4, [True, True, True, False], [False] * 4])
  out = np.asarray(copy_logits(logits, scores, source_ids, source_mask))
  np.testing.assert_allclose(
    out, _numpy_copy_logits(logits, scores, source_ids, source_mask), rtol=1e-6, atol=1e-6
  )
  held = np.zeros(logits.shape, bool)
  held[0, :, [7, 3, 1]] = held[1, :, [2, 4, 9]] = True
  np.testing.assert_array_equal(out[~held], logits[~held])  # ids not copied keep their logit
  assert (out[held] > logits[held]).all()


def test_copy_logits_of_large_and_far_apart_scores():
  """Scores beyond exp's float32 range do not overflow; a score 1000 below the largest adds
  nothing to the distribution (its id's logit is floored about 87 below the largest score, a
  probability under 1e-38)."""
  logits = np.zeros((1, 1, 4), np.float32)
  source_ids, real = np.array([[1, 2, 3]]), np.ones((1, 3), bool)
  out = copy_logits(logits, np.array([[[100.0, 30.0, 60.0]]], np.float32), source_ids, real)
  np.testing.assert_allclose(np.asarray(out)[0, 0], [0.0, 100.0, 30.0, 60.0], rtol=1e-6)
  out = copy_logits(logits, np.array([[[500.0, -500.0, 0.0]]], np.float32), source_ids, real)
  probabilities = np.asarray(jax.nn.softmax(out))[0, 0]
  np.testing.assert_allclose(probabilities, [0.0, 1.0, 0.0, 0.0], rtol=1e-6, atol=1e-30)
