"""Test setup: CPU only, float32 matmuls at full precision, deterministic seeds."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402  (must follow the platform choice)
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")


@pytest.fixture
def rng() -> np.random.Generator:
  """A NumPy generator with a fixed seed, fresh for every test."""
  return np.random.default_rng(0)
