"""Transformer: shapes, cached decoding, causality, padding, parameter count, learning, errors."""

from conftest import build_model
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from models import interventions
from models.transformer import Transformer

SCORE_KINDS = ('scaled_dot', 'dot', 'general', 'additive', 'cosine')
# The sizes of test_layers (D=8, N=2, d_k=3, d_v=5, S=6, T=5), so its compiled eager ops are reused.
TINY = dict(
  input_vocab_size=11,
  output_vocab_size=13,
  pad_id=0,
  num_layers=2,
  d_model=8,
  num_heads=2,
  d_k=3,
  d_v=5,
  d_ff=10,
)
# Source with padding (0) in the first example; decoder inputs start with BOS = 1.
INPUTS = jnp.array([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 2, 3]], jnp.int32)
DECODER_INPUTS = jnp.array([[1, 3, 4, 5, 6], [1, 7, 8, 9, 12]], jnp.int32)


def rngs(seed: int = 0, stream: str = 'params') -> nnx.Rngs:
  """An `nnx.Rngs` over 'rbg' keys, which keeps these tests fast.

  Eager JAX compiles a kernel per random op and shape, and on CPU threefry kernels take about six
  times longer to compile than rbg ones.
  """
  return nnx.Rngs(**{stream: jax.random.key(seed, impl='rbg')})


def tiny(**overrides) -> Transformer:
  return build_model('transformer', **{**TINY, **overrides}, rngs=rngs(0))


def param_count(model: nnx.Module) -> int:
  return sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)))


@pytest.mark.parametrize('norm', ('post', 'pre'))
@pytest.mark.parametrize('score', SCORE_KINDS)
def test_shapes_and_attention_weights(score, norm):
  """Logits and every weight tensor have the interface shapes; rows sum to 1, padding gets 0."""
  model = tiny(score=score, norm=norm)
  logits, captured = interventions.capture(model, INPUTS, DECODER_INPUTS)
  attn = {
    role: interventions.stack(captured, pattern)
    for role, pattern in Transformer.attention_names.items()
  }
  assert logits.shape == (2, 5, 13) and logits.dtype == jnp.float32
  assert attn['encoder_self'].shape == (2, 2, 2, 6, 6)
  assert attn['decoder_self'].shape == (2, 2, 2, 5, 5)
  assert attn['cross'].shape == (2, 2, 2, 5, 6)
  for weights in attn.values():
    np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, atol=1e-5)
  assert np.all(np.asarray(attn['cross'])[0, ..., 4:] == 0.0)
  assert np.all(np.asarray(attn['encoder_self'])[0, ..., 4:] == 0.0)
  assert np.all(np.asarray(attn['decoder_self'])[:, :, :, np.triu(np.ones((5, 5), bool), 1)] == 0)
  np.testing.assert_allclose(model(INPUTS, DECODER_INPUTS), logits, atol=1e-6)


@pytest.mark.parametrize(
  'norm, overrides',
  [('post', dict()), ('pre', dict(positions='learned', max_length=8, tie_output=False))],
)
def test_cached_decoding_matches_teacher_forcing(norm, overrides):
  """decode_step in jit + lax.scan over a merged module reproduces the full forward pass."""
  model = tiny(norm=norm, **overrides)
  graphdef, state = nnx.split(model)

  @jax.jit
  def decode_all(state, inputs, decoder_inputs):
    model = nnx.merge(graphdef, state)
    cache = model.init_decode_cache(inputs, max_length=8)

    def step(cache, xs):
      ids, t = xs
      logits, cache = model.decode_step(ids, t, cache)
      return cache, logits

    steps = jnp.arange(decoder_inputs.shape[1], dtype=jnp.int32)
    _, logits = jax.lax.scan(step, cache, (decoder_inputs.T, steps))  # [T, B, V]
    return jnp.swapaxes(logits, 0, 1), cache

  logits, cache = decode_all(state, INPUTS, DECODER_INPUTS)
  np.testing.assert_allclose(logits, model(INPUTS, DECODER_INPUTS), atol=1e-5)
  assert all(leaf.shape[0] == 2 for leaf in jax.tree.leaves(cache))
  assert cache['layers'][0]['self']['k'].shape == (2, 2, 8, 3)
  assert cache['layers'][1]['cross']['v'].shape == (2, 2, 6, 5)


def test_future_decoder_tokens_do_not_change_earlier_logits():
  """Replacing decoder input 3 changes logits from position 3 on and nothing before it."""
  model = tiny()
  changed = DECODER_INPUTS.at[:, 3].set(2)
  before, after = model(INPUTS, DECODER_INPUTS), model(INPUTS, changed)
  np.testing.assert_allclose(after[:, :3], before[:, :3], atol=1e-6)
  assert np.abs(np.asarray(after[:, 3:] - before[:, 3:])).max() > 1e-3


def test_source_padding_does_not_change_outputs(rng):
  """Whatever sits at padded source positions (embedding or memory) leaves the outputs alone."""
  model = tiny(norm='pre')
  logits = model(INPUTS, DECODER_INPUTS)
  memory = model.encode(INPUTS)
  # Only padded source positions embed id 0: a different padding embedding changes them alone.
  table = model.source_embed.embed.embedding
  table[...] = table[...].at[0].set(jnp.asarray(10.0 * rng.standard_normal(8), jnp.float32))
  changed = model.encode(INPUTS)
  assert np.abs(np.asarray(changed[0, 4:] - memory[0, 4:])).min() > 1e-3
  np.testing.assert_allclose(changed[0, :4], memory[0, :4], atol=1e-6)
  np.testing.assert_allclose(model(INPUTS, DECODER_INPUTS), logits, atol=1e-6)
  noise = jnp.asarray(100.0 * rng.standard_normal(memory.shape), jnp.float32)
  scrambled = jnp.where((INPUTS == 0)[:, :, None], noise, memory)
  np.testing.assert_allclose(
    model.decode(DECODER_INPUTS, scrambled, INPUTS != 0), logits, atol=1e-6
  )


def test_base_model_has_paper_parameter_count():
  """Base model, shared 37k vocabulary, tied output: 63.08M parameters (paper: 65M)."""
  model = nnx.eval_shape(
    lambda: Transformer(
      input_vocab_size=37000,
      output_vocab_size=37000,
      pad_id=0,
      share_embeddings=True,
      tie_output=True,
      rngs=rngs(0),
    )
  )
  d, f, v = 512, 2048, 37000
  attention_params = 4 * (d * d + d)
  ffn_params = 2 * d * f + f + d
  expected = (
    v * d
    + 6 * (attention_params + ffn_params + 2 * 2 * d)
    + 6 * (2 * attention_params + ffn_params + 3 * 2 * d)
  )
  assert param_count(model) == expected
  assert 63e6 <= expected <= 66e6


def test_sharing_tying_and_layer_counts():
  """Unsharing adds the source table; untying adds W_out and its bias; learned positions a table."""
  abstract = lambda **kw: nnx.eval_shape(lambda: tiny(input_vocab_size=13, **kw))
  shared = abstract(share_embeddings=True)
  unshared = abstract()
  assert shared.source_embed is None and shared.output_proj is None
  assert param_count(unshared) == param_count(shared) + 13 * 8
  other = abstract(
    tie_output=False,
    positions='learned',
    max_length=10,
    norm='pre',
    num_encoder_layers=1,
    num_decoder_layers=3,
  )
  assert len(other.encoder_layers) == 1 and len(other.decoder_layers) == 3
  one_decoder_layer = param_count(unshared.decoder_layers[0])
  final_norms = 2 * 2 * 8
  assert param_count(other) == (
    param_count(unshared)
    - param_count(unshared.encoder_layers[0])
    + one_decoder_layer
    + 8 * 13
    + 13
    + 10 * 8
    + final_norms
  )
  assert unshared.encoder_norm is None and other.encoder_norm is not None


def test_dropout_is_active_only_in_training():
  """deterministic=False with rngs differs from eval and between keys; without rngs it raises."""
  model = tiny(dropout_rate=0.3)
  evaluation = model(INPUTS, DECODER_INPUTS)
  train_a = model(INPUTS, DECODER_INPUTS, deterministic=False, rngs=rngs(1, 'dropout'))
  train_b = model(INPUTS, DECODER_INPUTS, deterministic=False, rngs=rngs(2, 'dropout'))
  assert np.abs(np.asarray(train_a - evaluation)).max() > 1e-2
  assert np.abs(np.asarray(train_a - train_b)).max() > 1e-2
  with pytest.raises(ValueError, match='rngs'):
    model(INPUTS, DECODER_INPUTS, deterministic=False)
  # Attention dropout itself is tested in test_layers; here only that the rate reaches every layer.
  model = nnx.eval_shape(lambda: tiny(attention_dropout_rate=0.2))
  layers = [*model.encoder_layers, *model.decoder_layers]
  rates = {layer.self_attn.config.attention_dropout_rate for layer in layers}
  rates |= {layer.cross_attn.config.attention_dropout_rate for layer in model.decoder_layers}
  assert rates == {0.2}


def _train(norm: str, reverse: bool, steps: int = 400) -> float:
  """Trains a 1-layer model on random copy/reverse batches; returns the loss on a fresh batch."""
  vocab, length, batch = 10, 8, 32
  model = build_model(
    'transformer',
    input_vocab_size=vocab,
    output_vocab_size=vocab,
    pad_id=0,
    num_layers=1,
    d_model=32,
    num_heads=4,
    d_ff=64,
    dropout_rate=0.0,
    norm=norm,
    rngs=rngs(0),
  )
  graphdef, params = nnx.split(model)
  optimizer = optax.adam(optax.cosine_decay_schedule(1e-2, steps))
  # Batches made up front in NumPy keep the PRNG out of the compiled step (faster to compile).
  sources = np.random.default_rng(0).integers(2, vocab, (steps + 1, batch, length), np.int32)

  def loss_fn(params, source):
    targets = source[:, ::-1] if reverse else source
    decoder_inputs = jnp.concatenate([jnp.ones((batch, 1), jnp.int32), targets[:, :-1]], 1)
    logits = nnx.merge(graphdef, params)(source, decoder_inputs)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

  @jax.jit
  def train(params, sources):
    def step(carry, source):
      params, opt_state = carry
      updates, opt_state = optimizer.update(jax.grad(loss_fn)(params, source), opt_state, params)
      return (optax.apply_updates(params, updates), opt_state), None

    (params, _), _ = jax.lax.scan(step, (params, optimizer.init(params)), sources[:-1])
    return loss_fn(params, sources[-1])  # a batch no step trained on

  return float(train(params, sources))


@pytest.mark.parametrize('norm, reverse', [('post', False), ('pre', True)])
def test_learns_copy_and_reverse(norm, reverse):
  """A 1-layer model drives copy (post-norm) or reverse (pre-norm) to near-zero loss."""
  assert _train(norm, reverse) < 0.05


@pytest.mark.parametrize('positions, equivariant', [('none', True), ('sinusoidal', False)])
def test_encoder_without_positions_is_permutation_equivariant(positions, equivariant):
  """Without positions, permuting the source tokens permutes the encoder output the same way."""
  model = tiny(positions=positions)
  source = INPUTS[1:]  # [1, 6], no padding
  order = np.array([3, 0, 5, 1, 4, 2])
  memory = model.encode(source)
  permuted = model.encode(source[:, order])
  assert np.allclose(permuted, memory[:, order], atol=1e-5) == equivariant


@pytest.mark.parametrize(
  'overrides, match',
  [
    (dict(num_heads=3, d_k=None), 'd_model=8 must be divisible by num_heads=3'),
    (dict(score='bahdanau'), "score must be one of 'additive', 'cosine', 'dot', 'general'"),
    (dict(norm='sandwich'), "norm must be one of 'post', 'pre'"),
    (dict(activation='tanh'), "activation must be one of 'relu', 'gelu'"),
    (
      dict(positions='rotary'),
      "positions must be one of 'sinusoidal', 'learned', 'none', 'rope', 'alibi', 't5'",
    ),
    (dict(attention_impl='flash'), "attention_impl must be one of None, 'reference', 'chunked'"),
    (dict(score='cosine', attention_impl='chunked'), 'attention_impl applies only'),
    (dict(share_embeddings=True), 'share_embeddings=True needs input_vocab_size'),
    (dict(dropout_rate=1.5), 'dropout_rate must be in'),
    (dict(num_decoder_layers=0), 'num_decoder_layers must be a positive integer'),
  ],
)
def test_bad_config_raises(overrides, match):
  """Each bad setting raises one ValueError naming the field, before any parameter exists."""
  with pytest.raises(ValueError, match=match):
    tiny(**overrides)


def test_too_long_input_for_learned_positions_raises():
  """Learned positions cover max_length tokens; longer inputs or caches raise ValueError."""
  model = tiny(positions='learned', max_length=5)
  with pytest.raises(ValueError, match='inputs has length 6 > max_length=5'):
    model(INPUTS, DECODER_INPUTS)
  with pytest.raises(ValueError, match='max_length=8 exceeds'):
    model.init_decode_cache(INPUTS[:, :5], 8)
