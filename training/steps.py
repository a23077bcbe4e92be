"""The train state and the pure train/eval steps, jitted where they are wired up."""

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax
from flax import nnx

from data import BOS_ID, PAD_ID


@flax.struct.dataclass
class TrainState:
  """Everything a train step reads and writes; graphdef and tx are static (not arrays)."""
  step: jax.Array            # int32 scalar, number of updates applied
  params: nnx.State          # trainable parameters (nnx.Param)
  opt_state: optax.OptState  # AdamW moments, same tree as params
  other: nnx.State           # non-trainable model state, carried unchanged
  graphdef: Any = flax.struct.field(pytree_node=False)
  tx: optax.GradientTransformation = flax.struct.field(pytree_node=False)


def create_train_state(model: nnx.Module, tx: optax.GradientTransformation) -> TrainState:
  """Splits an NNX model into a train state with fresh optimizer moments."""
  graphdef, params, other = nnx.split(model, nnx.Param, ...)
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                    other=other, graphdef=graphdef, tx=tx)


def merge_model(state: TrainState, dtype=jnp.float32) -> nnx.Module:
  """The NNX model of `state`, with floating parameters cast to `dtype` (bf16 compute)."""
  params = state.params
  if dtype != jnp.float32:
    params = jax.tree.map(lambda p: p.astype(dtype) if jnp.issubdtype(p.dtype, jnp.floating)
                          else p, params)
  return nnx.merge(state.graphdef, params, state.other)


def shift_right(targets: jax.Array) -> jax.Array:
  """Decoder inputs [BOS, y_1, ..., y_{T-1}] from targets [y_1, ..., y_T] (int32 [B, T])."""
  bos = jnp.full_like(targets[:, :1], BOS_ID)
  return jnp.concatenate([bos, targets[:, :-1]], axis=1)


def cross_entropy(logits: jax.Array, targets: jax.Array, label_smoothing: float = 0.0):
  """Per-token cross-entropy against label-smoothed targets, zero on padding.

  The smoothed loss has its minimum entropy subtracted, so a perfect model scores 0 for any
  smoothing (as in the paper's set-up, where perplexity is reported unsmoothed).

  Args:
    logits: float [B, T, V].
    targets: int32 [B, T], 0 = padding.
    label_smoothing: probability mass spread uniformly over the V - 1 wrong tokens.

  Returns:
    float32 [B, T] losses, 0 where targets is padding.
  """
  vocab = logits.shape[-1]
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))          # [B, T, V]
  on = 1.0 - label_smoothing
  off = label_smoothing / (vocab - 1)
  soft = jax.nn.one_hot(targets, vocab) * (on - off) + off            # [B, T, V]
  min_entropy = -(on * jnp.log(on) + (vocab - 1) * off * jnp.log(off + 1e-20))
  losses = -jnp.sum(soft * log_probs, axis=-1) - min_entropy          # [B, T]
  return jnp.where(targets != PAD_ID, losses, 0.0)


def _token_stats(logits, targets):
  """Counts for token accuracy and exact match of a batch (padding rows count as no row)."""
  weights = targets != PAD_ID                                         # [B, T]
  correct = (jnp.argmax(logits, -1) == targets) & weights
  rows = jnp.any(weights, axis=1)                                     # [B]
  exact = jnp.all(correct | ~weights, axis=1) & rows
  return dict(tokens=weights.sum(), correct=correct.sum(), rows=rows.sum(), exact=exact.sum())


def train_step(state: TrainState, batch, rng: jax.Array, *, label_smoothing: float = 0.0,
               dtype=jnp.float32):
  """One AdamW update on a batch; a non-finite loss or gradient leaves the state unchanged.

  Args:
    state: the current train state.
    batch: {'inputs': int32 [B, S], 'targets': int32 [B, T]}, 0 = padding.
    rng: PRNG key for dropout (callers fold in the step so runs resume exactly).
    label_smoothing: see `cross_entropy`.
    dtype: compute dtype of the forward and backward pass; parameters stay float32.

  Returns:
    (new_state, metrics) with metrics 'loss' (smoothed, per token), 'grad_norm', 'finite' and the
    counts of `_token_stats`.
  """
  inputs, targets = batch['inputs'], batch['targets']

  def loss_fn(params):
    model = merge_model(state.replace(params=params), dtype)
    logits = model(inputs, shift_right(targets), deterministic=False,
                   rngs=nnx.Rngs(dropout=rng))
    losses = cross_entropy(logits, targets, label_smoothing)
    return losses.sum() / jnp.maximum((targets != PAD_ID).sum(), 1), logits

  (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  grad_norm = optax.tree.norm(grads)
  updates, opt_state = state.tx.update(grads, state.opt_state, state.params)
  updated = state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                          opt_state=opt_state)
  # An infinite update (e.g. from a huge learning rate) would poison the parameters too.
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm) & jnp.isfinite(optax.tree.norm(updates))
  # Keeping the old state on a bad step means a checkpoint can never hold NaNs.
  new_state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), updated, state)
  metrics = dict(loss=loss, grad_norm=grad_norm, finite=finite, **_token_stats(logits, targets))
  return new_state, metrics


def eval_step(state: TrainState, batch):
  """Summed unsmoothed loss and the counts of `_token_stats` on a batch (no dropout)."""
  targets = batch['targets']
  logits = merge_model(state)(batch['inputs'], shift_right(targets), deterministic=True)
  return dict(loss_sum=cross_entropy(logits, targets).sum(), **_token_stats(logits, targets))
