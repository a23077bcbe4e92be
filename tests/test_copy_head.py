"""The pointer-generator output (`models/copy_head.py`) and the Transformer's `copy_source`."""

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import tsv
from models import generation
from models.copy_head import CopyHead
from models.stack_config import StackConfig
from models.transformer import Transformer
from training import config as config_lib

B, T, S, D, V = 2, 3, 4, 8, 10


def _numpy_copy(head, logits, y, memory, source_ids, source_mask):
  """The joint softmax of the module docstring, in NumPy, from the head's parameters:
  p(w) ∝ exp(logit_w) + Σ_{j: source_j = w} exp(c_j)."""
  wq = np.asarray(head.query.kernel[...])
  copy = np.exp(np.einsum('btd,bsd->bts', y @ wq, memory) / np.sqrt(D))
  mass = np.exp(logits.astype(np.float64))
  for b in range(B):
    for j in range(S):
      if source_mask[b, j]:
        mass[b, :, source_ids[b, j]] += copy[b, :, j]
  return mass / mass.sum(-1, keepdims=True)


def _inputs():
  rng = np.random.default_rng(0)
  logits = rng.standard_normal((B, T, V)).astype(np.float32)
  y = rng.standard_normal((B, T, D)).astype(np.float32)
  memory = rng.standard_normal((B, S, D)).astype(np.float32)
  # Example 0 repeats id 7 (its weights add up); example 1's last position is padding.
  source_ids = np.array([[7, 3, 7, 1], [2, 5, 9, 0]])
  source_mask = np.array([[True] * 4, [True, True, True, False]])
  return logits, y, memory, source_ids, source_mask


def test_copy_head_is_the_joint_generate_or_copy_softmax():
  head = CopyHead(D, rngs=nnx.Rngs(0))
  arrays = _inputs()
  out, paid = head(*map(jnp.asarray, arrays))
  assert paid is None  # no coverage
  want = _numpy_copy(head, *arrays)
  np.testing.assert_allclose(jax.nn.softmax(out), want, rtol=1e-5, atol=1e-7)
  # Only the ids the source holds change; the padded position's id (0) is not one of them.
  logits, source_ids = arrays[0], arrays[3]
  held = np.zeros((B, V), bool)
  held[0, [7, 3, 1]] = held[1, [2, 5, 9]] = True
  held = np.broadcast_to(held[:, None, :], logits.shape)
  np.testing.assert_array_equal(np.asarray(out)[~held], logits[~held])
  assert (np.asarray(out)[held] > logits[held]).all()
  assert source_ids[1, 3] == 0 and not held[1, 0, 0]


@pytest.mark.parametrize('coverage', [False, True])
def test_copy_head_gradients_are_finite_where_nothing_is_copied(coverage):
  """Label smoothing puts loss on every id; the padded position pools over itself alone, and a
  row of padding only (filling a last batch) has nothing to copy or cover."""
  head = CopyHead(D, coverage=coverage, rngs=nnx.Rngs(0))
  # The two examples of `_inputs`, then a third row: example 1 with every position padding.
  logits, y, memory, source_ids, source_mask = (
    jnp.concatenate([a, a[1:]]) for a in map(jnp.asarray, _inputs())
  )
  source_mask = source_mask.at[2].set(False)

  def loss(head, logits, y, memory):
    return -jnp.mean(jax.nn.log_softmax(head(logits, y, memory, source_ids, source_mask)[0]))

  grads = nnx.grad(loss, argnums=(0, 1, 2, 3))(head, logits, y, memory)
  for leaf in jax.tree.leaves(grads):
    assert bool(jnp.all(jnp.isfinite(leaf)))
  assert float(jnp.abs(grads[0].query.kernel[...]).sum()) > 0  # the pointer learns
  if coverage:
    assert float(jnp.abs(grads[0].coverage_weight[...])) > 0


def test_coverage_adds_the_attention_paid_before_each_position():
  """c'_tj = c_tj + w · Σ_{t'<t} softmax_j(c_t'j) over the real positions, in NumPy; the running
  sum it returns continues across calls (cached decoding)."""
  head = CopyHead(D, coverage=True, rngs=nnx.Rngs(0))
  head.coverage_weight[...] = jnp.float32(-2.0)
  logits, y, memory, source_ids, source_mask = _inputs()
  wq = np.asarray(head.query.kernel[...])
  scores = np.einsum('btd,bsd->bts', y @ wq, memory) / np.sqrt(D)
  attention = np.where(source_mask[:, None], np.exp(scores), 0.0)
  attention /= attention.sum(-1, keepdims=True)
  paid_before = np.zeros((B, T, S))
  for t in range(1, T):
    paid_before[:, t] = paid_before[:, t - 1] + attention[:, t - 1]
  covered = scores - 2.0 * paid_before  # the NumPy head's scores, covered
  mass = np.exp(logits.astype(np.float64))
  for b in range(B):
    for j in range(S):
      if source_mask[b, j]:
        mass[b, :, source_ids[b, j]] += np.exp(covered[b, :, j])
  arrays = [jnp.asarray(a) for a in (logits, y, memory, source_ids, source_mask)]
  out, paid = head(*arrays)
  np.testing.assert_allclose(jax.nn.softmax(out), mass / mass.sum(-1, keepdims=True), rtol=1e-5)
  np.testing.assert_allclose(paid, attention.sum(1), rtol=1e-5)
  assert np.allclose(np.asarray(paid)[1, 3], 0.0)  # padding is paid nothing
  # Position by position, carrying the sum, gives the same logits.
  running = None
  for t in range(T):
    step = [a[:, t : t + 1] for a in arrays[:2]]
    out_t, running = head(*step, *arrays[2:], running)
    np.testing.assert_allclose(out_t[:, 0], out[:, t], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(running, paid, rtol=1e-5)


def _model(**kwargs):
  stack = StackConfig(num_layers=1, d_model=16, num_heads=2, d_ff=32, max_length=16)
  return Transformer(
    input_vocab_size=12, output_vocab_size=12, pad_id=0, stack=stack, rngs=nnx.Rngs(0), **kwargs
  )


@pytest.mark.parametrize('coverage', [False, True])
def test_cached_decoding_equals_the_full_pass_with_copying(coverage):
  model = _model(copy_source=True, copy_coverage=coverage)
  if coverage:  # a weight of 0 (its initial value) would change nothing
    model.copy_head.coverage_weight[...] = jnp.float32(-3.0)
  source = jnp.array([[5, 6, 7, 0], [8, 9, 10, 11]])
  decoder_inputs = jnp.array([[1, 5, 6, 7], [1, 11, 10, 9]])
  full = model(source, decoder_inputs)
  cache = model.init_decode_cache(source, max_length=4)
  for step in range(4):
    logits, cache = model.decode_step(decoder_inputs[:, step], jnp.int32(step), cache)
    np.testing.assert_allclose(logits, full[:, step], atol=1e-5)
  ids = generation.generate(model, source, max_length=5, bos_id=1, eos_id=2, pad_id=0, beam_size=2)
  assert ids.shape[0] == 2


def test_copy_source_needs_one_vocabulary():
  with pytest.raises(ValueError, match='copy_source=True needs input_vocab_size == output'):
    Transformer(
      input_vocab_size=12,
      output_vocab_size=13,
      pad_id=0,
      copy_source=True,
      stack=StackConfig(num_layers=1, d_model=16, num_heads=2, d_ff=32),
      rngs=nnx.Rngs(0),
    )
  with pytest.raises(ValueError, match='copy_coverage=True needs copy_source=True'):
    _model(copy_coverage=True)
  with pytest.raises(ValueError, match='needs the source ids'):
    _model(copy_source=True).decode(
      jnp.ones((1, 2), jnp.int32), jnp.ones((1, 3, 16)), jnp.ones((1, 3), bool)
    )
  config = tsv.get_config()
  config.model.copy_source = True
  config.dataset.shared_vocab = False
  with pytest.raises(ValueError, match=r'copy_source=True .* needs config.dataset.shared_vocab'):
    config_lib.validate(config)
