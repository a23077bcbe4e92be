"""The train step of the flax.linen peer (`benchmarks/linen_peer.py`), the usual Linen + optax
one as in flax's examples/wmt: AdamW with global-norm clipping, label-smoothed cross-entropy over
the non-pad tokens, and the metrics wmt's step reports (loss, accuracy, token count); `from_config`
sets it up as an Attend experiment config says.
"""

import functools
from typing import Any, Callable

from flax.training import train_state
import jax
import jax.numpy as jnp
import optax

from benchmarks import linen_peer
from benchmarks.peers import peer_model_config
from data.tokenizers import BOS_ID, PAD_ID  # the special ids of Attend's tokenizers
from training import sharding
from training.optim import learning_rate_schedule


def shift_right(targets):
  """`[BOS, y_1, ..., y_{T-1}]` from `targets [B, T]`."""
  return jnp.pad(targets, ((0, 0), (1, 0)), constant_values=BOS_ID)[:, :-1]


def cross_entropy_loss(logits, targets, label_smoothing: float = 0.0):
  """Mean label-smoothed cross-entropy over the non-pad tokens, wmt's weighted loss.

  The smoothed targets put `1 - label_smoothing` on the label and spread the rest over the
  other `V - 1` tokens; the loss of a perfect prediction (their entropy) is subtracted.

  Args:
    logits: float `[B, T, V]`.
    targets: int `[B, T]`, 0 = padding.
    label_smoothing: mass moved off the label.

  Returns:
    float32 scalar.
  """
  vocab = logits.shape[-1]
  confidence = 1.0 - label_smoothing
  low = label_smoothing / (vocab - 1)
  floor = -(confidence * jnp.log(confidence) + (vocab - 1) * low * jnp.log(low + 1e-20))
  soft = jnp.where(jax.nn.one_hot(targets, vocab) > 0, confidence, low)  # [B, T, V]
  per_token = optax.softmax_cross_entropy(logits.astype(jnp.float32), soft) - floor  # [B, T]
  weights = (targets != PAD_ID).astype(jnp.float32)
  return jnp.sum(per_token * weights) / jnp.maximum(weights.sum(), 1.0)


def make_optimizer(
  learning_rate: Callable[[Any], Any],
  *,
  b1: float,
  b2: float,
  eps: float,
  weight_decay: float,
  grad_clip: float,
) -> optax.GradientTransformation:
  """AdamW on the schedule `learning_rate(count)`, after global-norm clipping when > 0."""
  adamw = optax.adamw(learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
  return optax.chain(optax.clip_by_global_norm(grad_clip), adamw) if grad_clip > 0 else adamw


def create_state(
  model: linen_peer.Transformer, batch: dict, tx: optax.GradientTransformation, seed: int = 0
) -> train_state.TrainState:
  """Initialises the parameters on `batch`'s shapes and wraps them with `tx`."""

  def init():
    variables = model.init(jax.random.key(seed), batch['inputs'], shift_right(batch['targets']))
    return train_state.TrainState.create(apply_fn=model.apply, params=variables['params'], tx=tx)

  return jax.jit(init)()


def train_step(
  state: train_state.TrainState,
  batch: dict,
  dropout_key: jax.Array,
  *,
  label_smoothing: float = 0.0,
):
  """One update; the dropout key is folded with the step inside the step, as in wmt."""
  inputs, targets = batch['inputs'], batch['targets']
  rng = jax.random.fold_in(dropout_key, state.step)

  def loss_fn(params):
    logits = state.apply_fn(
      {'params': params}, inputs, shift_right(targets), deterministic=False, rngs={'dropout': rng}
    )
    return cross_entropy_loss(logits, targets, label_smoothing), logits

  (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  state = state.apply_gradients(grads=grads)
  weights = targets != PAD_ID
  correct = (jnp.argmax(logits, -1) == targets) & weights
  return state, dict(
    loss=loss, accuracy=correct.sum() / jnp.maximum(weights.sum(), 1), tokens=weights.sum()
  )


def from_config(config, size: dict, batch: dict):
  """`(state, step, mesh)`: the peer of `config`'s Transformer at `size`'s vocabularies, its
  optimizer and schedule, and label smoothing as `config` sets Attend's, the state replicated on
  the mesh Attend's state would use and `step` jitted with the state donated.

  Args:
    config: an Attend experiment config (`config.model` a post-norm Transformer).
    size: the vocabulary sizes, `{'input_vocab': ..., 'output_vocab': ...}`.
    batch: a batch of the run's shapes, `{'inputs': [B, S], 'targets': [B, T]}`.
  """
  model = linen_peer.Transformer(
    peer_model_config(config.model, size), dtype=jnp.dtype(config.dtype)
  )
  schedule = learning_rate_schedule(config)
  tx = make_optimizer(
    lambda count: schedule(count + 1),
    b1=config.beta1,
    b2=config.beta2,
    eps=config.eps,
    weight_decay=config.weight_decay,
    grad_clip=config.grad_clip,
  )
  mesh = sharding.make_mesh()
  state = sharding.replicate(create_state(model, batch, tx, config.seed), mesh)
  step = jax.jit(
    functools.partial(train_step, label_smoothing=config.label_smoothing), donate_argnums=0
  )
  return state, step, mesh
