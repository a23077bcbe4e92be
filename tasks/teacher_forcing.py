"""Teacher forcing: a model scored on every target token, given the true tokens before it.

Translation, captioning and language modelling train and evaluate their outputs this way, and
share what it measures here (as the flax wmt example shares one `compute_metrics` between its
train and eval steps): the loss, the counts of scored and correct tokens a batch adds up, and the
metrics of their sums. Targets are int `[B, T]`; `weights` `[B, T]` (bool or float, 0 = not
scored: padding, or the tokens a language model is not asked for) say which tokens count.
A sequence-to-sequence decoder reads `shift_right(targets)` and its decoded rows are read back
with `until_eos`.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tasks.losses import cross_entropy

Array = jax.Array


def shift_right(targets: Array, bos_id: int) -> Array:
  """Decoder inputs `[BOS, y_1, ..., y_{T-1}]` from targets `[y_1, ..., y_T]` (int32 `[B, T]`)."""
  bos = jnp.full_like(targets[:, :1], bos_id)
  return jnp.concatenate([bos, targets[:, :-1]], axis=1)


def _losses(logits: Array, targets: Array, weights: Array, label_smoothing: float) -> Array:
  """`[B, T]` cross-entropy of the scored tokens times their weights; 0 elsewhere."""
  return cross_entropy(logits, targets, label_smoothing, where=weights > 0) * weights


def mean_loss(logits: Array, targets: Array, weights: Array, label_smoothing: float = 0.0) -> Array:
  """The training loss: label-smoothed cross-entropy (`tasks.losses.cross_entropy`) of logits
  `[B, T, V]` per unit of weight (per scored token for 0/1 weights)."""
  return _losses(logits, targets, weights, label_smoothing).sum() / jnp.maximum(weights.sum(), 1)


def loss_sum(logits: Array, targets: Array, weights: Array) -> Array:
  """The weighted unsmoothed cross-entropy of logits `[B, T, V]`, summed: an evaluation count
  (`loss_metrics` divides the split's sum by its tokens)."""
  return _losses(logits, targets, weights, 0.0).sum()


def token_counts(logits: Array, targets: Array, weights: Array) -> dict[str, Array]:
  """Scored tokens, correct ones (the argmax of logits `[B, T, V]`; `jnp.argmax`, which over a
  whole batch needs no buffer, unlike `models.decoding.argmax`), rows with a scored token, and
  such rows whose scored tokens are all correct (`exact`)."""
  return hit_counts(jnp.argmax(logits, axis=-1) == targets, weights)


def hit_counts(hits: Array, weights: Array) -> dict[str, Array]:
  """`token_counts` of bool `[B, T]` hits (the prediction is the target) and their weights."""
  scored = weights > 0  # [B, T]
  right = hits | ~scored  # [B, T]
  has = scored.any(-1)  # [B]
  return dict(
    tokens=scored.sum(),
    correct=(right & scored).sum(),
    rows=has.sum(),
    exact=(right.all(-1) & has).sum(),
  )


def token_scores(counts: dict[str, Any]) -> tuple[float, float]:
  """`(token accuracy, share of rows all right)` from summed `token_counts`."""
  return counts['correct'] / max(counts['tokens'], 1), counts['exact'] / max(counts['rows'], 1)


def loss_metrics(counts: dict[str, Any]) -> dict[str, float]:
  """The loss per token (nats) and its perplexity from summed `loss_sum` and `token_counts`;
  none where the counts have no 'loss_sum' (training)."""
  if 'loss_sum' not in counts:
    return {}
  loss = counts['loss_sum'] / max(counts['tokens'], 1)
  return dict(loss=loss, perplexity=float(np.exp(min(loss, 50.0))))


def teacher_forced_metrics(counts: dict[str, Any]) -> dict[str, float]:
  """A sequence-to-sequence task's metrics of summed counts: `loss_metrics`, the attention
  entropy per token where the counts have 'entropy_sum', then token accuracy and exact match."""
  metrics = loss_metrics(counts)
  if 'entropy_sum' in counts:
    metrics.update(attention_entropy=counts['entropy_sum'] / max(counts['tokens'], 1))
  accuracy, exact = token_scores(counts)
  return dict(metrics, token_accuracy=accuracy, teacher_forced_exact_match=exact)


def until_eos(ids, tokenizer) -> list[int]:
  """Decoded token ids up to and including the first EOS (where targets end), padding dropped."""
  ids = [int(i) for i in ids if i != tokenizer.pad_id]
  return ids[: ids.index(tokenizer.eos_id) + 1] if tokenizer.eos_id in ids else ids
