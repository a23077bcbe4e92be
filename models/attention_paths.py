"""A model's multi-head attention layers, listed once: `{path: layer}` in the model's order.

Every reader of a model's layers goes through `attention_layers`: the rows of each layers x heads
map (`interpret/`), the layers a press scores and evicts (`models.compression`), the layers a
study reconfigures or reads (`studies/`). A path is the layer's module path, the prefix of its
taps (`models.interventions`: `PATH/queries`, `PATH/heads`, ...) and of its parameters in a
checkpoint. (Its own module: `interventions` cannot import the layer it taps.)
"""

from flax import nnx

from models import interventions
from models.attention_layer import MultiHeadAttention


def attention_layers(model: nnx.Module) -> dict[str, MultiHeadAttention]:
  """`{path: layer}` of every multi-head attention layer of `model`, in the model's order (a
  stack's layers by index: `'layers/0/self_attn'`, `'layers/1/self_attn'`, ...; a Transformer's
  decoder layers' cross and self attention, then its encoder's)."""
  return {
    path: module
    for path, module in interventions.modules_by_path(model).items()
    if isinstance(module, MultiHeadAttention)
  }
