"""Reading and editing a trained model's insides: one room, one engine.

The taps themselves are the models' (`models.interventions`: every attention layer's queries,
keys, values, weights and per-head outputs, every block's residual streams and sublayer outputs,
named by module path, as TransformerLens's hook points; docs/interventions.md maps the names).
This package is what reads and edits them, below `reports/` and `studies/`, which only call it:

- `heads`: the model's attention heads (`grid`: the layers `models.attention_paths` lists), and
  the engine: a compiled program that runs a reading of the model (a metric of its logits, a
  task's counts) once per mask of replaced heads, vmapped, and the one loop that drives it.
- `effects`: a prompt's metric with each head zeroed, mean-ablated or patched (`head_effects`),
  and with a set of heads replaced together (`ablated_metric`).
- `split_sweep`: a task's metrics over a split with each head ablated (eval.py --ablate_heads).
- `patching`: path patching, from sender heads to the queries, keys or values of receivers.
- `attribution`: direct logit attribution per head, and the logit lens.
- `figures`: the layers x heads map every command and study draws.

Import the modules themselves: `from interpret import effects`.
"""
