"""The Vision Transformer (Dosovitskiy et al. 2021) and the image pieces the vision models share.

Shapes: images float `[B, H, W, C]`, channels last. A `ph x pw` patch size cuts them into a grid of
`gh x gw` patches (`gh = H / ph`, `gw = W / pw`) taken in row-major order: patch `r * gw + c` covers
image rows `[r ph, (r+1) ph)` and columns `[c pw, (c+1) pw)`. Self-attention weights, read by
name through `models.interventions`, are `[B, L, N, T, T]` (L layers, N heads, T tokens).
"""

from typing import Any, ClassVar

from flax import nnx
import jax
import jax.numpy as jnp

import attention
from models.blocks import encoder_stack
from models.embeddings import ATTENTION_POSITIONS
from models.layers import check_choice, dense, is_int
from models.stack_config import StackConfig

Array = jax.Array
POSITIONS_2D = ('learned', 'sinusoidal')
POOLINGS = ('cls', 'mean')


def as_pair(field: str, value: Any) -> tuple[int, int]:
  """`value`, a positive int or a pair of them, as `(rows, columns)`; else ValueError naming it."""
  pair = (value, value) if is_int(value) else value
  if not (
    isinstance(pair, (tuple, list)) and len(pair) == 2 and all(is_int(v) and v > 0 for v in pair)
  ):
    raise ValueError(f'{field} must be a positive integer or a pair of them; got {value!r}.')
  return int(pair[0]), int(pair[1])


def check_image_shape(image_shape: Any) -> tuple[int, int, int]:
  """`image_shape` as `(H, W, C)`; ValueError unless it is three positive integers."""
  if not (
    isinstance(image_shape, (tuple, list))
    and len(image_shape) == 3
    and all(is_int(v) and v > 0 for v in image_shape)
  ):
    raise ValueError(f'image_shape must be three positive integers (H, W, C); got {image_shape!r}.')
  return tuple(int(v) for v in image_shape)


def patch_grid(image_size: tuple[int, int], patch: tuple[int, int]) -> tuple[int, int]:
  """The grid `(gh, gw)` of `patch` `(ph, pw)` over `image_size` `(H, W)`; both must divide."""
  if image_size[0] % patch[0] or image_size[1] % patch[1]:
    raise ValueError(f'patch_size {patch} must divide the image size (H, W) = {image_size}.')
  return image_size[0] // patch[0], image_size[1] // patch[1]


def patchify(images: Array, patch: int | tuple[int, int]) -> Array:
  """Cuts images `[B, H, W, C]` into flattened patches `[B, gh*gw, ph*pw*C]`, row-major.

  Each patch's features are its pixels in row-major order, channels fastest, so a linear layer
  on them is a convolution with a `ph x pw` kernel and stride.
  """
  ph, pw = as_pair('patch_size', patch)
  b, h, w, c = images.shape
  gh, gw = patch_grid((h, w), (ph, pw))
  x = jnp.reshape(images, (b, gh, ph, gw, pw, c))  # [B, gh, ph, gw, pw, C]
  x = jnp.transpose(x, (0, 1, 3, 2, 4, 5))  # [B, gh, gw, ph, pw, C]
  return jnp.reshape(x, (b, gh * gw, ph * pw * c))


def unpatchify(patches: Array, grid: tuple[int, int], patch: int | tuple[int, int]) -> Array:
  """The inverse of `patchify`: patches `[B, gh*gw, ph*pw*C]` back to images `[B, H, W, C]`."""
  (gh, gw), (ph, pw) = as_pair('grid', grid), as_pair('patch_size', patch)
  b, n, f = patches.shape
  if n != gh * gw or f % (ph * pw):
    raise ValueError(
      f'unpatchify: patches [B, {n}, {f}] do not fit grid {(gh, gw)} of patch size {(ph, pw)}.'
    )
  c = f // (ph * pw)
  x = jnp.reshape(patches, (b, gh, gw, ph, pw, c))  # [B, gh, gw, ph, pw, C]
  x = jnp.transpose(x, (0, 1, 3, 2, 4, 5))  # [B, gh, ph, gw, pw, C]
  return jnp.reshape(x, (b, gh * ph, gw * pw, c))


def interpolate_positions(
  table: Array, old_grid: tuple[int, int], new_grid: tuple[int, int]
) -> Array:
  """Resizes a table of patch positions to another grid, e.g. to fine-tune at a new resolution.

  Args:
    table: one encoding per patch `[gh*gw, D]`, row-major.
    old_grid: `(gh, gw)` of `table`.
    new_grid: the grid `(gh', gw')` wanted.

  Returns:
    `[gh'*gw', D]`: bilinear interpolation (`jax.image.resize`, half-pixel centres) of the
    `[gh, gw, D]` view; `table` itself at the same grid.
  """
  old_grid, new_grid = as_pair('old_grid', old_grid), as_pair('new_grid', new_grid)
  if table.ndim != 2 or table.shape[0] != old_grid[0] * old_grid[1]:
    raise ValueError(
      f'interpolate_positions: table must be [gh*gw, D] for old_grid={old_grid}; '
      f'got shape {tuple(table.shape)}.'
    )
  if old_grid == new_grid:
    return table
  d = table.shape[1]
  grid = jnp.reshape(table, (*old_grid, d))  # [gh, gw, D]
  resized = jax.image.resize(grid, (*new_grid, d), method='bilinear')  # [gh', gw', D]
  return jnp.reshape(resized, (new_grid[0] * new_grid[1], d))


def check_positions_2d(positions: str, d_model: int) -> None:
  """Raises ValueError unless `positions` is one of `POSITIONS_2D` and fits `d_model`."""
  check_choice('positions', positions, POSITIONS_2D)
  if positions == 'sinusoidal' and d_model % 4:
    raise ValueError(
      f"d_model must be a multiple of 4 for positions='sinusoidal' (half the "
      f'features encode the row, half the column); got {d_model}.'
    )


def check_images(images: Any, image_shape: tuple[int, int, int]) -> Array:
  """`images` as a JAX array; ValueError unless they are float `[B, *image_shape]`."""
  images = jnp.asarray(images)
  if (
    images.ndim != 4
    or tuple(images.shape[1:]) != image_shape
    or not jnp.issubdtype(images.dtype, jnp.floating)
  ):
    raise ValueError(
      f'images must be float [B, H, W, C] with (H, W, C) = image_shape='
      f'{image_shape}; got {images.dtype}{tuple(images.shape)}.'
    )
  return images


def check_dropout(deterministic: bool, rngs: nnx.Rngs | None, rates: tuple[float, ...]) -> None:
  """Raises ValueError when dropout is on without the keys it needs."""
  if not deterministic and rngs is None and max(rates) > 0.0:
    raise ValueError("deterministic=False needs rngs, an nnx.Rngs with a 'dropout' stream.")


class GridPositions(nnx.Module):
  """Position encodings of a `gh x gw` grid, `[gh*gw, D]` row-major: learned, or fixed sinusoids.

  The learned table starts at standard deviation 0.02 (ViT's), small beside the patch features;
  `'sinusoidal'` is `attention.sinusoidal_positions_2d`.
  """

  def __init__(self, kind: str, grid: tuple[int, int], features: int, *, rngs: nnx.Rngs):
    check_positions_2d(kind, features)
    self.grid, self.features = grid, features
    self.table = (
      nnx.Param(nnx.initializers.normal(0.02)(rngs.params(), (grid[0] * grid[1], features)))
      if kind == 'learned'
      else None
    )

  def __call__(self) -> Array:
    """The encodings `[gh*gw, D]`."""
    if self.table is None:
      return attention.sinusoidal_positions_2d(*self.grid, self.features)
    return self.table[...]


class PatchEncoder(nnx.Module):
  """ViT's encoder: patch embedding, 2-D positions, an optional class token, `EncoderLayer`s.

  The patch embedding is a linear layer on `patchify`'s output (a stride-p convolution). The
  class token, when there is one, is a learned vector put before the patches as token 0; it gets
  no position (it has none, and being learned it needs none). Pre-norm stacks end in a LayerNorm.
  """

  def __init__(
    self,
    image_shape: tuple[int, int, int],
    patch_size: Any,
    *,
    stack: StackConfig,
    class_token: bool,
    rngs: nnx.Rngs,
  ):
    """Checks the settings (before any parameter is created), then builds the encoder.

    `stack.positions` is a 2-D grid encoding (`POSITIONS_2D`), or one that acts inside
    self-attention (`'rope'`, `'alibi'`, `'t5'`), which then sees the patches in row-major order.
    """
    self.image_shape = check_image_shape(image_shape)
    self.patch = as_pair('patch_size', patch_size)
    self.grid = patch_grid(self.image_shape[:2], self.patch)
    stack.check_positions(POSITIONS_2D + ATTENTION_POSITIONS)
    d_model = stack.d_model
    self.dropout_rates = (stack.dropout_rate, stack.attention_dropout_rate)
    self.patch_embed = dense(
      self.patch[0] * self.patch[1] * self.image_shape[2], d_model, rngs=rngs
    )
    self.positions = (
      GridPositions(stack.positions, self.grid, d_model, rngs=rngs)
      if stack.positions in POSITIONS_2D
      else None
    )
    self.cls = (
      nnx.Param(nnx.initializers.normal(0.02)(rngs.params(), (d_model,))) if class_token else None
    )
    self.dropout = nnx.Dropout(stack.dropout_rate)
    self.layers, self.final_norm = encoder_stack(stack, rngs=rngs)

  def __call__(
    self,
    images: Any,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Encodes images float `[B, H, W, C]` (the `image_shape`) to states `[B, T, D]`, T = gh*gw
    patches, plus the class token first when there is one; each layer's self-attention
    `[B, N, T, T]` is its tap `layers/<i>/self_attn/weights`."""
    images = check_images(images, self.image_shape)
    check_dropout(deterministic, rngs, self.dropout_rates)
    x = self.patch_embed(patchify(images, self.patch))  # [B, P, D]
    if self.positions is not None:
      x = x + self.positions().astype(x.dtype)  # positions [P, D]
    if self.cls is not None:
      cls = jnp.broadcast_to(self.cls[...].astype(x.dtype), (x.shape[0], 1, x.shape[2]))
      x = jnp.concatenate([cls, x], axis=1)  # [B, 1+P, D]
    run = dict(deterministic=deterministic, rngs=rngs)
    x = self.dropout(x, **run)
    for layer in self.layers:  # images have no padding: no mask
      x = layer(x, None, **run)
    if self.final_norm is not None:
      x = self.final_norm(x)
    return x


class ViT(nnx.Module):
  """Vision Transformer (Dosovitskiy et al. 2021): patches -> Transformer encoder -> classes.

  `pooling='cls'` classifies the final state of the class token (token 0), `'mean'` the mean of
  the patches' final states. Implements `models.interfaces.ImageClassifier`.

  `attention_names`: `self` `[B, N, T, T]` per layer (the class token, if any, is token 0).
  """

  attention_names: ClassVar[dict[str, str]] = {'self': 'encoder/layers/*/self_attn/weights'}

  def __init__(
    self,
    *,
    image_shape: tuple[int, int, int],
    num_classes: int,
    patch_size: int | tuple[int, int] = 2,
    stack: StackConfig = StackConfig(
      num_layers=4,
      d_model=64,
      num_heads=4,
      d_ff=128,
      norm='pre',
      activation='gelu',
      positions='learned',
    ),
    pooling: str = 'cls',
    rngs: nnx.Rngs,
  ):
    """Builds the model; bad settings raise ValueError before any parameter is created.

    Args:
      image_shape: `(H, W, C)` of the images.
      num_classes: classes C (>= 2).
      patch_size: `p` for square patches or `(ph, pw)`; must divide H and W.
      stack: the encoder; ViT's pre-norm, gelu and learned positions by default. `positions`
        `'sinusoidal'` is fixed 2-D sinusoids (d_model % 4 == 0); `max_length` is unused.
      pooling: `'cls'` (ViT) or `'mean'`.
      rngs: `params` stream for initialisation.
    """
    check_image_shape(image_shape)
    if not is_int(num_classes) or num_classes < 2:
      raise ValueError(f'num_classes must be an integer >= 2; got {num_classes!r}.')
    check_choice('pooling', pooling, POOLINGS)
    self.pooling = pooling
    self.encoder = PatchEncoder(
      image_shape, patch_size, stack=stack, class_token=pooling == 'cls', rngs=rngs
    )
    self.grid = self.encoder.grid
    self.head = dense(stack.d_model, num_classes, rngs=rngs)

  def classify_image(
    self,
    images: Any,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Logits float32 `[B, num_classes]` for images float `[B, H, W, C]`; the self-attention
    weights, over T = gh*gw tokens plus the class token (token 0) with `pooling='cls'`, are the
    taps `attention_names` lists.

    Args:
      images: a batch in the model's `image_shape`.
      deterministic: False turns dropout on.
      rngs: an `nnx.Rngs` with a 'dropout' stream, needed when dropout is on.
    """
    states = self.encoder(images, deterministic=deterministic, rngs=rngs)  # [B, T, D]
    pooled = states[:, 0] if self.pooling == 'cls' else jnp.mean(states, axis=1)  # [B, D]
    return self.head(pooled).astype(jnp.float32)  # [B, C]

  __call__ = classify_image
