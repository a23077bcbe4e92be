"""The training benchmark runs end to end, and its peers are the same model and loss as Attend's."""

import json

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import linen_peer, linen_peer_train, peers, train_bench
import models
from tasks.losses import cross_entropy
from tasks.teacher_forcing import shift_right

# configs/default.py at vocabularies 1000 -> 64, counted by hand (D=128, d_ff=256, tied output):
#   embeddings (1000 + 64) * 128 = 136,192; one attention 4 * (128 * 128 + 128) = 66,048;
#   feed-forward 128 * 256 + 256 + 256 * 128 + 128 = 65,920; one LayerNorm 2 * 128 = 256;
#   encoder layer 66,048 + 65,920 + 2 * 256 = 132,480;
#   decoder layer 2 * 66,048 + 65,920 + 3 * 256 = 198,784.
DEFAULT_PARAMS = 136_192 + 2 * 132_480 + 2 * 198_784


@pytest.mark.slow
def test_bench_runs_and_parameter_counts_match(tmp_path):
  # Torch is left out to keep this fast (eager torch steps are slow on a busy CPU); its count
  # is checked without training in the next test.
  path = tmp_path / 'train.json'
  out = train_bench.main(
    [
      '--sizes=default',
      '--steps=1',
      '--repeats=1',
      '--models=attend,linen',
      '--peak_tflops=2',
      f'--json={path}',
    ]
  )
  rows = {row['model']: row for row in out['results']}
  assert sorted(rows) == ['attend', 'linen']
  assert rows['attend']['params'] == DEFAULT_PARAMS
  assert rows['linen']['params'] == DEFAULT_PARAMS
  for row in rows.values():
    assert np.isfinite(row['tokens_per_s']) and row['tokens_per_s'] > 0
    assert row['mfu'] == pytest.approx(row['tflops'] / 2)
  assert rows['attend']['x_linen'] == pytest.approx(
    rows['attend']['tokens_per_s'] / rows['linen']['tokens_per_s']
  )
  assert json.loads(path.read_text())['results'] == out['results']


def test_train_flops_by_hand():
  """configs/default.py at size `default` (D=128, d_ff=256, 2+2 layers, B=64, S=16, T=32, V=64):
  weight matmuls per sequence 16*2*(4*128^2 + 2*128*256) + 32*2*(6*128^2 + 2*128*256)
  + 16*2*2*128^2 + 32*128*64 = 15,990,784 multiply-adds; attention products
  2*4*16^2*128 + 2*(4*32^2*128 + 4*32*16*128) = 1,835,008 FLOPs; times 3 (backward) and 64."""
  config = train_bench.experiment_config('default')
  expected = 3 * 64 * (2 * 15_990_784 + 1_835_008)
  assert train_bench.train_flops(config.model, train_bench.SIZES['default']) == expected


def test_torch_peer_parameter_count_and_logits_shape():
  torch = pytest.importorskip('torch')
  from benchmarks import torch_peer  # needs torch

  size = train_bench.SIZES['default']
  peer_config = peers.peer_model_config(train_bench.experiment_config('default').model, size)
  del peer_config['attention_dropout_rate']
  model = torch_peer.TorchTransformer(**peer_config)
  # Attend's count plus nn.Transformer's final encoder and decoder LayerNorms (2 * 2 * 128).
  assert torch_peer.param_count(model) == DEFAULT_PARAMS + 4 * 128
  peers.check_param_counts(
    {'attend': DEFAULT_PARAMS, 'torch': torch_peer.param_count(model)}, d_model=128
  )
  batch = {
    k: torch.as_tensor(v[:2], dtype=torch.long)
    for k, v in train_bench.synthetic_batch(size).items()
  }
  logits = model(batch['inputs'], torch_peer.shift_right(batch['targets']))
  assert tuple(logits.shape) == (2, 32, 64)


def test_check_param_counts_rejects_a_different_model():
  peers.check_param_counts({'attend': 100, 'linen': 100, 'torch': 100 + 4 * 8}, d_model=8)
  with pytest.raises(RuntimeError, match='linen has 101'):
    peers.check_param_counts({'attend': 100, 'linen': 101}, d_model=8)
  with pytest.raises(RuntimeError, match='torch has 100'):
    peers.check_param_counts({'attend': 100, 'torch': 100}, d_model=8)


def test_synthetic_batch_is_right_padded_with_ids_from_4():
  size = train_bench.SIZES['default']
  batch = train_bench.synthetic_batch(size)
  targets = batch['targets']
  assert batch['inputs'].shape == (64, 16) and targets.shape == (64, 32)
  assert targets.dtype == np.int32
  real = targets != 0
  assert real[:, 0].all() and (~real[:, -1]).all()  # 1 to 4 trailing pads per row
  assert (np.diff(real.astype(int), axis=1) <= 0).all()  # no real id after a pad
  assert targets[real].min() >= 4 and targets.max() < 64


def test_linen_forward_has_logits_shape():
  size = train_bench.SIZES['default']
  config = train_bench.experiment_config('default')
  model = linen_peer.Transformer(peers.peer_model_config(config.model, size))
  batch = {k: v[:2] for k, v in train_bench.synthetic_batch(size).items()}
  decoder_inputs = linen_peer_train.shift_right(batch['targets'])
  variables = jax.jit(model.init)(jax.random.key(0), batch['inputs'], decoder_inputs)
  logits = jax.jit(model.apply)(variables, batch['inputs'], decoder_inputs)
  assert logits.shape == (2, 32, 64) and logits.dtype == jnp.float32
  assert bool(jnp.isfinite(logits).all())


def test_linen_peer_computes_attends_function():
  size = train_bench.SIZES['default']
  config = train_bench.experiment_config('default')
  attend = models.build(
    config.model,
    input_vocab_size=size['input_vocab'],
    output_vocab_size=size['output_vocab'],
    pad_id=0,
    rngs=nnx.Rngs(0),
  )
  peer = linen_peer.Transformer(peers.peer_model_config(config.model, size))
  batch = {k: v[:4] for k, v in train_bench.synthetic_batch(size).items()}
  params = linen_peer.params_from_attend(
    nnx.to_pure_dict(nnx.state(attend, nnx.Param)), config.model.num_heads
  )
  decoder_inputs = shift_right(batch['targets'], 1)  # BOS = 1
  expected = nnx.jit(lambda m, x, y: m(x, y))(attend, batch['inputs'], decoder_inputs)
  got = jax.jit(peer.apply)({'params': params}, batch['inputs'], decoder_inputs)
  assert float(jnp.abs(expected).max()) > 1.0  # not a vacuous comparison of near-zero logits
  np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_linen_loss_by_hand():
  # Uniform logits over V=4: log-probabilities all -ln 4. Without smoothing the loss is ln 4.
  # With smoothing 0.1 the entropy floor of the soft target (0.9, 0.1/3, 0.1/3, 0.1/3),
  # -(0.9 ln 0.9 + 0.1 ln(0.1/3)) = 0.0948245 + 0.3401197, comes off: 0.9513502.
  logits = jnp.zeros((1, 3, 4))
  targets = jnp.array([[2, 3, 0]])  # the padded position must not count
  assert float(linen_peer_train.cross_entropy_loss(logits, targets)) == pytest.approx(
    np.log(4), 1e-6
  )
  assert float(linen_peer_train.cross_entropy_loss(logits, targets, 0.1)) == pytest.approx(
    0.9513502, 1e-6
  )


@pytest.mark.parametrize('label_smoothing', [0.0, 0.1])
def test_linen_loss_equals_attend_cross_entropy(rng, label_smoothing):
  logits = jnp.asarray(rng.standard_normal((3, 5, 7)) * 3, jnp.float32)
  targets = jnp.asarray(rng.integers(1, 7, (3, 5)))
  targets = targets.at[:, 3:].set(0).at[0, 1:].set(0)  # rows with 3 and 1 real tokens
  per_token = cross_entropy(logits, targets, label_smoothing, where=targets != 0)  # 0 on padding
  attend = per_token.sum() / (targets != 0).sum()
  peer = linen_peer_train.cross_entropy_loss(logits, targets, label_smoothing)
  assert float(peer) == pytest.approx(float(attend), rel=1e-6)
