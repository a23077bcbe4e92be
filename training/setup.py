"""Builds the train state an experiment config describes, for the task's data."""

import jax
from flax import nnx

from training.optim import make_optimizer
from training.steps import TrainState, create_train_state


def build_state(config, task) -> TrainState:
  """A fresh train state: `config.model` built by the task for its data, seeded by config.seed."""
  def create() -> TrainState:
    model = task.build_model(config.model, nnx.Rngs(config.seed))
    return create_train_state(model, make_optimizer(config))
  # One compiled initialiser instead of an eager compile per parameter shape (seconds on CPU).
  return jax.jit(create)()
