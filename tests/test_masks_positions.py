"""Masks and sinusoidal positions against literal arrays and the paper's formula."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention.masks import causal_mask, combine_masks, padding_mask, padding_mask_from_ids
from attention.positions import sinusoidal_embedding, sinusoidal_positions

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
  np.testing.assert_array_equal(jax.jit(lambda o: causal_mask(2, 4, offset=o))(jnp.int32(2)),
                                [[T, T, T, F], [T, T, T, T]])


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
  np.testing.assert_array_equal(padding_mask_from_ids(ids, pad_id=7),
                                [[[T, T, T, T]], [[F, T, T, T]]])


def test_padding_masks_reject_bad_ndim():
  """lengths that are not [B] and ids that are not [B, S] raise ValueError."""
  with pytest.raises(ValueError, match="lengths"):
    padding_mask(jnp.array([[2, 3]]), 3)
  with pytest.raises(ValueError, match="lengths"):
    padding_mask(jnp.array(2), 3)
  with pytest.raises(ValueError, match="ids"):
    padding_mask_from_ids(jnp.array([1, 2, 0]))


def test_combine_masks_ands_with_broadcasting():
  """A causal [T, S] mask and a padding [B, 1, S] mask combine into their AND, [B, T, S]."""
  causal = np.tril(np.ones((3, 3), bool))
  pad = np.array([[[T, T, F]], [[T, F, F]]])
  out = combine_masks(jnp.asarray(causal), jnp.asarray(pad))
  assert out.shape == (2, 3, 3)
  np.testing.assert_array_equal(out, [
      [[T, F, F], [T, T, F], [T, T, F]],
      [[T, F, F], [T, F, F], [T, F, F]],
  ])


def test_combine_masks_skips_none():
  """None entries are ignored; with no real masks the result is None."""
  m = jnp.array([[T, F], [F, T]])
  np.testing.assert_array_equal(combine_masks(None, m, None), m)
  assert combine_masks() is None
  assert combine_masks(None, None) is None


def test_combine_masks_rejects_non_broadcasting_shapes():
  """Masks whose shapes do not broadcast raise ValueError naming the shapes."""
  with pytest.raises(ValueError, match=r"\(3, 3\)"):
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
  np.testing.assert_allclose(pe[1], [np.sin(1.0), np.cos(1.0), np.sin(0.1), np.cos(0.1)],
                             atol=1e-6)


def test_sinusoidal_embedding_explicit_positions():
  """Embedding explicit positions [..] gives the matching rows of the position table."""
  positions = np.array([[3, 7, 0], [12, 1, 1]])
  out = sinusoidal_embedding(jnp.asarray(positions), 8)
  assert out.shape == (2, 3, 8)
  table = np.asarray(sinusoidal_positions(13, 8))
  np.testing.assert_allclose(out, table[positions], atol=1e-6)
  np.testing.assert_allclose(sinusoidal_embedding(jnp.int32(5), 8), table[5], atol=1e-6)


@pytest.mark.parametrize("dim", [5, 0, -2])
def test_sinusoidal_bad_dim_raises(dim):
  """An odd or non-positive dim raises ValueError naming it."""
  with pytest.raises(ValueError, match=str(dim)):
    sinusoidal_positions(4, dim)
  with pytest.raises(ValueError, match="even"):
    sinusoidal_embedding(jnp.arange(4), dim)
