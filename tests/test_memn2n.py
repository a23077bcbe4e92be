"""End-To-End Memory Networks: position encoding by hand, the model against a NumPy reference."""

import functools

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from attention.positions import sentence_position_encoding
from models import interventions
from models.memory import MemN2N

TOL = dict(atol=1e-5, rtol=1e-5)
PAD = 0
V, M, J, D, K = 13, 4, 3, 6, 3
# Two stories of M=4 slots of J=3 words: two real sentences then padding; three real then one
# padding slot. Queries have padding words too.
STORY = np.array(
  [[[5, 3, 0], [2, 9, 7], [0, 0, 0], [0, 0, 0]], [[1, 4, 4], [6, 0, 0], [8, 2, 11], [0, 0, 0]]],
  np.int32,
)
QUERY = np.array([[7, 12, 0], [3, 3, 10]], np.int32)
ANSWER = np.array([9, 4], np.int32)


def rngs(seed: int = 0) -> nnx.Rngs:
  """An `nnx.Rngs` over 'rbg' keys, fast to compile on CPU."""
  return nnx.Rngs(params=jax.random.key(seed, impl='rbg'))


def _model(**change) -> MemN2N:
  settings = dict(vocab_size=V, pad_id=PAD, memory_size=M, sentence_length=J, embed_dim=D, hops=K)
  return MemN2N(**(settings | change), rngs=rngs())


@functools.partial(nnx.jit, static_argnames='linear')
def _answer(model: MemN2N, story, query, linear: bool = False):
  """`model.answer` compiled once per setting and shape, not op by op."""
  return model.answer(story, query, linear=linear)


@functools.partial(nnx.jit, static_argnames='linear')
def _answer_hops(model: MemN2N, story, query, linear: bool = False):
  """`(logits, hop weights [B, K, M])`, the weights read by capture (inside the jit)."""
  logits, captured = interventions.capture(model, story, query, method='answer', linear=linear)
  hops = interventions.stack(captured, MemN2N.attention_names['hops'])  # [B, K, 1 query, M]
  assert hops.shape[2] == 1
  return logits, hops[:, :, 0]


def _np_answer(model: MemN2N, story, query, linear: bool = False):
  """The paper's forward pass in float64 loops, written from sections 2 and 4.1."""
  tables = np.asarray(model.embeddings[...], np.float64)
  temporal = None if model.temporal is None else np.asarray(model.temporal[...], np.float64)
  l = np.ones((J, D))
  if model.position_encoding:
    for j in range(1, J + 1):
      for k in range(1, D + 1):
        l[j - 1, k - 1] = (1 - j / J) - (k / D) * (1 - 2 * j / J)
  embed = lambda ids, table: ((ids != PAD)[..., None] * l * table[ids]).sum(-2)
  adjacent = model.tying == 'adjacent'
  u = embed(query, tables[0 if adjacent else 2])  # B = A^1
  slots = (story != PAD).any(-1)
  hops = []
  for hop in range(K):
    a, c = (hop, hop + 1) if adjacent else (0, 1)  # A^{k+1} = C^k
    m, out = embed(story, tables[a]), embed(story, tables[c])
    if temporal is not None:
      for b in range(story.shape[0]):
        for i in range(story.shape[1]):
          newer = slots[b, i + 1 :].sum()  # 0 = latest sentence
          m[b, i] += temporal[a, newer]
          out[b, i] += temporal[c, newer]
    p = np.einsum('bmd,bd->bm', m, u)
    if not linear:
      p = np.where(slots, np.exp(p - p.max(-1, keepdims=True)), 0.0)
      p = p / p.sum(-1, keepdims=True)
    p = np.where(slots, p, 0.0)
    hops.append(p)
    u = u if adjacent else u @ np.asarray(model.h.kernel[...], np.float64)
    u = u + np.einsum('bm,bmd->bd', p, out)
  return u @ tables[K if adjacent else 3].T, np.stack(hops, 1)  # W = C^K


def test_position_encoding_by_hand():
  # l_kj = (1 - j/J) - (k/d)(1 - 2j/J); rows j = 1..J, columns k = 1..d.
  np.testing.assert_allclose(sentence_position_encoding(2, 2), [[0.5, 0.5], [0.5, 1.0]], **TOL)
  np.testing.assert_allclose(
    sentence_position_encoding(3, 2), [[1 / 2, 1 / 3], [1 / 2, 2 / 3], [1 / 2, 1.0]], **TOL
  )
  assert sentence_position_encoding(3, 2).dtype == jnp.float32
  with pytest.raises(ValueError, match='features'):
    sentence_position_encoding(3, 0)


@pytest.mark.parametrize('tying', ['adjacent', 'layerwise'])
@pytest.mark.parametrize('linear', [False, True])
def test_matches_numpy_reference(tying, linear):
  model = _model(tying=tying)
  logits, hops = _answer_hops(model, STORY, QUERY, linear=linear)
  ref_logits, ref_weights = _np_answer(model, STORY, QUERY, linear)
  assert logits.dtype == jnp.float32 and logits.shape == (2, V)
  assert hops.shape == (2, K, M)
  np.testing.assert_allclose(hops, ref_weights, **TOL)
  np.testing.assert_allclose(logits, ref_logits, **TOL)
  np.testing.assert_allclose(_answer(model, STORY, QUERY, linear=linear), logits, **TOL)


@pytest.mark.parametrize('change', [dict(position_encoding=False), dict(temporal=False)])
def test_matches_numpy_reference_without_encodings(change):
  model = _model(**change)
  np.testing.assert_allclose(
    _answer(model, STORY, QUERY), _np_answer(model, STORY, QUERY)[0], **TOL
  )


def test_hop_weights_sum_to_one_on_real_slots_and_zero_on_padding():
  hops = np.asarray(_answer_hops(_model(), STORY, QUERY)[1])
  real = (STORY != PAD).any(-1)[:, None, :]  # [B, 1, M]
  assert np.all(hops[np.broadcast_to(~real, hops.shape)] == 0.0)
  np.testing.assert_allclose(hops.sum(-1), np.ones((2, K)), **TOL)
  empty = np.zeros_like(STORY)
  logits, hops = _answer_hops(_model(), empty, QUERY)
  assert np.all(np.asarray(hops) == 0.0) and np.all(np.isfinite(logits))


def test_padding_slots_change_nothing():
  # The same sentences in M=2 slots and in M=4 slots, two of them padding, which get no weight.
  model = _model()
  short = _answer(model, STORY[:1, :2], QUERY[:1])
  np.testing.assert_allclose(_answer(model, STORY[:1], QUERY[:1]), short, **TOL)


def test_position_encoding_sees_word_order():
  swapped = STORY.copy()
  swapped[:, 1] = swapped[:, 1, ::-1]  # [2, 9, 7] -> [7, 9, 2]
  ordered = _model()
  assert not np.allclose(_answer(ordered, STORY, QUERY), _answer(ordered, swapped, QUERY))
  bag = _model(position_encoding=False)
  np.testing.assert_allclose(_answer(bag, STORY, QUERY), _answer(bag, swapped, QUERY), **TOL)


def test_tying_shares_tables():
  # Adjacent: A^1 = B, A^{k+1} = C^k, W = C^K leave K + 1 word tables and K + 1 temporal tables;
  # untied it would be 2K + 2 word tables. Layerwise: A, C, B, W, two temporal tables and H.
  count = lambda model: sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
  assert count(_model()) == (K + 1) * V * D + (K + 1) * M * D
  assert count(_model(tying='layerwise')) == 4 * V * D + 2 * M * D + D * D
  assert count(_model(temporal=False)) == (K + 1) * V * D
  # Every adjacent table is read: the hops' C^k feed the next hop's A^{k+1} and the last the logits.
  model = _model()
  loss = lambda model: model.answer(STORY, QUERY)[np.arange(2), ANSWER].sum()
  grads = nnx.jit(nnx.grad(loss))(model)
  assert np.all(np.abs(np.asarray(grads.embeddings[...])).sum(axis=(1, 2)) > 0)


def test_training_reduces_the_loss():
  model = _model()
  graphdef, params = nnx.split(model)
  tx = optax.adam(0.05)

  def loss_fn(params):
    logits = nnx.merge(graphdef, params).answer(STORY, QUERY)
    return optax.softmax_cross_entropy_with_integer_labels(logits, ANSWER).mean()

  @jax.jit
  def step(params, opt_state):
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  opt_state = tx.init(params)
  losses = []
  for _ in range(15):
    params, opt_state, loss = step(params, opt_state)
    losses.append(float(loss))
  assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.parametrize(
  'change, field',
  [
    (dict(tying='shared'), 'tying'),
    (dict(hops=0), 'hops'),
    (dict(pad_id=V), 'pad_id'),
    (dict(memory_size=0), 'memory_size'),
    (dict(sentence_length=None), 'sentence_length'),
    (dict(embed_dim=2.5), 'embed_dim'),
  ],
)
def test_bad_settings_raise(change, field):
  with pytest.raises(ValueError, match=field):
    _model(**change)


@pytest.mark.parametrize(
  'story, query, field',
  [
    (STORY.astype(np.float32), QUERY, 'story'),
    (STORY[:, :, :2], QUERY, 'story'),  # J != sentence_length
    (np.concatenate([STORY, STORY], 1), QUERY, 'story'),  # M > memory_size
    (STORY[0], QUERY, 'story'),
    (STORY, QUERY[:1], 'query'),
    (STORY, QUERY[:, :2], 'query'),
  ],
)
def test_bad_inputs_raise(story, query, field):
  with pytest.raises(ValueError, match=f'^{field} must be'):
    _model().answer(story, query)
