"""A run started as train.py starts it: `config.init_from` resolved once into a source, then
the loop (for the tests of fine-tunes)."""

import sources
import training
from training.init_from import load_matching_params


def train(config, workdir: str) -> dict:
  """`training.train_and_evaluate` with `config.init_from` resolved, as train.py does."""
  return training.train_and_evaluate(config, workdir, sources.resolve_init_from(config))


def matching_params(state, config):
  """`init_from.load_matching_params` from `config.init_from`, resolved as train.py does."""
  return load_matching_params(state, config, sources.resolve_init_from(config))
