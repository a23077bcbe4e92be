"""models/interventions.py: the names every family taps, edits against NumPy, patching, the HLO."""

import functools
import importlib
import json
from unittest import mock

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from interpret import split_sweep
import models
from models import HAN, NTM, DecoderLM, MemN2N, Seq2Seq, Transformer, ViT, interventions
from models.attention_layer import MultiHeadAttention
from models.stack_config import AttentionConfig, StackConfig
import tasks
from training import evaluation, sharding
from training.metrics import Progress
from training.setup import build_state
from training.steps import create_train_state, train_step

STACK = StackConfig(num_layers=2, d_model=8, num_heads=2, d_ff=16, max_length=16)
IDS = jnp.array([[3, 4, 5, 6, 0], [6, 5, 3, 0, 0]])  # [B=2, T=5], pad 0
ATTENTION = ('heads', 'keys', 'queries', 'values', 'weights')


@pytest.fixture(scope='module')
def lm():
  return DecoderLM(vocab_size=9, pad_id=0, stack=STACK, rngs=nnx.Rngs(0))


def _transformer_names(stack: str, layers: int, attentions: tuple[str, ...]) -> set[str]:
  # The stream between sublayers: TransformerLens's names, T5's for the decoder's cross-attention.
  stream = ('resid_pre', 'attn_out', 'resid_mid', 'mlp_out', 'residual')
  if 'cross_attn' in attentions:
    stream += ('cross_attn_out', 'resid_mid_cross')
  return {f'{stack}/{i}/{name}' for i in range(layers) for name in stream} | {
    f'{stack}/{i}/{attn}/{part}' for i in range(layers) for attn in attentions for part in ATTENTION
  }


def test_every_family_taps_its_attention_under_stable_names(lm):
  rngs = nnx.Rngs(0)
  lm_names = interventions.names(lm, IDS, method='token_logits')
  embeddings = {'embeddings', 'position_embeddings'}
  assert set(lm_names) == _transformer_names('layers', 2, ('self_attn',)) | embeddings
  assert lm_names['embeddings'] == (2, 5, 8) and lm_names['position_embeddings'] == (5, 8)
  vit = ViT(image_shape=(8, 8, 1), num_classes=3, patch_size=4, stack=STACK, rngs=rngs)
  vit_names = interventions.names(vit, jnp.ones((2, 8, 8, 1)))
  assert set(vit_names) == _transformer_names('encoder/layers', 2, ('self_attn',))
  assert vit_names['encoder/layers/1/self_attn/weights'] == (2, 2, 5, 5)  # [CLS] + 4 patches
  translation = Transformer(
    input_vocab_size=9, output_vocab_size=9, pad_id=0, stack=STACK, rngs=rngs
  )
  names = interventions.names(translation, IDS, IDS[:, :4])
  assert set(names) == (
    _transformer_names('encoder_layers', 2, ('self_attn',))
    | _transformer_names('decoder_layers', 2, ('self_attn', 'cross_attn'))
  )
  assert names['decoder_layers/1/cross_attn/weights'] == (2, 2, 4, 5)  # [B, N, T, S]
  assert names['decoder_layers/0/self_attn/heads'] == (2, 2, 4, 4)  # [B, N, T, H]
  seq2seq = Seq2Seq(
    input_vocab_size=9, output_vocab_size=9, pad_id=0, embed_dim=4, hidden_dim=4, rngs=rngs
  )
  # Per decoder step, stacked after the batch: [B, T, 1 query, S] and [B, T, 1, 2 * hidden].
  seq2seq_names = interventions.names(seq2seq, IDS, IDS[:, :3])
  assert seq2seq_names == {
    'attn/context': (2, 3, 1, 8),
    'attn/weights': (2, 3, 1, 5),
  }
  memn2n = MemN2N(
    vocab_size=9, pad_id=0, memory_size=3, sentence_length=5, embed_dim=4, hops=2, rngs=rngs
  )
  memn2n_names = interventions.names(memn2n, jnp.ones((2, 3, 5), jnp.int32), IDS, method='answer')
  assert memn2n_names == {
    'hop_0/weights': (2, 1, 3),
    'hop_1/weights': (2, 1, 3),
  }
  ntm = NTM(
    input_size=3, output_size=3, memory_slots=5, memory_width=4, controller_size=6, rngs=rngs
  )
  ntm_names = interventions.names(ntm, jnp.ones((2, 4, 3)), method='sequence_logits')
  assert ntm_names == {
    'read_weights': (2, 4, 1, 5),
    'write_weights': (2, 4, 1, 5),
  }  # [B, T, heads, N]
  han = HAN(vocab_size=9, num_classes=2, pad_id=0, embed_dim=4, hidden_dim=4, rngs=rngs)
  han_names = interventions.names(han, jnp.ones((2, 3, 5), jnp.int32))
  assert han_names == {
    'embedded': (6, 5, 4),
    'sentence_pool/pooled': (2, 8),
    'sentence_pool/weights': (2, 3),
    'word_pool/pooled': (6, 8),
    'word_pool/weights': (6, 5),
  }  # words: [B*S, W]
  # Every role a model lists for its pictures names weights the call records.
  for model, found in (
    (lm, lm_names),
    (vit, vit_names),
    (translation, names),
    (seq2seq, seq2seq_names),
    (memn2n, memn2n_names),
    (ntm, ntm_names),
    (han, han_names),
  ):
    for role, pattern in model.attention_names.items():
      assert interventions.stack(dict.fromkeys(found, jnp.zeros((1,))), pattern).size, role


def _numpy_attention(layer: MultiHeadAttention, x: np.ndarray, head_weights) -> np.ndarray:
  """Causal multi-head attention by hand; `head_weights(n, w)` may change head n's weights, and
  a head whose weights become None adds nothing (zero ablation)."""
  param = lambda linear: (np.asarray(linear.kernel[...]), np.asarray(linear.bias[...]))
  (wq, bq), (wk, bk), (wv, bv), (wo, bo) = map(param, (layer.w_q, layer.w_k, layer.w_v, layer.w_o))
  n, h, t = layer.num_heads, layer.d_k, x.shape[1]
  split = lambda y: y.reshape(*y.shape[:2], n, h).transpose(0, 2, 1, 3)  # [B, N, T, H]
  q, k, v = split(x @ wq + bq), split(x @ wk + bk), split(x @ wv + bv)
  scores = np.where(
    np.tril(np.ones((t, t), bool)), q @ k.transpose(0, 1, 3, 2) / np.sqrt(h), -np.inf
  )
  weights = np.exp(scores - scores.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)  # [B, N, T, T]
  out = np.zeros((*x.shape[:2], wo.shape[1]))
  for head in range(n):
    w = head_weights(head, weights[:, head])
    if w is not None:
      out += (w @ v[:, head]) @ wo[head * h : (head + 1) * h]  # [B, T, D]
  return out + bo


def test_a_zero_ablated_head_or_fixed_weights_match_the_layer_built_by_hand():
  layer = MultiHeadAttention(AttentionConfig(d_model=8, num_heads=2), rngs=nnx.Rngs(1))
  x = np.asarray(jax.random.normal(jax.random.key(2), (2, 4, 8)))
  zeroed, _ = interventions.capture(
    layer, x, is_causal=True, edits={'heads': interventions.zero_head(1)}
  )
  expected = _numpy_attention(layer, x, lambda n, w: None if n == 1 else w)
  np.testing.assert_allclose(zeroed, expected, atol=1e-5)
  uniform = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]  # causal mean, [T, S]
  fixed, captured = interventions.capture(
    layer, x, is_causal=True, edits={'weights': interventions.set_head(0, uniform)}
  )
  expected = _numpy_attention(layer, x, lambda n, w: uniform if n == 0 else w)
  np.testing.assert_allclose(fixed, expected, atol=1e-5)
  np.testing.assert_allclose(captured['weights'][:, 0], np.broadcast_to(uniform, (2, 4, 4)))
  _, means = interventions.capture(
    layer, x, is_causal=True, edits={'heads': interventions.mean_head(1, captured['heads'])}
  )
  np.testing.assert_allclose(
    means['heads'][0, 1], np.mean(captured['heads'][:, 1], axis=0), atol=1e-6
  )


def test_patching_a_run_with_its_own_activations_changes_nothing(lm):
  clean, captured = interventions.capture(lm, IDS, method='token_logits')
  patched, _ = interventions.capture(
    lm, IDS, method='token_logits', edits={name: captured[name] for name in captured}
  )
  np.testing.assert_allclose(patched, clean, atol=1e-6)


def test_patching_the_last_residual_from_a_into_b_gives_a_s_output_under_jit(lm):
  # Everything after the last block reads only its residual, so that patch carries A's output.
  other = IDS[::-1]
  a, captured = interventions.capture(lm, IDS, method='token_logits')
  run = jax.jit(
    lambda ids, edit: interventions.capture(
      lm, ids, method='token_logits', edits={'layers/1/residual': edit}
    )[0]
  )
  np.testing.assert_allclose(run(other, captured['layers/1/residual']), a, atol=1e-5)
  assert not np.allclose(lm.token_logits(other), a, atol=1e-3)


def _patched_reads(model, a_args, b_args, cases, method='__call__') -> None:
  """For each `(patched names, reader)`: with those names patched from run A into run B, the
  value `reader` is A's, where B's own differs: what the reader computes from is what was
  patched."""
  run = functools.partial(interventions.capture, model, method=method)
  _, a = run(*a_args)
  _, b = run(*b_args)
  for patched, reader in cases:
    _, got = run(*b_args, edits={name: a[name] for name in patched})
    assert not np.allclose(b[reader], a[reader], atol=1e-3), reader
    np.testing.assert_allclose(got[reader], a[reader], atol=1e-5, err_msg=reader)


def test_each_stream_tap_drives_the_sublayer_or_the_sum_that_reads_it(lm):
  # A decoder-only LM's blocks: the embeddings make the stream, each sublayer reads the stream
  # before it, and the stream after it is made of that stream and what the sublayer added (their
  # normalised sum in these post-norm blocks).
  cases = [
    (('embeddings', 'position_embeddings'), 'layers/0/resid_pre'),
    (('layers/1/resid_pre',), 'layers/1/attn_out'),
    (('layers/1/resid_pre', 'layers/1/attn_out'), 'layers/1/resid_mid'),
    (('layers/1/resid_mid',), 'layers/1/mlp_out'),
    (('layers/1/resid_mid', 'layers/1/mlp_out'), 'layers/1/residual'),
  ]
  _patched_reads(lm, (IDS,), (IDS[::-1],), cases, method='token_logits')
  # The encoder-decoder Transformer's decoder layer: cross-attention between the two (the same
  # source, so the same memory, and two target prefixes).
  translation = Transformer(
    input_vocab_size=9, output_vocab_size=9, pad_id=0, stack=STACK, rngs=nnx.Rngs(0)
  )
  path = 'decoder_layers/1'
  cross = [
    ((f'{path}/resid_mid',), f'{path}/cross_attn_out'),
    ((f'{path}/resid_mid', f'{path}/cross_attn_out'), f'{path}/resid_mid_cross'),
    ((f'{path}/resid_mid_cross',), f'{path}/mlp_out'),
  ]
  _patched_reads(translation, (IDS, IDS[:, :4]), (IDS, IDS[::-1, :4]), cross)


def test_forced_rnn_attention_drives_the_chosen_steps_contexts_inside_the_scan():
  seq2seq = Seq2Seq(
    input_vocab_size=9, output_vocab_size=9, pad_id=0, embed_dim=4, hidden_dim=4, rngs=nnx.Rngs(3)
  )
  clean, captured = interventions.capture(seq2seq, IDS, IDS[:, :3])
  one_hot = jnp.zeros_like(captured['attn/weights']).at[..., 1].set(1.0)  # all on source 1
  forced, edited = jax.jit(
    lambda w: interventions.capture(seq2seq, IDS, IDS[:, :3], edits={'attn/weights': w})
  )(one_hot)
  context = edited['attn/context']  # [B, T, 1, Dv]
  np.testing.assert_allclose(context, jnp.broadcast_to(context[:, :1], context.shape), atol=1e-6)
  assert not np.allclose(forced, clean, atol=1e-4)
  # A function edit sees one step; scan_step() picks step 1 only: step 0 stays clean.
  later = lambda w: jnp.where(interventions.scan_step() == 1, one_hot[:, 1], w)
  stepped, edited = interventions.capture(seq2seq, IDS, IDS[:, :3], edits={'attn/weights': later})
  np.testing.assert_allclose(stepped[:, 0], clean[:, 0], atol=1e-6)
  np.testing.assert_allclose(edited['attn/context'][:, 1], context[:, 1], atol=1e-6)
  assert not np.allclose(stepped[:, 1], clean[:, 1], atol=1e-4)


def test_an_unknown_name_is_one_sentence_listing_the_valid_names():
  layer = MultiHeadAttention(AttentionConfig(d_model=8, num_heads=2), rngs=nnx.Rngs(0))
  with pytest.raises(ValueError) as error:
    interventions.capture(layer, jnp.ones((1, 2, 8)), edits={'wieghts': jnp.zeros(())})
  assert str(error.value) == (
    "capture: no intermediate named 'wieghts'; this model's names for "
    'this call are heads, keys, queries, values, weights.'
  )


def _lowered_train_step(model, edits=None) -> str:
  def loss(model, batch, rng):
    del rng
    if edits is None:
      logits = model.token_logits(batch['ids'])
    else:
      logits, _ = interventions.capture(model, batch['ids'], method='token_logits', edits=edits)
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch['ids']).mean(), {}

  state = create_train_state(model, optax.adam(1e-3))
  step = jax.jit(functools.partial(train_step, loss_fn=loss))
  return step.lower(state, {'ids': IDS}, jax.random.key(0)).as_text()


def test_the_train_step_compiles_to_the_same_program_as_without_the_seams(lm, monkeypatch):
  with_seams = _lowered_train_step(lm)
  # The comparison sees a change: an ablated head is a different program.
  assert (
    _lowered_train_step(lm, {'layers/0/self_attn/heads': interventions.zero_head(0)}) != with_seams
  )
  monkeypatch.setattr(interventions, 'tap', lambda module, name, value: value)
  monkeypatch.setattr(interventions, 'active', lambda: False)
  assert _lowered_train_step(lm) == with_seams


def test_the_head_ablation_sweep_matches_heads_removed_from_the_output_projection(
  tmp_path, monkeypatch
):
  # Zeroing head h's rows of W_O removes its contribution as the sweep's edit does.
  config = importlib.import_module('configs.gpt_mqar').get_config()
  config.model = models.default_config(
    'decoder_lm', num_layers=2, d_model=8, num_heads=2, d_ff=16, max_length=32, dropout_rate=0.0
  )
  config.dataset.update(data_dir=str(tmp_path / 'tfds'), eval_batch_size=250)
  task, mesh = tasks.build(config, str(tmp_path)), sharding.make_mesh(None)
  state = build_state(config, task, mesh)
  monkeypatch.setattr(Progress, 'EVERY_SECONDS', 0.0)  # a progress line after every layer
  with mock.patch.object(split_sweep.logging, 'info') as info:
    result = split_sweep.sweep(state, task, 'validation', batch_size=250, mesh=mesh)
  lines = [call.args[0] % call.args[1:] for call in info.call_args_list]  # '%s | ETA %s'
  batches = task.batches('validation', batch_size=250, shuffle=False, seed=0, num_epochs=1)
  examples = sum(int((np.asarray(batch['index']) >= 0).sum()) for batch in batches)
  assert lines[0] == f'Head ablation: 4 heads, each over {examples} examples of validation.'
  assert result['examples'] == examples > 100
  # A line after every layer's heads (one call) of every batch (4 batches of 250).
  assert len(lines) == 1 + 4 * 2
  assert lines[1].startswith('Head ablation: batch 1/4, layers/0/self_attn | ')
  assert lines[-1].startswith('Head ablation: batch 4/4, layers/1/self_attn | ')
  assert lines[-1].endswith('ETA 0m00s') and 'heads/s' in lines[1]
  assert result['metric'] == 'accuracy'
  assert set(result['layers']) == {'layers/0/self_attn', 'layers/1/self_attn'}
  loss = lambda s: evaluation.split_metrics(s, task, 'validation', batch_size=250, mesh=mesh)
  assert result['all_metrics']['unablated']['loss'] == pytest.approx(float(loss(state)['loss']))
  # Layer 1's heads run from layer 1 on, layer 0 replaced by its clean output: the same losses.
  for layer, head in [(0, 0), (0, 1), (1, 0), (1, 1)]:
    kernel = state.params['layers'][layer]['self_attn']['w_o']['kernel']  # [N*H, D]
    params = jax.tree.map(lambda x: x, state.params)
    zeroed = kernel.at[4 * head : 4 * head + 4].set(0)
    params['layers'][layer]['self_attn']['w_o']['kernel'] = zeroed
    ablated = result['all_metrics']['layers'][f'layers/{layer}/self_attn'][str(head)]['loss']
    assert ablated == pytest.approx(float(loss(state.replace(params=params))['loss']), rel=1e-5)
  unablated = result['all_metrics']['unablated']['loss']
  changes = [
    abs(values['loss'] - unablated)
    for heads in result['all_metrics']['layers'].values()
    for values in heads.values()
  ]
  assert max(changes) > 1e-3 * unablated  # the ablations change the loss: the check can fail
  # --max_examples: the first batches holding that many (here 2 of 50 rows for 60).
  first = split_sweep.sweep(state, task, 'validation', batch_size=50, mesh=mesh, max_examples=60)
  assert first['examples'] == 100
  # Fewer than a batch: batches of that many rows, no more.
  few = split_sweep.sweep(state, task, 'validation', batch_size=50, mesh=mesh, max_examples=30)
  assert few['examples'] == 30
  paths = split_sweep.write(result, str(tmp_path))
  assert json.load(open(paths[0], encoding='utf-8'))['layers'] == result['layers']


def test_a_capture_around_a_function_compiled_before_it_records_nothing_and_says_why():
  layer = MultiHeadAttention(AttentionConfig(d_model=8, num_heads=2), rngs=nnx.Rngs(0))
  forward = nnx.jit(lambda model, x: model(x))
  x = jnp.ones((1, 3, 8))
  forward(layer, x)  # compiled here, outside any capture
  with pytest.raises(ValueError) as error:
    with interventions.editing(layer):
      forward(layer, x)  # replays the trace: no seam runs
  assert 'recorded nothing' in str(error.value) and 'open the capture inside' in str(error.value)
  inside = nnx.jit(lambda model, x: interventions.capture(model, x)[1]['weights'])
  assert inside(layer, x).shape == (1, 2, 3, 3)


def test_stack_gathers_a_pattern_in_layer_order():
  captured = {f'layers/{i}/self_attn/weights': jnp.full((2, 3), float(i)) for i in (10, 2, 0)} | {
    'layers/0/residual': jnp.zeros((2, 3))
  }
  stacked = interventions.stack(captured, 'layers/*/self_attn/weights')
  np.testing.assert_array_equal(stacked[0, :, 0], [0.0, 2.0, 10.0])
  assert stacked.shape == (2, 3, 3)
  hops = {f'hop_{k}/weights': jnp.full((1,), float(k)) for k in (10, 2)}
  np.testing.assert_array_equal(interventions.stack(hops, 'hop_*/weights')[0], [2.0, 10.0])
  with pytest.raises(KeyError, match="no intermediate matches 'cross/\\*/weights'"):
    interventions.stack(captured, 'cross/*/weights')


def test_a_capture_inside_another_applies_its_edits_and_reports_back(lm):
  """Head ablation edits the model while a task's metric opens its own capture (translation's
  entropy): the inner one runs with the outer edits and the outer one sees what it recorded."""
  name = 'layers/0/self_attn/heads'
  ablated, _ = interventions.capture(
    lm, IDS, method='token_logits', edits={name: interventions.zero_head(0)}
  )
  with interventions.editing(lm, {name: interventions.zero_head(0)}) as outer:
    inner, captured = interventions.capture(lm, IDS, method='token_logits')
  np.testing.assert_allclose(inner, ablated, atol=1e-6)
  assert np.all(np.asarray(captured[name])[:, 0] == 0.0) and name in outer.captured
