"""The teacher-forced loss, counts and metrics that translation, captioning and language modelling
share, against NumPy and hand-computed values."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tasks import losses, teacher_forcing
from tasks.losses import cross_entropy

# Two rows of three positions over four classes; the argmax of each position is its largest entry.
LOGITS = np.array(
  [
    [[2.0, 0.0, 0.0, 0.0], [0.0, 3.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]],  # argmax 0, 1, 3
    [[0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0]],  # argmax 2, 0, 1
  ],
  np.float32,
)
TARGETS = np.array([[0, 1, 2], [2, 0, 0]], np.int32)
# Row 0 scores all three (the last wrong); row 1 only its first two (both right).
WEIGHTS = np.array([[1, 1, 1], [1, 1, 0]], bool)


def _nll() -> np.ndarray:
  """`[B, T]` -log softmax of the targets, in float64."""
  logits = LOGITS.astype(np.float64)
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  return -np.take_along_axis(log_probs, TARGETS[..., None], -1)[..., 0]


def test_shift_right_puts_bos_first_and_drops_the_last_target():
  shifted = teacher_forcing.shift_right(jnp.asarray([[5, 6, 7], [8, 9, 0]]), 1)
  np.testing.assert_array_equal(shifted, [[1, 5, 6], [1, 8, 9]])


def test_token_counts_count_only_the_scored_tokens():
  counts = teacher_forcing.token_counts(jnp.asarray(LOGITS), jnp.asarray(TARGETS), WEIGHTS)
  # Row 0: 2 of 3 right, not exact; row 1: 2 of 2 scored right (its unscored last is wrong).
  assert {k: int(v) for k, v in counts.items()} == dict(tokens=5, correct=4, rows=2, exact=1)
  # Float weights count the same tokens; a row with none scored is not a row.
  rows = teacher_forcing.token_counts(
    jnp.asarray(LOGITS), jnp.asarray(TARGETS), jnp.asarray([[0, 0, 0], [0.5, 1, 0]], jnp.float32)
  )
  assert {k: int(v) for k, v in rows.items()} == dict(tokens=2, correct=2, rows=1, exact=1)


def test_losses_are_the_weighted_cross_entropy():
  nll = _nll()
  logits, targets = jnp.asarray(LOGITS), jnp.asarray(TARGETS)
  mean = teacher_forcing.mean_loss(logits, targets, WEIGHTS)
  assert float(mean) == pytest.approx(nll[WEIGHTS].mean(), rel=1e-6)
  summed = teacher_forcing.loss_sum(logits, targets, WEIGHTS)
  assert float(summed) == pytest.approx(nll[WEIGHTS].sum(), rel=1e-6)
  weights = np.array([[0.5, 1, 0], [0, 2, 0]], np.float32)
  weighted = teacher_forcing.mean_loss(logits, targets, jnp.asarray(weights))
  assert float(weighted) == pytest.approx((nll * weights).sum() / 3.5, rel=1e-6)
  # Label smoothing 0.3 over V = 4: the target gets 0.7, each other class 0.1, and the minimum
  # entropy of that distribution is subtracted, so the loss of row 1's first position is known.
  smoothed = teacher_forcing.mean_loss(
    logits[1:, :1], targets[1:, :1], np.ones((1, 1), bool), label_smoothing=0.3
  )
  log_probs = LOGITS[1, 0] - np.log(np.exp(LOGITS[1, 0]).sum())
  soft = np.array([0.1, 0.1, 0.7, 0.1])
  expected = -(soft * log_probs).sum() + (soft * np.log(soft)).sum()
  assert float(smoothed) == pytest.approx(expected, rel=1e-5)


def test_float64_logits_keep_float64_losses():
  """`tasks.losses.cross_entropy` computes in the logits' precision when wider than float32."""
  with jax.enable_x64():
    logits = jnp.asarray(LOGITS, jnp.float64) / 3.0  # not a float32 number
    losses = cross_entropy(logits, jnp.asarray(TARGETS))
    assert losses.dtype == jnp.float64
    log_probs = LOGITS.astype(np.float64) / 3.0
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    expected = -np.take_along_axis(log_probs, TARGETS[..., None], -1)[..., 0]
    np.testing.assert_allclose(np.asarray(losses), expected, rtol=1e-13)


def test_no_scored_token_gives_zero_loss_not_nan():
  none = np.zeros_like(WEIGHTS)
  assert float(teacher_forcing.mean_loss(jnp.asarray(LOGITS), jnp.asarray(TARGETS), none)) == 0


def test_metrics_of_summed_counts():
  counts = dict(loss_sum=6.0, entropy_sum=1.5, tokens=3.0, correct=2.0, rows=2.0, exact=1.0)
  metrics = teacher_forcing.teacher_forced_metrics(counts)
  assert list(metrics) == [
    'loss',
    'perplexity',
    'attention_entropy',
    'token_accuracy',
    'teacher_forced_exact_match',
  ]
  assert metrics['loss'] == 2.0 and metrics['perplexity'] == pytest.approx(np.e**2)
  assert metrics['attention_entropy'] == 0.5 and metrics['teacher_forced_exact_match'] == 0.5
  assert metrics['token_accuracy'] == pytest.approx(2 / 3)
  # Training counts have no loss sum: the scores only; no tokens divide by one, not zero.
  training = dict(tokens=0.0, correct=0.0, rows=0.0, exact=0.0)
  assert teacher_forcing.teacher_forced_metrics(training) == dict(
    token_accuracy=0.0, teacher_forced_exact_match=0.0
  )
  # The perplexity of a diverged loss stays finite: e^50 at most.
  assert teacher_forcing.loss_metrics(dict(loss_sum=80.0, tokens=1.0))['perplexity'] == (
    pytest.approx(np.exp(50.0))
  )


def test_until_eos_keeps_the_first_eos_and_drops_padding():
  tokenizer = types.SimpleNamespace(pad_id=0, eos_id=2)
  assert teacher_forcing.until_eos(np.array([5, 0, 6, 2, 7, 2, 0]), tokenizer) == [5, 6, 2]
  assert teacher_forcing.until_eos([5, 6, 0, 0], tokenizer) == [5, 6]


# 30 rows at most 4 a chunk: 8 chunks of 4, the last with 2 padded rows; at most 7: 5 of 6; one.
@pytest.mark.parametrize('rows', [4, 7, 1000])
def test_summed_cross_entropy_equals_autodiff_of_the_logits(monkeypatch, rows):
  """`summed_cross_entropy` gives the weighted loss sum, the argmax hits and every gradient of
  plain autodiff through the whole logits, in float64: a bias-free projection closed over (as a
  model's output layer is), label smoothing on, float weights with zeros."""
  vocab = 10
  monkeypatch.setattr(losses, 'CHUNK_LOGITS', rows * vocab)
  rng = np.random.default_rng(0)
  with jax.enable_x64():
    states = jnp.asarray(rng.standard_normal((3, 10, 4)))
    table = jnp.asarray(rng.standard_normal((vocab, 4)))
    labels = jnp.asarray(rng.integers(0, vocab, (3, 10)))
    weights = jnp.asarray(rng.integers(0, 3, (3, 10)) * 0.5)

    def plain(states, table):
      logits = states @ table.T
      loss = jnp.sum(weights * cross_entropy(logits, labels, 0.1))
      return loss, jnp.argmax(logits, -1) == labels

    def chunked(states, table):
      project = lambda x: x @ table.T  # closes over the table, as a model's layer does
      return losses.summed_cross_entropy(project, states, labels, weights, 0.1)

    (loss, right), grads = jax.value_and_grad(plain, (0, 1), has_aux=True)(states, table)
    (loss_c, right_c), grads_c = jax.value_and_grad(chunked, (0, 1), has_aux=True)(states, table)
    undifferentiated = jax.jit(chunked)(states, table)  # an evaluation: losses only
    np.testing.assert_allclose(undifferentiated[0], loss, rtol=1e-13)
    np.testing.assert_array_equal(undifferentiated[1], right_c)
    np.testing.assert_allclose(loss_c, loss, rtol=1e-13)
    np.testing.assert_array_equal(np.asarray(right_c).reshape(3, 10), right)
    for ours, theirs in zip(grads_c, grads):
      np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)
    # A second cotangent scales every gradient (the mean loss divides the sum).
    halved = jax.grad(lambda s, t: chunked(s, t)[0] / 2, (0, 1))(states, table)
    np.testing.assert_allclose(halved[1], grads[1] / 2, rtol=1e-12)
