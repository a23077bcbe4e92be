"""A model's attention layers, listed once: `{path: layer}` in the model's order.

Every reader of a model's layers goes through here. `attention_layers` lists the multi-head
attention layers (`MultiHeadAttention`): the layers a press scores and evicts
(`models.compression`), the layers a study reconfigures or reads (`studies/`). `head_layers`
lists every layer with per-head outputs (the `heads` tap), whatever mechanism forms them: the
multi-head layers, multi-head latent attention (`LatentAttention`) and the delta-rule layers
(`DeltaNet`); they are the rows of each layers x heads map (`interpret/`) and the layers of a
language model's explorer page. A path is the layer's module path, the prefix of its taps
(`models.interventions`: `PATH/queries`, `PATH/heads`, ...) and of its parameters in a
checkpoint. (Its own module: `interventions` cannot import the layers it taps.)
"""

from collections.abc import Mapping, Sequence

from flax import nnx
import jax
import jax.numpy as jnp

from models import interventions
from models.attention_layer import MultiHeadAttention
from models.delta_net import DeltaNet
from models.latent_attention import LatentAttention

HEAD_LAYERS = (MultiHeadAttention, LatentAttention, DeltaNet)


def attention_layers(model: nnx.Module) -> dict[str, MultiHeadAttention]:
  """`{path: layer}` of every multi-head attention layer of `model`, in the model's order (a
  stack's layers by index: `'layers/0/self_attn'`, `'layers/1/self_attn'`, ...; a Transformer's
  decoder layers' cross and self attention, then its encoder's)."""
  return {
    path: module
    for path, module in interventions.modules_by_path(model).items()
    if isinstance(module, MultiHeadAttention)
  }


def head_layers(model: nnx.Module) -> dict[str, nnx.Module]:
  """`{path: layer}` of every layer of `model` with per-head outputs (`HEAD_LAYERS`), in the
  model's order: a hybrid stack's delta-rule and softmax layers alike."""
  return {
    path: module
    for path, module in interventions.modules_by_path(model).items()
    if isinstance(module, HEAD_LAYERS)
  }


def differential(layer: nnx.Module) -> bool:
  """Whether `layer` is differential attention, whose outputs and weights are per pair of heads."""
  return isinstance(layer, MultiHeadAttention) and layer.config.attention == 'differential'


def gated(layer: nnx.Module) -> bool:
  """Whether `layer` gates its heads' outputs (`output_gate`, the tap `gate` `[B, N, T, d_v]`)."""
  return isinstance(layer, MultiHeadAttention) and layer.w_gate is not None


def sparse(layer: nnx.Module) -> bool:
  """Whether `layer` chooses each query's keys (DeepSeek Sparse Attention, the tap `selected`
  `[B, T, S]`)."""
  return isinstance(layer, LatentAttention) and layer.indexer is not None


def head_count(layer: nnx.Module) -> int:
  """The heads of `layer`'s per-head outputs (its `heads` tap `[B, N, T, H]`): a differential
  layer's N/2 pairs, a delta-rule layer's value heads, every other layer's heads."""
  return layer.num_heads // 2 if differential(layer) else layer.num_heads


def describe(layer: nnx.Module) -> str:
  """What mechanism `layer` is and what its heads are, in a few words, e.g. 'differential, 2
  pairs of heads', 'latent, sparse (DSA), 4 heads' or 'gated_deltanet, 4 heads'."""
  count = head_count(layer)
  if differential(layer):
    return f'differential, {count} pair{"s" * (count != 1)} of heads'
  if isinstance(layer, LatentAttention):
    kind = 'latent, sparse (DSA)' if sparse(layer) else 'latent'
  else:
    kind = layer.config.attention + (' with output gate' if gated(layer) else '')
  return f'{kind}, {count} head{"s" * (count != 1)}'


def stack_layers(
  captured: Mapping[str, jax.Array], paths: Sequence[str], name: str, *, heads: bool = True
) -> jax.Array | None:
  """The tap `PATH/name` of each layer of `paths`, stacked after the batch axis in their order,
  float32: `[B, L, N, ...]` of per-head values `[B, N_l, ...]` padded with NaN to the most heads
  N of a layer (`heads=False`: values `[B, ...]`, `[B, L, ...]`). A layer without the tap (no
  weights, no gate) is all NaN; None if no layer has it."""
  values = [captured.get(f'{path}/{name}') for path in paths]
  present = [value for value in values if value is not None]
  if not present:
    return None
  first = present[0]
  n = max(value.shape[1] for value in present) if heads else 0
  shape = (first.shape[0], n, *first.shape[2:]) if heads else first.shape
  rows = []
  for value in values:
    if value is None:
      rows.append(jnp.full(shape, jnp.nan, jnp.float32))
      continue
    value = value.astype(jnp.float32)
    if heads:  # [B, N_l, ...] -> [B, N, ...]
      pad = [(0, 0), (0, n - value.shape[1])] + [(0, 0)] * (value.ndim - 2)
      value = jnp.pad(value, pad, constant_values=jnp.nan)
    rows.append(value)
  return jnp.stack(rows, axis=1)
