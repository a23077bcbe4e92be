"""The captioner's CNN image encoder (`models.captioning`, `encoder='cnn'`): regions from a
small CNN, one per cell of its last feature map, with their 2-D positions.

Shapes: images float `[B, H, W, C]`; region features `[B, R, D]` on a `gh x gw` grid, row-major.
"""

from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp

from models.layers import dense, is_int
from models.vision import GridPositions

Array = jax.Array


def check_cnn(image_shape: tuple[int, int, int], channels: Any) -> None:
  """Raises ValueError unless `channels` are positive ints whose stages fit the image."""
  if not (
    isinstance(channels, (tuple, list)) and channels and all(is_int(c) and c > 0 for c in channels)
  ):
    raise ValueError(
      f'cnn_channels must be a non-empty sequence of positive integers; got {channels!r}.'
    )
  scale = 2 ** len(channels)
  if image_shape[0] % scale or image_shape[1] % scale:
    raise ValueError(
      f"encoder='cnn' with {len(channels)} stages (cnn_channels) halves H and W "
      f'{len(channels)} times, so both must be divisible by {scale}; got '
      f'image_shape={image_shape}.'
    )


class ConvEncoder(nnx.Module):
  """Regions from a small CNN: per stage a 3x3 convolution, ReLU and 2x2 max pooling.

  k stages give a `H/2^k x W/2^k` grid; a linear layer (a 1x1 convolution) maps each cell to D and
  `GridPositions` add where it is. The receptive field stays small (10 x 10 pixels around a
  4 x 4 cell for two stages), so a region describes its own part of the image, which is what lets
  attention point at it.
  """

  def __init__(
    self,
    image_shape: tuple[int, int, int],
    channels: tuple[int, ...],
    d_model: int,
    *,
    positions: str,
    rngs: nnx.Rngs,
  ):
    h, w, c = image_shape
    self.grid = (h // 2 ** len(channels), w // 2 ** len(channels))
    self.convs = nnx.List(
      [
        nnx.Conv(c_in, c_out, kernel_size=(3, 3), padding='SAME', rngs=rngs)
        for c_in, c_out in zip((c, *channels[:-1]), channels)
      ]
    )
    self.proj = dense(channels[-1], d_model, rngs=rngs)
    self.positions = GridPositions(positions, self.grid, d_model, rngs=rngs)

  def __call__(self, images: Array) -> Array:
    """Images `[B, H, W, C]` -> region features `[B, gh*gw, D]`, row-major."""
    x = images
    for conv in self.convs:  # each stage: [B, h, w, c_in] -> [B, h/2, w/2, c_out]
      x = nnx.max_pool(jax.nn.relu(conv(x)), window_shape=(2, 2), strides=(2, 2))
    x = self.proj(x)  # [B, gh, gw, D]
    x = jnp.reshape(x, (x.shape[0], -1, x.shape[-1]))  # [B, R, D]
    return x + self.positions().astype(x.dtype)
