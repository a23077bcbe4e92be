"""What each attention head does on a prompt: its metric with heads zeroed, mean-ablated or
patched, for any causal language model of Attend (prompt.py heads, the studies).

A `Metric` reads the model's logits on the prompt: one target token's log-probability after the
prompt (`'logprob'`), the logit difference of two tokens there (`'logit_diff'`), or the mean
next-token loss over the prompt (`'loss'`).

- `head_effects`: for each head (or the heads asked for), the metric with that head's output
  replaced, less the metric of the clean run. The replacement (`ABLATIONS`) is zero, the head's
  mean output over a reference text (`'mean'`: over every position, or position by position
  over a batch of reference prompts of one length, Wang et al.'s mean over an ABC
  distribution), or its output on a source prompt of the same length (`'patch'`: activation
  patching, clean into corrupted or back). Heads are replaced at their per-head outputs (the
  taps `PATH/heads`, before the output projection), as TransformerLens's `hook_z`, by the
  engine of `interpret.heads`: N replaced heads a call of one compiled program. Every layer
  with per-head outputs takes part: multi-head and latent attention's heads, a delta-rule
  layer's value heads (its gated norm's output per head), a differential layer's pairs of
  heads (a pair's output is one vector after its norm: the pair is replaced together).
- `ablated_metric`: the metric with a set of heads replaced together (a circuit, or random
  heads to compare it with).
"""

import dataclasses
from typing import Callable

from absl import logging
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from interpret import heads as heads_lib
from models import interventions
from models.attention_paths import head_layers

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

  def inputs(self, ids: Array) -> tuple[Array, Array, Array]:
    """`(ids, target, versus)` as arrays: what a compiled program takes, so that the targets are
    data in it (another target, the same program; unused ones are 0)."""
    fill = lambda token: jnp.asarray(0 if token is None else token, jnp.int32)
    return jnp.asarray(ids), fill(self.target), fill(self.versus)

  def read(self, model: nnx.Module, inputs: tuple[Array, Array, Array]) -> Array:
    """The metric of `model`'s logits on `inputs` (`Metric.inputs`), its targets taken from
    them."""
    ids, target, versus = inputs
    return dataclasses.replace(self, target=target, versus=versus)(model.token_logits(ids), ids)

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


def replacements(
  model: nnx.Module,
  ids: Array,
  ablation: str,
  other: Array | None,
  *,
  per_position: bool = False,
) -> list[Array]:
  """What a replaced head's output becomes, per layer (`interpret.heads.program`'s `replaced`):
  zeros, the head's mean output over the reference ids `other` (over its rows and positions
  `[1, N, 1, H]`, or with `per_position` over its rows only, `[1, N, T, H]`: `other` then has
  as many tokens as `ids`), or its output on the source ids `other` (the shape of `ids`)."""
  if ablation not in ABLATIONS:
    raise ValueError(f'--ablation must be one of {", ".join(ABLATIONS)}; got {ablation!r}.')
  paths = list(head_layers(model))
  if ablation == 'zero':
    return [jnp.zeros((1, 1, 1, 1))] * len(paths)  # broadcast over every head's output
  if other is None:
    raise ValueError(
      f'--ablation={ablation} needs --{"reference" if ablation == "mean" else "source"} text.'
    )
  if (ablation == 'patch' and other.shape != ids.shape) or (
    per_position and other.shape[1] != ids.shape[1]
  ):
    raise ValueError(patch_lengths_differ(other.shape[1], ids.shape[1]))
  _, captured = interventions.capture(model, other, method='token_logits')
  outputs = [captured[f'{path}/heads'] for path in paths]  # each [B, N, T, H]
  if ablation == 'mean':
    axes = 0 if per_position else (0, 2)
    return [jnp.mean(h, axis=axes, keepdims=True) for h in outputs]
  return outputs


def patch_lengths_differ(source_tokens: int, prompt_tokens: int) -> str:
  """The sentence refusing a patch (or per-position mean) from prompts of another length."""
  return (
    f'--source encodes to {source_tokens} tokens and --prompt to {prompt_tokens}; patching '
    'takes each head from the same position, so they must have as many.'
  )


def metric_program(model: nnx.Module, metric: Metric):
  """`run(ids, masks, replaced, ...)`: `interpret.heads.program` reading `metric` of the model's
  logits on `ids`, `[P, B]`. The targets are data in the compiled program: another target of the
  same shape compiles nothing new (the persistent cache holds it)."""
  run = heads_lib.program(model, metric.read)
  return lambda ids, *args, **options: run(metric.inputs(ids), *args, **options)


def head_effects(
  model: nnx.Module,
  ids: Array,
  metric: Metric,
  *,
  ablation: str = 'zero',
  other: Array | None = None,
  per_position: bool = False,
  heads: list[tuple[int, int]] | None = None,
  progress: Callable[[str], None] = logging.info,
) -> tuple[float, np.ndarray]:
  """`(the clean metric, [L, N] each head's replaced metric less the clean one)`, NaN for the
  heads not asked for (`heads`: `(layer, head)` pairs; default all) and those a layer does not
  have (a differential layer's heads are its pairs), N heads a call, with a
  `progress` line every `Progress.EVERY_SECONDS` and at the end. `other`: the reference ids
  (mean) or the source ids (patch); `per_position`: see `replacements`."""
  ids = jnp.asarray(ids)
  layers = heads_lib.heads_per_layer(model)
  paths, n = heads_lib.grid(model)
  every = [(layer, head) for layer, count in enumerate(layers.values()) for head in range(count)]
  wanted = every if heads is None else heads
  heads_lib.check_model_heads(model, wanted)
  other = None if other is None else jnp.asarray(other)
  replaced = replacements(model, ids, ablation, other, per_position=per_position)
  run = metric_program(model, metric)
  return heads_lib.one_at_a_time(
    wanted,
    (len(paths), n),
    lambda masks: run(ids, masks, replaced),
    what=f'Heads {ablation}',
    progress=progress,
  )


def ablated_metric(
  model: nnx.Module,
  ids: Array,
  metric: Metric,
  heads: list[tuple[int, int]],
  *,
  ablation: str = 'zero',
  other: Array | None = None,
  per_position: bool = False,
) -> float:
  """The metric with every head of `heads` replaced at once (`head_effects`' replacements)."""
  ids = jnp.asarray(ids)
  paths, n = heads_lib.grid(model)
  heads_lib.check_model_heads(model, heads)
  other = None if other is None else jnp.asarray(other)
  replaced = replacements(model, ids, ablation, other, per_position=per_position)
  mask = heads_lib.masks([heads], len(paths), n)
  return float(np.mean(metric_program(model, metric)(ids, mask, replaced)))
