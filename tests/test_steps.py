"""training.steps.train_step's guard: which bad steps it keeps out of the state, and what it
reports.

The guard has two forms (a conditional on a CPU, a select elsewhere): run on a GPU (the GPU
checklist runs the whole suite there), these tests check the other one.
"""

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from training.steps import create_train_state, train_step


def _loss(model, batch, rng):
  """Mean squared output of a linear model, times the batch's `factor` (NaN makes it NaN)."""
  del rng
  return jnp.mean(model(batch['x']) ** 2) * batch['factor'], {}


def _step(tx, factor):
  state = create_train_state(nnx.Linear(3, 2, rngs=nnx.Rngs(0)), tx)
  batch = dict(x=jnp.ones((4, 3)), factor=jnp.float32(factor))
  new_state, metrics = jax.jit(lambda s, b: train_step(s, b, jax.random.key(0), loss_fn=_loss))(
    state, batch
  )
  changed = [
    not np.array_equal(a, b)
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(new_state.params))
  ]
  return new_state, metrics, changed


def test_a_finite_step_updates_every_parameter():
  new_state, metrics, changed = _step(optax.sgd(0.1), 1.0)
  assert bool(metrics['finite']) and all(changed) and int(new_state.step) == 1


@pytest.mark.parametrize('factor', [np.nan, np.inf])
def test_a_non_finite_loss_leaves_the_state_unchanged(factor):
  new_state, metrics, changed = _step(optax.sgd(0.1), factor)
  assert not bool(metrics['finite']) and not any(changed) and int(new_state.step) == 0


def test_a_non_finite_update_of_a_finite_gradient_is_reported():
  # The select waits on the loss and gradient only (one pass over the state); the loop stops on
  # `finite` without saving, so the poisoned parameters never reach a checkpoint.
  new_state, metrics, changed = _step(optax.sgd(np.inf), 1.0)
  assert np.isfinite(float(metrics['loss'])) and np.isfinite(float(metrics['grad_norm']))
  assert not bool(metrics['finite']) and all(changed) and int(new_state.step) == 1


def test_the_dropout_key_of_step_n_is_the_runs_key_folded_with_n():
  # Runs resume exactly only if step n's key depends on (key, n) alone; this is also the key the
  # loop folded on the host before the fold moved into the step.
  def loss(model, batch, rng):
    return jnp.mean(model(batch['x']) ** 2), dict(bits=jax.random.bits(rng, (4,)))

  key = jax.random.key(7)
  state = create_train_state(nnx.Linear(3, 2, rngs=nnx.Rngs(0)), optax.sgd(0.1))
  step = jax.jit(lambda s: train_step(s, dict(x=jnp.ones((4, 3))), key, loss_fn=loss))
  for n in (0, 5):
    _, metrics = step(state.replace(step=jnp.int32(n)))
    np.testing.assert_array_equal(
      metrics['bits'], jax.random.bits(jax.random.fold_in(key, n), (4,))
    )
