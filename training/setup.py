"""Builds the model and train state an experiment config describes."""

import jax
from flax import nnx

import models
from training.optim import make_optimizer
from training.steps import TrainState, create_train_state


def build_state(config, task) -> TrainState:
  """A fresh train state: `config.model` built for the task's vocabularies, seeded by config.seed."""
  def create() -> TrainState:
    model = models.build(config.model, input_vocab_size=task.source_tokenizer.vocab_size,
                         output_vocab_size=task.target_tokenizer.vocab_size,
                         rngs=nnx.Rngs(config.seed))
    return create_train_state(model, make_optimizer(config))
  # One compiled initialiser instead of an eager compile per parameter shape (seconds on CPU).
  return jax.jit(create)()


def max_decode_length(config) -> int:
  """config.max_decode_length, or room for the longest target plus EOS when it is 0."""
  return config.max_decode_length or config.dataset.max_target_length + 1
