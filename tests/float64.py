"""Attend models in float64, for comparisons with a reference that also computes in float64.

A float32 comparison after several layers sits at the edge of float32 rounding, and which side of
the edge a machine lands on depends on how XLA orders the sums for its vector width (SSE, AVX2,
AVX-512). In float64 the rounding is about 1e-16 relative, so two implementations of the same
function agree to about 1e-13 on any CPU and a tolerance of 1e-9 still separates them from any
real difference (a wrong epsilon, a missing bias, a transposed head) by orders of magnitude.

    with float64.model_in_float64(model) as model64:
      logits = model64.token_logits(jnp.asarray(ids))   # float64
"""

import contextlib

from flax import nnx
import jax
import jax.numpy as jnp

# Absolute tolerance of a float64 comparison of activations, weights or logits of magnitude up
# to about 100 (see the module docstring): measured differences are 1e-14 to 1e-12.
ATOL = 1e-9


@contextlib.contextmanager
def model_in_float64(model: nnx.Module):
  """Within the `with` block, JAX's 64-bit types on (jax_enable_x64) and a copy of `model` whose
  floating parameters are float64: its float32 values exactly, so it computes the same function
  as `model`, in float64. Yields the copy."""
  with jax.enable_x64(True):
    graphdef, state = nnx.split(model)
    wide = lambda x: x.astype(jnp.float64) if jnp.issubdtype(x.dtype, jnp.floating) else x
    yield nnx.merge(graphdef, jax.tree.map(wide, state))
