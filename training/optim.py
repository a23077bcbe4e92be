"""Learning-rate schedules and the AdamW optimizer built from the experiment config."""

import jax.numpy as jnp
import optax

SCHEDULES = ('rsqrt', 'cosine', 'constant')


def learning_rate_schedule(config) -> optax.Schedule:
  """The schedule named by `config.schedule`, peaking at `config.learning_rate`.

  - 'rsqrt': the paper's schedule, linear warm-up then decay with 1/sqrt(step). Its peak (at
    `warmup_steps`) is `learning_rate`; the paper's d_model^-0.5 * warmup^-0.5 is 7.0e-4 for the
    base model with 4000 warm-up steps.
  - 'cosine': linear warm-up, then cosine decay to zero at `num_train_steps`.
  - 'constant': linear warm-up, then constant.

  Args:
    config: the experiment config (schedule, learning_rate, warmup_steps, num_train_steps).

  Returns:
    An optax schedule (step -> learning rate).
  """
  peak, warmup = config.learning_rate, max(1, config.warmup_steps)
  if config.schedule == 'rsqrt':

    def rsqrt(step):
      step = jnp.maximum(step, 1).astype(jnp.float32)  # step 0 would divide by zero
      return peak * jnp.minimum(step / warmup, jnp.sqrt(warmup / step))

    return rsqrt
  if config.schedule == 'cosine':
    return optax.warmup_cosine_decay_schedule(
      0.0, peak, warmup, max(config.num_train_steps, warmup + 1)
    )
  if config.schedule == 'constant':
    return optax.join_schedules(
      [optax.linear_schedule(0.0, peak, warmup), optax.constant_schedule(peak)], [warmup]
    )
  raise ValueError(f'config.schedule={config.schedule!r} is not one of {SCHEDULES}.')


def make_optimizer(config) -> optax.GradientTransformation:
  """AdamW (paper: beta1 0.9, beta2 0.98, eps 1e-9) with global-norm clipping when grad_clip > 0."""
  schedule = learning_rate_schedule(config)
  # Optax counts updates from 0; the k-th update uses the rate at step k, so the first is not 0.
  adamw = optax.adamw(
    lambda count: schedule(count + 1),
    b1=config.beta1,
    b2=config.beta2,
    eps=config.eps,
    weight_decay=config.weight_decay,
  )
  if config.grad_clip > 0:
    return optax.chain(optax.clip_by_global_norm(config.grad_clip), adamw)
  return adamw
