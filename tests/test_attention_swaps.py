"""studies/attention_swaps.py on a tiny random Llama checkpoint: every variant starts from the
checkpoint's weights, the unchanged model's step 0 is the checkpoint's own score, and a finished
run is read back rather than trained again."""

import json

import jax.numpy as jnp
import numpy as np
import pytest
from tiny_decoders import VOCAB, write_checkpoint

import attention
import sources
from studies import attention_swaps, attention_transfer

TRANSFERRED = 'linear (Hedgehog) after attention transfer'


def test_the_study_trains_each_variant_from_the_weights_and_reads_a_finished_one(
  tmp_path, subtests, capsys
):
  """One test, so that one pytest-xdist worker runs the study (a module fixture ran once per
  worker: 13 s of CPU each)."""
  folder = write_checkpoint('llama', str(tmp_path / 'llama'))
  text = tmp_path / 'text.txt'
  words = np.random.default_rng(0).integers(1, VOCAB, (400, 9))
  text.write_text('\n'.join(' '.join(f'w{i}' for i in row) for row in words))
  out = tmp_path / 'out'
  args = ['--checkpoint', folder, '--text', str(text), '--out', str(out)]
  args += ['--steps=2', '--eval_every=1', '--batch=4', '--seq_length=16', '--window=4']
  args.append('--transfer_steps=10')
  # The others' conversions: test_init_from_checkpoint; plain linear attention: test_variants.
  result = attention_swaps.main(args + [f'--variants=unchanged,{TRANSFERRED}'])
  with subtests.test('every variant has a curve from the trained weights'):
    assert [row['name'] for row in result['variants']] == ['unchanged', TRANSFERRED]
    rows = {row['name']: row for row in result['variants']}
    for row in rows.values():
      assert [step for step, _ in row['curve']] == [0, 1, 2]
      assert np.isfinite(row['test_after'])
    # Only the attention changed at step 0: the linear map computes something else.
    assert rows[TRANSFERRED]['before'] != rows['unchanged']['before']
    assert json.loads((out / 'swaps.json').read_text())['steps'] == 2
    assert (out / 'swaps.png').stat().st_size > 10_000
  with subtests.test('the attention transfer trains the maps the fine-tune starts from'):
    transferred = out / 'linear_Hedgehog_after_attention_transfer_transfer'
    report = json.loads((transferred / 'transfer.json').read_text())
    assert report['steps'] == 10
    assert report['held_out_loss']['after'] < report['held_out_loss']['before']
    assert len(report['per_layer']['after']) == 2  # the tiny model's layers
    config = json.loads((transferred / 'config.json').read_text())
    assert (config['model']['attention'], config['model']['feature_map']) == ('linear', 'hedgehog')
    state = sources.resolve(str(transferred)).restore().state
    maps = state.params['layers'][0]['self_attn']['query_features']
    assert maps.shape == (4, 8, 8) and not np.allclose(maps, np.eye(8))
    tuned = out / 'linear_Hedgehog_after_attention_transfer'
    assert json.loads((tuned / 'config.json').read_text())['init_from'] == str(transferred)
    log = (tuned / 'train.log').read_text()
    assert 'loaded 25 of 25 parameter arrays; initialised: none' in log
  with subtests.test('a finished variant is read, not trained again'):
    capsys.readouterr()
    again = attention_swaps.main(args + ['--variants=unchanged'])
    assert 'training' not in capsys.readouterr().out
    assert again['variants'][0]['curve'] == result['variants'][0]['curve']


def test_a_window_that_would_not_bind_is_one_sentence(tmp_path):
  args = ['--checkpoint', 'unread', '--text', 'unread.txt', '--out', str(tmp_path / 'out')]
  with pytest.raises(ValueError, match='--window=16 must be in 1 .. --seq_length - 1 = 15'):
    attention_swaps.main(args + ['--seq_length=16', '--window=16'])
  assert not (tmp_path / 'out').exists()


def test_transfer_loss_is_the_squared_error_of_linear_against_softmax_outputs(rng):
  """Zero where the softmax outputs are linear attention's own, then the mean square of what
  was added, over the real (unpadded) queries and per layer."""
  q, k, v = (jnp.asarray(rng.standard_normal((2, 2, 3, 5, 4)), jnp.float32) for _ in range(3))
  maps = {
    'query_features': jnp.asarray(rng.standard_normal((2, 3, 4, 4)), jnp.float32),
    'key_features': jnp.asarray(rng.standard_normal((2, 3, 4, 4)), jnp.float32),
  }
  key_mask = jnp.asarray([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)[:, None, None, :]
  linear = attention.get_variant('linear')
  heads = jnp.stack(
    [
      linear.attend(
        q[i],
        k[i],
        v[i],
        mask=key_mask,
        is_causal=True,
        feature_weights=(maps['query_features'][i], maps['key_features'][i]),
      )
      for i in range(2)
    ]
  )
  taps = dict(queries=q, keys=k, values=v, heads=heads)
  loss, per_layer = attention_transfer.transfer_loss(maps, taps, key_mask)
  np.testing.assert_allclose(per_layer, [0.0, 0.0], atol=1e-10)
  shifted = dict(taps, heads=heads + jnp.asarray([0.5, 1.0])[:, None, None, None, None])
  shifted = dict(shifted, heads=shifted['heads'].at[:, 1, :, 3:].add(100.0))  # padded queries
  loss, per_layer = attention_transfer.transfer_loss(maps, shifted, key_mask)
  np.testing.assert_allclose(per_layer, [0.25, 1.0], rtol=1e-5)
  np.testing.assert_allclose(loss, 0.625, rtol=1e-5)
