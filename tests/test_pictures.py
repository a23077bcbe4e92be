"""The static figures at the lengths their configs use: long self-attention grids as a window whose
labels keep a legible size, patches drawn as patches with a colour bar."""

import matplotlib.image
import numpy as np

from tasks import pictures


def _pixels(path) -> np.ndarray:
  return matplotlib.image.imread(str(path))[..., :3]  # [H, W, 3] in [0, 1]


def test_a_gpt_text_grid_is_a_legible_window_of_the_last_positions(rng, tmp_path):
  length, layers, heads = 128, 1, 2  # configs/gpt_text.py's length
  weights = rng.dirichlet(np.ones(length), size=(layers, heads, length))
  path = tmp_path / 'grid.png'
  pictures.save_head_grid(
    path,
    weights,
    [f't{i}' for i in range(length)],
    title='example 0',
    marks=[(length - 1, length - 2), (3, 1)],
  )
  height, width = _pixels(path).shape[:2]
  # At least 5 pixels a token across each panel, where 128 tokens could have no more than 2.
  assert width / (heads * pictures.WINDOW) >= 5 and width < 4000 and height < 2500


def test_image_maps_are_patches_with_sharp_edges_and_a_colour_bar(tmp_path):
  grid = np.zeros((4, 4))
  grid[1, 2] = 1.0  # one bright patch
  path = tmp_path / 'image.png'
  pictures.save_image_attention(
    path, np.full((28, 28, 1), 128, np.uint8), [('rollout', grid)], title='label 7, predicted 7'
  )
  pixels = _pixels(path)
  body = pixels[:, : int(pixels.shape[1] * 0.85)]  # the colour bar left out
  warm = body[body[..., 0] - body[..., 2] > 0.2]  # the bright patch
  # Drawn as a patch: one colour over a square of pixels (bilinear smoothing gives ~90 shades).
  assert len(warm) > 1000 and len({tuple(np.round(p, 2)) for p in warm}) <= 3
  bar = pixels[:, int(pixels.shape[1] * 0.85) :]
  assert len({tuple(np.round(p, 2)) for p in bar.reshape(-1, 3)}) > 30  # the colour bar's ramp


def test_a_deep_models_grid_shows_layers_evenly_spaced_first_and_last_included():
  assert pictures.spread_layers(30) == [0, 10, 19, 29]
  assert pictures.spread_layers(3) == [0, 1, 2] and pictures.spread_layers(1) == [0]
  assert pictures.spread_layers(18, count=2) == [0, 17]
