"""Fewer key/value heads for a trained model: grouped-query conversion (Ainslie et al. 2023).

A model trained with K key/value heads becomes one with K' (K' divides K; K' = 1 is multi-query
attention) by replacing each group of K / K' consecutive heads of the key and value projections
with one head. Query head i reads key/value head i // (N / K) before and i // (N / K') after,
which lies in the group that replaced it, so every query keeps the heads it was trained with,
merged. How a group becomes one head (`POOLINGS`):

- 'mean': the mean of the group's projection weights (and biases), the paper's choice;
- 'first': the group's first head, the others dropped;
- 'random': a fresh head, as the new model initialises it (the paper's worst start).

A projection is `[..., K·H]`, its heads side by side (models/attention_layer.py's `w_k`, `w_v`:
kernels `[D, K·H]`, biases `[K·H]`). Only the keys and values change: the queries, the output
projection and every other parameter keep their shapes.
"""

import numpy as np

POOLINGS = ('mean', 'first', 'random')
_PROJECTIONS = ('w_k', 'w_v')  # the attention layer's key and value projections
_LEAVES = ('kernel', 'bias')


def is_kv_projection(name: str) -> bool:
  """Whether a dotted parameter name (`params.layers.0.self_attn.w_k.kernel`) is a key or value
  projection's kernel or bias."""
  parts = name.split('.')
  return len(parts) >= 2 and parts[-2] in _PROJECTIONS and parts[-1] in _LEAVES


def regroupable(
  saved: tuple[int, ...], wanted: tuple[int, ...], num_kv_heads: int
) -> tuple[int, int] | str:
  """`(K, K')` when a projection of shape `saved` becomes one of shape `wanted` by merging groups
  of heads into `num_kv_heads` = K' heads, else the sentence saying why it cannot."""
  if saved[:-1] != wanted[:-1] or wanted[-1] % num_kv_heads:
    return f'its shape {saved} is not {wanted} with other key/value heads'
  head_size = wanted[-1] // num_kv_heads
  if saved[-1] % head_size:
    return f'its shape {saved} is not {wanted} with other key/value heads'
  heads = saved[-1] // head_size
  if heads % num_kv_heads or heads < num_kv_heads:
    divisors = [k for k in range(1, heads + 1) if heads % k == 0]
    return (
      f'config.model.num_kv_heads={num_kv_heads} does not divide its {heads} key/value heads '
      f'(any of {divisors} would)'
    )
  return heads, num_kv_heads


def regroup(saved: np.ndarray, heads: int, num_kv_heads: int, pooling: str, fresh: np.ndarray):
  """`saved` `[..., K·H]` with its K heads merged into `num_kv_heads` K' by `pooling`; `fresh`
  is the new model's own initial value of that projection, `[..., K'·H]` ('random' takes it)."""
  if pooling not in POOLINGS:
    raise ValueError(f'pooling={pooling!r} is not one of {POOLINGS}.')
  if pooling == 'random':
    return np.asarray(fresh)
  lead = saved.shape[:-1]
  groups = np.asarray(saved).reshape(*lead, num_kv_heads, heads // num_kv_heads, -1)  # [.,K',G,H]
  merged = groups.mean(axis=-2) if pooling == 'mean' else groups[..., 0, :]  # [..., K', H]
  return merged.reshape(*lead, -1).astype(saved.dtype)
