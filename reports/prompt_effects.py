"""What each attention head does on a researcher's prompt: ablation, patching, direct logit
attribution and the logit lens, for any causal language model of Attend.

A `Metric` reads the model's logits on the prompt: one target token's log-probability after the
prompt (`'logprob'`), the logit difference of two tokens there (`'logit_diff'`), or the mean
next-token loss over the prompt (`'loss'`).

- `head_effects`: for each head (or the heads asked for), the metric with that head's output
  replaced, less the metric of the clean run. The replacement (`ABLATIONS`) is zero, the head's
  mean output over every position of a reference text (`'mean'`), or its output on a source
  prompt of the same length (`'patch'`: activation patching, clean into corrupted or back).
  Heads are replaced at their per-head outputs (the taps `PATH/heads`, before the output
  projection), as TransformerLens's `hook_z`. The replaced heads are data, a mask `[L, N]`, so
  every head of a layer runs as one batch of one compiled program (vmapped over the masks).
- `ablated_metric`: the metric with a set of heads replaced together (a circuit, or random
  heads to compare it with).
- `head_attributions`: direct logit attribution, each head's output at the last position through
  its share of the output projection, the norms after it with their scales taken from the clean
  run (a sandwich norm's from its layer's whole attention output, the final norm's from the final
  residual stream), and the unembedding: its direct share of a logit or logit difference.
- `logit_lens`: the residual stream after each layer read through the final norm and the
  unembedding: the target's log-probability and rank, and the top token, layer by layer.
"""

import dataclasses
import time
from typing import Callable

from absl import logging
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from models import interventions
from models.layers import merge_project_heads
from training.metrics import Progress, duration

Array = jax.Array
METRICS = ('logprob', 'logit_diff', 'loss')
ABLATIONS = ('zero', 'mean', 'patch')


@dataclasses.dataclass(frozen=True)
class Metric:
  """A number per row read from logits `[B, T, V]` of ids `[B, T]` (see the module docstring)."""

  name: str
  # 'logprob', 'logit_diff': the token after the prompt, one for every row or one per row [B].
  target: int | Array | None = None
  versus: int | Array | None = None  # 'logit_diff': the token it is compared with

  def __post_init__(self):
    if self.name not in METRICS:
      raise ValueError(f'--metric must be one of {", ".join(METRICS)}; got {self.name!r}.')
    if self.name != 'loss' and self.target is None:
      raise ValueError(f'--metric={self.name} needs --target, the token after the prompt.')
    if self.name == 'logit_diff' and self.versus is None:
      raise ValueError('--metric=logit_diff needs --versus, the token compared with --target.')

  def __call__(self, logits: Array, ids: Array) -> Array:
    logits = logits.astype(jnp.float32)
    if self.name == 'loss':
      log_probs = jax.nn.log_softmax(logits[:, :-1])
      taken = jnp.take_along_axis(log_probs, ids[:, 1:, None], axis=-1)[..., 0]
      return -jnp.mean(taken, axis=-1)
    last = logits[:, -1]  # [B, V]
    rows = jnp.arange(last.shape[0])
    if self.name == 'logprob':
      return jax.nn.log_softmax(last)[rows, self.target]
    return last[rows, self.target] - last[rows, self.versus]


def _heads_of(model: nnx.Module) -> tuple[list[str], int]:
  paths = interventions.layer_paths(model)
  return paths, interventions.modules_by_path(model)[paths[0]].num_heads


def replacements(model: nnx.Module, ids: Array, ablation: str, other: Array | None) -> Array:
  """What a replaced head's output becomes, per layer, `[L, B|1, N, T|1, H]`: zeros, the mean of
  its output over every position of the reference ids `other`, or its output on the source ids
  `other` (the same shape as `ids`)."""
  if ablation not in ABLATIONS:
    raise ValueError(f'--ablation must be one of {", ".join(ABLATIONS)}; got {ablation!r}.')
  paths, _ = _heads_of(model)
  if ablation == 'zero':
    return jnp.zeros((len(paths), 1, 1, 1, 1))  # broadcast over every head's output
  if other is None:
    raise ValueError(
      f'--ablation={ablation} needs --{"reference" if ablation == "mean" else "source"} text.'
    )
  if ablation == 'patch' and other.shape != ids.shape:
    raise ValueError(
      f'--source encodes to {other.shape[1]} tokens and --prompt to {ids.shape[1]}; patching '
      'takes each head from the same position, so they must have as many.'
    )
  _, captured = interventions.capture(model, other, method='token_logits')
  heads = jnp.stack([captured[f'{path}/heads'] for path in paths])  # [L, B, N, T, H]
  if ablation == 'mean':
    return jnp.mean(heads, axis=(1, 3), keepdims=True)  # [L, 1, N, 1, H]
  return heads


def _metric_program(model: nnx.Module, metric: Metric):
  """A compiled `(ids, masks [P, L, N] bool, replaced [L, ...]) -> [P, B]`: the metric with the
  masked heads' outputs replaced, one row per mask."""
  graphdef, state = nnx.split(model)
  paths, _ = _heads_of(model)

  @jax.jit
  def run(state, ids, masks, replaced):
    def one(mask):  # [L, N]
      model = nnx.merge(graphdef, state)

      def edit(layer: int) -> Callable[[Array], Array]:
        hit = mask[layer][None, :, None, None]  # [1, N, 1, 1]
        return lambda value: jnp.where(hit, replaced[layer].astype(value.dtype), value)

      edits = {f'{path}/heads': edit(layer) for layer, path in enumerate(paths)}
      logits, _ = interventions.capture(model, ids, edits=edits, method='token_logits')
      return metric(logits, ids)

    return jax.vmap(one)(masks)

  return lambda ids, masks, replaced: run(state, ids, masks, replaced)


def check_heads(model: nnx.Module, heads: list[tuple[int, int]]) -> None:
  """ValueError naming the first (layer, head) the model does not have."""
  paths, n = _heads_of(model)
  for layer, head in heads:
    if not (0 <= layer < len(paths) and 0 <= head < n):
      raise ValueError(
        f'--heads: layer {layer}, head {head} is not in the model ({len(paths)} layers 0 .. '
        f'{len(paths) - 1} of {n} heads 0 .. {n - 1}).'
      )


def head_effects(
  model: nnx.Module,
  ids: Array,
  metric: Metric,
  *,
  ablation: str = 'zero',
  other: Array | None = None,
  heads: list[tuple[int, int]] | None = None,
  progress: Callable[[str], None] = logging.info,
) -> tuple[float, np.ndarray]:
  """`(the clean metric, [L, N] each head's replaced metric less the clean one)`, NaN for the
  heads not asked for (`heads`: `(layer, head)` pairs; default all), a layer's heads a batch,
  with a `progress` line every `Progress.EVERY_SECONDS` and at the end. `other`: the reference
  ids (mean) or the source ids (patch)."""
  ids = jnp.asarray(ids)
  paths, n = _heads_of(model)
  wanted = heads if heads is not None else [(l, h) for l in range(len(paths)) for h in range(n)]
  check_heads(model, wanted)
  replaced = replacements(model, ids, ablation, None if other is None else jnp.asarray(other))
  program = _metric_program(model, metric)
  none = np.zeros((1, len(paths), n), bool)
  clean = float(np.mean(program(ids, none, replaced)))
  effects = np.full((len(paths), n), np.nan)
  by_layer = {}
  for layer, head in wanted:
    by_layer.setdefault(layer, []).append(head)
  started = last = time.perf_counter()
  done = 0
  for layer, layer_heads in sorted(by_layer.items()):
    # Every head of the layer as one batch of masks (padded to N, so one compiled shape).
    masks = np.zeros((n, len(paths), n), bool)
    for i, head in enumerate(layer_heads):
      masks[i, layer, head] = True
    values = np.asarray(program(ids, masks, replaced)).mean(axis=-1)
    effects[layer, layer_heads] = values[: len(layer_heads)] - clean
    done += len(layer_heads)
    now = time.perf_counter()
    if now - last >= Progress.EVERY_SECONDS or done == len(wanted):
      rate, last = done / (now - started), now
      progress(
        f'Heads {ablation}: {done}/{len(wanted)} ({paths[layer]}) | {rate:.2f} heads/s | '
        f'ETA {duration((len(wanted) - done) / rate)}'
      )
  return clean, effects


def ablated_metric(
  model: nnx.Module,
  ids: Array,
  metric: Metric,
  heads: list[tuple[int, int]],
  *,
  ablation: str = 'zero',
  other: Array | None = None,
) -> float:
  """The metric with every head of `heads` replaced at once (`head_effects`' replacements)."""
  ids = jnp.asarray(ids)
  check_heads(model, heads)
  paths, n = _heads_of(model)
  mask = np.zeros((1, len(paths), n), bool)
  for layer, head in heads:
    mask[0, layer, head] = True
  replaced = replacements(model, ids, ablation, None if other is None else jnp.asarray(other))
  return float(np.mean(_metric_program(model, metric)(ids, mask, replaced)))


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
  logit difference (it must be linear in the logits). Needs a pre-norm model."""
  ids = jnp.asarray(ids)
  paths, n = _heads_of(model)
  if model.final_norm is None:
    raise ValueError('Direct logit attribution reads a pre-norm model (its final norm).')
  _, captured = interventions.capture(model, ids, method='token_logits')
  blocks = [path.rsplit('/', 1)[0] for path in paths]  # 'layers/3'
  modules = interventions.modules_by_path(model)
  final = captured[f'{blocks[-1]}/residual'][:, -1]  # [B, D], before the final norm
  unembed = lambda x: direction(model.logits_of(x)) - direction(model.logits_of(jnp.zeros_like(x)))
  rows = []
  for path, block_path in zip(paths, blocks):
    attention, block = modules[path], modules[block_path]
    heads = captured[f'{path}/heads'][:, :, -1:]  # [B, N, 1, H]
    no_bias = merge_project_heads(attention.w_o, jnp.zeros_like(heads))
    one = lambda h, heads=heads, attention=attention, no_bias=no_bias: (
      merge_project_heads(attention.w_o, heads * (jnp.arange(n) == h)[None, :, None, None])
      - no_bias
    )[:, 0]  # [B, D]
    shares = jax.vmap(one)(jnp.arange(n))  # [N, B, D]
    if block.post_norms is not None:  # a sandwich norm after the attention
      whole = merge_project_heads(attention.w_o, heads)[:, 0]
      shares = frozen_norm(block.post_norms[0], shares, whole)
    rows.append(jnp.mean(unembed(frozen_norm(model.final_norm, shares, final)), axis=-1))
  return np.asarray(jnp.stack(rows))  # [L, N]


def logit_lens(model: nnx.Module, ids: Array, target: int) -> list[dict]:
  """Layer by layer, the residual stream at the last position read as the output: the
  target's log-probability and rank (0 = top), and the top token (first row)."""
  ids = jnp.asarray(ids)
  paths, _ = _heads_of(model)
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
