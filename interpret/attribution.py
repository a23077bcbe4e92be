"""Direct logit attribution per head, and the logit lens, for a pre-norm causal language model.

- `head_attributions`: each head's output at the last position through its share of the output
  projection, the norms after it with their scales taken from the clean run (a sandwich norm's
  from its layer's whole attention output, the final norm's from the final residual stream),
  and the unembedding: its direct share of a logit or logit difference.
- `logit_lens`: the residual stream after each layer read through the final norm and the
  unembedding: the target's log-probability and rank, and the top token, layer by layer.
"""

from typing import Callable

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from interpret.heads import grid, heads_per_layer
from models import interventions
from models.attention_paths import head_layers
from models.layers import merge_project_heads

Array = jax.Array


def frozen_norm(norm: nnx.Module, part: Array, whole: Array) -> Array:
  """The norm as the linear map it is at `whole`'s statistics, applied to `part` (a share of
  `whole`): an RMSNorm scales `part` by its weight over `whole`'s RMS, a LayerNorm also centres
  it (its bias belongs to no share). The shares of `whole` then add up to `norm(whole)`."""
  eps = norm.epsilon
  if isinstance(norm, nnx.LayerNorm):
    spread = lambda v: jnp.sqrt(jnp.var(v, axis=-1, keepdims=True) + eps)
    bias = 0.0 if norm.bias is None else norm.bias[...]
    return (norm(part) - bias) * spread(part) / spread(whole)
  rms = lambda v: jnp.sqrt(jnp.mean(jnp.square(v), axis=-1, keepdims=True) + eps)
  return norm(part) * rms(part) / rms(whole)


def head_attributions(model: nnx.Module, ids: Array, direction: Callable[[Array], Array]):
  """`[L, N]` direct logit attribution of each head at the last position (see the module
  docstring), averaged over the rows; `direction(logits [..., V]) -> [...]` picks the logit or
  logit difference (it must be linear in the logits), NaN for heads a layer does not have (a
  differential layer's heads are its pairs). Needs a pre-norm model."""
  ids = jnp.asarray(ids)
  paths, n = grid(model)
  if model.final_norm is None:
    raise ValueError('Direct logit attribution reads a pre-norm model (its final norm).')
  _, captured = interventions.capture(model, ids, method='token_logits')
  blocks = [path.rsplit('/', 1)[0] for path in paths]  # 'layers/3'
  modules = interventions.modules_by_path(model)
  final = captured[f'{blocks[-1]}/residual'][:, -1]  # [B, D], before the final norm
  # The unembedding and `direction` are linear (a bias cancels between shares), so each share's
  # part is its dot product with one vector per row, the gradient at 0: the vocabulary's logits
  # are formed once, not once per head.
  along = jax.grad(lambda x: jnp.sum(direction(model.logits_of(x))))(jnp.zeros_like(final))
  unembed = lambda shares: jnp.einsum('nbd,bd->nb', shares, along)  # [N, B, D] -> [N, B]
  rows = []
  for (path, count), block_path in zip(heads_per_layer(model).items(), blocks):
    attention, block = modules[path], modules[block_path]
    heads = captured[f'{path}/heads'][:, :, -1:]  # [B, N_l, 1, H]: a differential layer's pairs
    no_bias = merge_project_heads(attention.w_o, jnp.zeros_like(heads))
    one = lambda h, heads=heads, attention=attention, no_bias=no_bias, count=count: (
      merge_project_heads(attention.w_o, heads * (jnp.arange(count) == h)[None, :, None, None])
      - no_bias
    )[:, 0]  # [B, D]
    shares = jax.vmap(one)(jnp.arange(count))  # [N_l, B, D]
    if block.post_norms is not None:  # a sandwich norm after the attention
      whole = merge_project_heads(attention.w_o, heads)[:, 0]
      shares = frozen_norm(block.post_norms[0], shares, whole)
    row = np.full(n, np.nan)  # NaN: a head this layer does not have
    row[:count] = jnp.mean(unembed(frozen_norm(model.final_norm, shares, final)), axis=-1)
    rows.append(row)
  return np.stack(rows)  # [L, N]


def logit_lens(model: nnx.Module, ids: Array, target: int) -> list[dict]:
  """Layer by layer, the residual stream at the last position read as the output: the
  target's log-probability and rank (0 = top), and the top token (first row)."""
  ids = jnp.asarray(ids)
  paths = list(head_layers(model))
  _, captured = interventions.capture(model, ids, method='token_logits')
  out = []
  for layer, path in enumerate(paths):
    stream = captured[f'{path.rsplit("/", 1)[0]}/residual'][:1, -1]  # [1, D]
    if model.final_norm is not None:
      stream = model.final_norm(stream)
    log_probs = jax.nn.log_softmax(model.logits_of(stream).astype(jnp.float32))[0]
    out.append(
      dict(
        layer=layer,
        target_logprob=float(log_probs[target]),
        target_rank=int(jnp.sum(log_probs > log_probs[target])),
        top=int(jnp.argmax(log_probs)),
      )
    )
  return out
