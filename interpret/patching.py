"""Path patching (Wang et al. 2022, "Interpretability in the Wild", section 3.1): how much of a
metric flows from sender heads to receiver heads' queries, keys or values, and no other way.

For each sender head, in three passes over the prompt `ids` (the clean run) and `other` (the
corrupted one, e.g. the same template with three other names):

1. the clean and corrupted runs' per-head outputs (`PATH/heads`, TransformerLens's `hook_z`);
2. the clean prompt again, the sender's output taken from the corrupted run and every other
   head's frozen at its clean output (the MLPs and norms recomputed): the receivers' inputs
   (their `queries`, `keys` or `values` taps) are recorded;
3. the clean prompt once more, only the receivers' inputs replaced by those records: the metric
   less the clean one is the sender's effect through that path.

With no receivers, step 2's metric is the sender's direct effect on the logits (the path through
the residual stream alone). Under grouped-query attention (N query heads, K key/value heads) a
receiver head i reads key/value head i // (N/K), which the other query heads of its group read
too: patching a receiver's keys or values patches its group's. A delta-rule layer (`DeltaNet`)
groups the other way: value head h reads query and key head h // (H/Hk), so patching a
receiver's queries or keys patches its group's. Latent attention's heads each have their own.
A differential layer's heads are pairs of query heads whose maps subtract: it is refused as a
receiver (as a sender, its pairs patch as any head).

Senders run N a call (vmapped), as every head engine of `interpret.heads`.
"""

from collections.abc import Sequence
from typing import Callable

from absl import logging
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from interpret import heads as heads_lib
from interpret.effects import Metric, patch_lengths_differ
from models import interventions
from models.attention_paths import describe, differential
from models.delta_net import DeltaNet
from models.latent_attention import LatentAttention

Array = jax.Array
INPUTS = ('queries', 'keys', 'values')


def _outputs(model: nnx.Module, ids: Array, paths: list[str]) -> list[Array]:
  _, captured = interventions.capture(model, ids, method='token_logits')
  return [captured[f'{path}/heads'] for path in paths]  # each [B, N, T, H]


def _receiver_masks(model, paths, receivers, into) -> dict[str, np.ndarray]:
  """`{tap name: [N|K] bool}`: which heads of each receiver layer's input taps are replaced
  (`paths`: the attention layers, `interpret.heads.grid`'s)."""
  modules = interventions.modules_by_path(model)
  out = {}
  for layer, head in receivers:
    for tap in into:
      width, groups = _input_heads(modules[paths[layer]], tap)
      mask = out.setdefault(f'{paths[layer]}/{tap}', np.zeros(width, bool))
      mask[head // groups] = True
  return out


def _input_heads(layer, tap: str) -> tuple[int, int]:
  """`(the heads of the layer's input tap, the receiver heads that read each)` (module
  docstring): grouped keys and values, or a delta-rule layer's grouped queries and keys."""
  if isinstance(layer, LatentAttention):
    return layer.num_heads, 1
  if isinstance(layer, DeltaNet):
    if tap == 'values':
      return layer.num_heads, 1
    return layer.num_key_heads, layer.num_heads // layer.num_key_heads
  if tap == 'queries':
    return layer.num_heads, 1
  return layer.num_kv_heads, layer.num_heads // layer.num_kv_heads


def path_patching(
  model: nnx.Module,
  ids: Array,
  other: Array,
  metric: Metric,
  receivers: Sequence[tuple[int, int]] = (),
  *,
  into: Sequence[str] = ('queries',),
  senders: Sequence[tuple[int, int]] | None = None,
  progress: Callable[[str], None] = logging.info,
) -> tuple[float, np.ndarray]:
  """`(the clean metric, [L, N] each sender's path-patched metric less the clean one)`, NaN for
  heads not sent from (see the module docstring).

  Args:
    model: a causal language model.
    ids: the clean prompts `[B, T]`.
    other: the corrupted prompts, as many tokens as `ids`.
    metric: what is measured of the logits on `ids`.
    receivers: `(layer, head)` pairs whose inputs the senders reach; none = the logits directly.
    into: which inputs of the receivers: some of `INPUTS`.
    senders: `(layer, head)` pairs, one at a time (default: every head of the layers before the
      first receiver's, or every head without receivers).
    progress: called with a line every `Progress.EVERY_SECONDS` and at the end.

  Raises:
    ValueError: `other` has another length, a head or input that is not the model's, or a
      sender that is not before every receiver.
  """
  ids, other = jnp.asarray(ids), jnp.asarray(other)
  if other.shape != ids.shape:
    raise ValueError(patch_lengths_differ(other.shape[1], ids.shape[1]))
  paths, n, senders = _senders(model, receivers, into, senders)
  clean_outputs = _outputs(model, ids, paths)  # step 1
  corrupted = _outputs(model, other, paths)
  wanted = _receiver_masks(model, paths, receivers, into) if receivers else {}

  def record(model, inputs):  # step 2: the receivers' inputs, or the metric itself
    if not wanted:
      return metric.read(model, inputs)
    _, captured = interventions.capture(model, inputs[0], method='token_logits')
    return {name: captured[name] for name in wanted}

  sent, received = heads_lib.program(model, record), _receiving(model, metric, wanted)
  inputs = metric.inputs(ids)  # the targets as data: another target, the same programs

  def measure(masks):  # the clean run (nothing sent: every head frozen clean), then senders
    out = sent(inputs, masks, corrupted, unmasked=clean_outputs)
    return received(inputs, out) if wanted else out

  return heads_lib.one_at_a_time(
    senders, (len(paths), n), measure, what='Path patching', progress=progress
  )


def _senders(model, receivers, into, senders) -> tuple[list[str], int, list[tuple[int, int]]]:
  """`(the attention layers' paths, N, the senders)` of `path_patching`'s arguments (default
  senders: every head of the layers before the first receiver's, or every head without
  receivers), refused in one sentence where they are not the model's."""
  layers = heads_lib.heads_per_layer(model)
  paths, n = list(layers), max(layers.values())
  unknown = sorted(set(into) - set(INPUTS))
  if receivers and (unknown or not into):
    raise ValueError(f'into={tuple(into)}: give some of {", ".join(INPUTS)}.')
  first = min((layer for layer, _ in receivers), default=len(paths))
  if senders is None:
    senders = [(layer, head) for layer in range(first) for head in range(layers[paths[layer]])]
  heads_lib.check_model_heads(model, [*senders, *receivers])
  modules = interventions.modules_by_path(model)
  for layer, _ in receivers:
    if differential(modules[paths[layer]]):
      raise ValueError(
        f'path patching: receiver layer {layer} ({paths[layer]}) is '
        f'{describe(modules[paths[layer]])}, each pair reading two query heads whose maps '
        'subtract; patch into the inputs of a multi-head, latent or delta-rule layer.'
      )
  late = [sender for sender in senders if sender[0] >= first]
  if late:
    raise ValueError(
      f'sender layer {late[0][0]}, head {late[0][1]} is not before the receivers (layer '
      f'{first}): a head reaches only the layers after its own.'
    )
  return paths, n, senders


def _receiving(model: nnx.Module, metric: Metric, wanted: dict[str, np.ndarray]):
  """Step 3, compiled: `received(inputs, records) -> [P, B]`, the metric on the clean prompt
  with only the receivers' inputs (`wanted`: which heads of which input taps) replaced by each
  row of `records` (step 2's)."""
  graphdef, state = nnx.split(model)

  @jax.jit
  def received(state, inputs, records):
    def one(record):
      edits = {
        name: lambda v, mask=mask, new=record[name]: jnp.where(
          jnp.asarray(mask)[None, :, None, None], new.astype(v.dtype), v
        )
        for name, mask in wanted.items()
      }
      model = nnx.merge(graphdef, state)
      with interventions.editing(model, edits):
        return metric.read(model, inputs)

    return jax.vmap(one)(records)

  return lambda inputs, records: received(state, inputs, records)
