"""Gated attention's output gate (Qiu et al. 2025, "Gated Attention for Large Language Models"):
each head's output multiplied elementwise by a sigmoid of the layer's input, after attention and
before the output projection (their G1 position; Qwen3-Next's softmax layers).

The gate is query-dependent and sparse (many values near 0), which lets a head output nothing for
a query instead of dumping its weight on the first token (an attention sink). Shapes: per-head
outputs and gate logits `[..., N, T, Dv]`, the logits being `x W_gate` split into heads.
"""

import jax

Array = jax.Array


def head_gates(logits: Array) -> Array:
  """The gate values `sigmoid(logits)`, each in (0, 1), same shape and dtype.

  Args:
    logits: `x W_gate` per head, `[..., N, T, Dv]`.
  """
  return jax.nn.sigmoid(logits)


def gate_heads(out: Array, gates: Array) -> Array:
  """Per-head outputs gated elementwise: `out * gates`.

  Args:
    out: attention's per-head outputs `[..., N, T, Dv]`.
    gates: `head_gates(x W_gate)`, `[..., N, T, Dv]` (or broadcastable to `out`).

  Returns:
    The gated outputs, `out`'s shape, in the dtype the two promote to.
  """
  return out * gates
