"""Masks and sinusoidal positions against literal arrays and the paper's formula."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention.masks import causal_mask, combine_masks, padding_mask, padding_mask_from_ids
from attention.positions import rotary_embedding, sinusoidal_embedding, sinusoidal_positions

T, F = True, False


def test_causal_mask_square():
  """causal_mask(3) is the lower-triangular boolean matrix."""
  mask = causal_mask(3)
  assert mask.dtype == jnp.bool_
  np.testing.assert_array_equal(mask, [[T, F, F], [T, T, F], [T, T, T]])


def test_causal_mask_with_offset():
  """causal_mask(2, 4, offset=2): query i sees keys 0 .. i + 2."""
  np.testing.assert_array_equal(causal_mask(2, 4, offset=2), [[T, T, T, F], [T, T, T, T]])


def test_causal_mask_traced_offset_under_jit():
  """A traced integer offset works inside jit and gives the same masks as literal offsets."""
  fn = jax.jit(lambda offset: causal_mask(1, 4, offset=offset))
  np.testing.assert_array_equal(fn(jnp.int32(0)), [[T, F, F, F]])
  np.testing.assert_array_equal(fn(jnp.int32(2)), [[T, T, T, F]])
  np.testing.assert_array_equal(
    jax.jit(lambda o: causal_mask(2, 4, offset=o))(jnp.int32(2)), [[T, T, T, F], [T, T, T, T]]
  )


def test_padding_mask_from_lengths():
  """padding_mask([2, 0, 3], 3) marks the first `length` keys of each example, shape [B, 1, S]."""
  mask = padding_mask(jnp.array([2, 0, 3]), 3)
  assert mask.shape == (3, 1, 3)
  np.testing.assert_array_equal(mask, [[[T, T, F]], [[F, F, F]], [[T, T, T]]])


def test_padding_mask_from_ids():
  """Ids equal to the pad id (0, or a custom one) are masked; shape [B, 1, S]."""
  ids = jnp.array([[5, 3, 0, 0], [7, 0, 2, 9]])
  mask = padding_mask_from_ids(ids)
  assert mask.shape == (2, 1, 4)
  np.testing.assert_array_equal(mask, [[[T, T, F, F]], [[T, F, T, T]]])
  np.testing.assert_array_equal(
    padding_mask_from_ids(ids, pad_id=7), [[[T, T, T, T]], [[F, T, T, T]]]
  )


def test_padding_masks_reject_bad_ndim():
  """lengths that are not [B] and ids that are not [B, S] raise ValueError."""
  with pytest.raises(ValueError, match='lengths'):
    padding_mask(jnp.array([[2, 3]]), 3)
  with pytest.raises(ValueError, match='lengths'):
    padding_mask(jnp.array(2), 3)
  with pytest.raises(ValueError, match='ids'):
    padding_mask_from_ids(jnp.array([1, 2, 0]))


def test_combine_masks_ands_with_broadcasting():
  """A causal [T, S] mask and a padding [B, 1, S] mask combine into their AND, [B, T, S]."""
  causal = np.tril(np.ones((3, 3), bool))
  pad = np.array([[[T, T, F]], [[T, F, F]]])
  out = combine_masks(jnp.asarray(causal), jnp.asarray(pad))
  assert out.shape == (2, 3, 3)
  np.testing.assert_array_equal(
    out, [[[T, F, F], [T, T, F], [T, T, F]], [[T, F, F], [T, F, F], [T, F, F]]]
  )


def test_combine_masks_skips_none():
  """None entries are ignored; with no real masks the result is None."""
  m = jnp.array([[T, F], [F, T]])
  np.testing.assert_array_equal(combine_masks(None, m, None), m)
  assert combine_masks() is None
  assert combine_masks(None, None) is None


def test_combine_masks_rejects_non_broadcasting_shapes():
  """Masks whose shapes do not broadcast raise ValueError naming the shapes."""
  with pytest.raises(ValueError, match=r'\(3, 3\)'):
    combine_masks(jnp.ones((3, 3), bool), jnp.ones((2, 1, 4), bool))


def test_sinusoidal_positions_hand_computed():
  """sinusoidal_positions(2, 4): row 0 is [0, 1, 0, 1]; row 1 is sin/cos of 1 and 1/100."""
  pe = sinusoidal_positions(2, 4)
  assert pe.shape == (2, 4) and pe.dtype == jnp.float32
  np.testing.assert_allclose(pe[0], [0.0, 1.0, 0.0, 1.0], atol=1e-5)
  np.testing.assert_allclose(pe[1], [0.84147, 0.54030, 0.00999, 0.99995], atol=1e-5)


def test_sinusoidal_positions_match_paper_formula():
  """A (50, 16) table equals PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
  length, d = 50, 16
  expected = np.zeros((length, d))
  for pos in range(length):
    for i in range(d // 2):
      angle = pos / 10000.0 ** (2 * i / d)
      expected[pos, 2 * i] = np.sin(angle)
      expected[pos, 2 * i + 1] = np.cos(angle)
  np.testing.assert_allclose(sinusoidal_positions(length, d), expected, atol=1e-5)


def test_sinusoidal_base_changes_wavelengths():
  """A custom base enters the formula: with base=100 and d=4, feature 2 of pos 1 is sin(0.1)."""
  pe = sinusoidal_positions(2, 4, base=100.0)
  np.testing.assert_allclose(pe[1], [np.sin(1.0), np.cos(1.0), np.sin(0.1), np.cos(0.1)], atol=1e-6)


def test_sinusoidal_embedding_explicit_positions():
  """Embedding explicit positions [..] gives the matching rows of the position table."""
  positions = np.array([[3, 7, 0], [12, 1, 1]])
  out = sinusoidal_embedding(jnp.asarray(positions), 8)
  assert out.shape == (2, 3, 8)
  table = np.asarray(sinusoidal_positions(13, 8))
  np.testing.assert_allclose(out, table[positions], atol=1e-6)
  np.testing.assert_allclose(sinusoidal_embedding(jnp.int32(5), 8), table[5], atol=1e-6)


@pytest.mark.parametrize('dim', [5, 0, -2])
def test_sinusoidal_bad_dim_raises(dim):
  """An odd or non-positive dim raises ValueError naming it."""
  with pytest.raises(ValueError, match=str(dim)):
    sinusoidal_positions(4, dim)
  with pytest.raises(ValueError, match='even'):
    sinusoidal_embedding(jnp.arange(4), dim)


def test_rotary_hand_computed():
  """D=4, base=100: pair 0 turns by p rad, pair 1 by p * 100^(-1/2) = 0.1 p rad."""
  x = jnp.array([[1.0, 0.0, 0.0, 2.0]] * 2)  # [T=2, D=4]
  out = rotary_embedding(x, jnp.array([0, 3]), base=100.0)
  np.testing.assert_allclose(out[0], [1.0, 0.0, 0.0, 2.0], atol=1e-6)  # position 0: identity
  # Position 3: (1, 0) -> (cos 3, sin 3); (0, 2) -> (-2 sin 0.3, 2 cos 0.3).
  np.testing.assert_allclose(
    out[1], [np.cos(3.0), np.sin(3.0), -2 * np.sin(0.3), 2 * np.cos(0.3)], rtol=1e-6, atol=1e-6
  )


def test_rotary_matches_complex_numpy_and_keeps_norms(rng):
  x = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)  # [B, N, T, D]
  positions = np.arange(5) + 7
  pairs = x[..., 0::2] + 1j * x[..., 1::2]  # [..., T, D/2]
  theta = 10000.0 ** (-np.arange(0, 8, 2) / 8)
  rotated = pairs * np.exp(1j * positions[:, None] * theta)
  expected = np.stack([rotated.real, rotated.imag], axis=-1).reshape(x.shape)
  out = rotary_embedding(jnp.asarray(x), positions)
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)


def test_rotary_halves_is_pairs_with_the_features_permuted(rng):
  """Hugging Face's rotate_half pairs feature i with i + D/2; the same rotation as pairs
  (2i, 2i+1) once the features are interleaved, and it matches Llama's formula."""
  x = rng.standard_normal((3, 5, 8)).astype(np.float32)  # [N, T, D]
  positions = np.arange(5) + 2
  halves = np.asarray(rotary_embedding(jnp.asarray(x), positions, base=500.0, layout='halves'))
  interleave = np.stack([np.arange(4), np.arange(4) + 4], axis=-1).reshape(-1)  # 0, 4, 1, 5, ...
  pairs = np.asarray(rotary_embedding(jnp.asarray(x[..., interleave]), positions, base=500.0))
  np.testing.assert_allclose(halves[..., interleave], pairs, rtol=1e-5, atol=1e-5)
  theta = positions[:, None] * 500.0 ** (-np.arange(0, 8, 2) / 8)  # [T, D/2]
  cos, sin = np.tile(np.cos(theta), 2), np.tile(np.sin(theta), 2)
  rotate_half = np.concatenate([-x[..., 4:], x[..., :4]], axis=-1)
  np.testing.assert_allclose(halves, x * cos + rotate_half * sin, rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match='layout must be one of'):
    rotary_embedding(jnp.asarray(x), positions, layout='gptj')


def test_rotary_scores_depend_only_on_the_offset(rng):
  """q rotated at m and k rotated at n score the same for every (m, n) with the same m - n."""
  q, k = (jnp.asarray(rng.standard_normal((1, 16)), jnp.float32) for _ in range(2))
  score = lambda m, n: float(
    jnp.sum(rotary_embedding(q, jnp.array([m])) * rotary_embedding(k, jnp.array([n])))
  )
  for offset in (0, 3, -5):
    scores = [score(m, m - offset) for m in (5, 17, 40)]
    np.testing.assert_allclose(scores, scores[0], rtol=1e-4)
  assert abs(score(10, 7) - score(10, 2)) > 1e-3  # and it does depend on it


def test_rotary_keeps_bfloat16_and_rejects_odd_features():
  out = rotary_embedding(jnp.ones((3, 4), jnp.bfloat16), jnp.arange(3))
  assert out.dtype == jnp.bfloat16
  with pytest.raises(ValueError, match='feature size must be a positive even number, got 5'):
    rotary_embedding(jnp.ones((3, 5)), jnp.arange(3))
