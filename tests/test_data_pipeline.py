"""Filtering, padding, bucketing, epochs, sharding and resuming of the batch iterator."""

import json
import logging

import numpy as np
import pytest

from data.encoded_split import encode_split
from data.pipeline import PaddedBatches

# Example k has source length SOURCE_LENGTHS[k] filled with id 5 + k (EOS comes on top).
SOURCE_LENGTHS = [3, 9, 1, 5, 2]
TARGET_LENGTHS = [2, 4, 3, 1, 6]


def _encoded(**kwargs):
  limits = {'max_input_length': 20, 'max_target_length': 20, 'truncate': False, **kwargs}
  sources = [[5 + k] * n for k, n in enumerate(SOURCE_LENGTHS)]
  targets = [[10 + k] * n for k, n in enumerate(TARGET_LENGTHS)]
  return encode_split('demo', sources, targets, **limits)


def _random_encoded(n=300):
  """n examples of random lengths 1..30: several length-sorted pools at batch size 4."""
  rng = np.random.default_rng(0)
  sources = [[4 + k % 50] * int(rng.integers(1, 31)) for k in range(n)]
  targets = [[4 + k % 40] * int(rng.integers(1, 31)) for k in range(n)]
  return encode_split(
    'random', sources, targets, max_input_length=30, max_target_length=30, truncate=False
  )


def _iterator(encoded, **kwargs):
  args = {
    'batch_size': 2,
    'shuffle': False,
    'seed': 0,
    'num_epochs': 1,
    'process_index': 0,
    'process_count': 1,
    'bucket_step': 4,
    **kwargs,
  }
  return PaddedBatches(encoded, **args)


def test_encode_appends_eos_and_stores_flat():
  """Each sequence gains EOS (2); offsets delimit the examples in one flat array."""
  encoded = _encoded()
  np.testing.assert_array_equal(encoded.index, [0, 1, 2, 3, 4])
  np.testing.assert_array_equal(encoded.source_lengths, [4, 10, 2, 6, 3])
  np.testing.assert_array_equal(encoded.source[:6], [5, 5, 5, 2, 6, 6])
  np.testing.assert_array_equal(encoded.target_offsets, [0, 3, 8, 12, 14, 21])


def test_eval_order_padding_and_partial_batch():
  """shuffle=False: sorted by length, padded to multiples of 4, last batch filled with zeros."""
  batches = list(_iterator(_encoded()))
  assert len(batches) == 3
  first, second, last = batches
  # Source lengths with EOS: [4, 10, 2, 6, 3] -> order 2, 4, 0, 3, 1.
  np.testing.assert_array_equal(first['index'], [2, 4])
  np.testing.assert_array_equal(first['inputs'], [[7, 2, 0, 0], [9, 9, 2, 0]])
  np.testing.assert_array_equal(first['targets'], [[12, 12, 12, 2, 0, 0, 0, 0], [14] * 6 + [2, 0]])
  np.testing.assert_array_equal(second['index'], [0, 3])
  assert second['inputs'].shape == (2, 8) and second['targets'].shape == (2, 4)
  np.testing.assert_array_equal(last['index'], [1, -1])
  np.testing.assert_array_equal(last['inputs'], [[6] * 9 + [2, 0, 0], [0] * 12])
  np.testing.assert_array_equal(last['targets'], [[11, 11, 11, 11, 2, 0, 0, 0], [0] * 8])
  for batch in batches:
    assert {k: v.dtype for k, v in batch.items()} == {k: np.int32 for k in batch}


def test_loss_mask_counts_real_tokens():
  """targets != 0 marks exactly the target tokens plus EOS of the real rows."""
  batches = list(_iterator(_encoded()))
  assert sum(int((b['targets'] != 0).sum()) for b in batches) == sum(TARGET_LENGTHS) + 5
  assert sum(int((b['inputs'] != 0).sum()) for b in batches) == sum(SOURCE_LENGTHS) + 5


def test_filtering_drops_and_logs(caplog):
  """Examples over a limit are dropped and counted in the log; 'index' still points at them."""
  with caplog.at_level(logging.WARNING):
    encoded = _encoded(max_input_length=8, max_target_length=5)
  np.testing.assert_array_equal(encoded.index, [0, 2, 3])
  assert any(
    'dropped 2 of 5' in r.getMessage()
    and '1 over max_input_length=8' in r.getMessage()
    and '1 over max_target_length=5' in r.getMessage()
    for r in caplog.records
  )
  indices = [i for b in _iterator(encoded, batch_size=4) for i in b['index'] if i >= 0]
  assert sorted(indices) == [0, 2, 3]


def test_truncation_keeps_everything(caplog):
  """truncate=True cuts sources/targets to the limits, still ends them with EOS, and logs it."""
  with caplog.at_level(logging.WARNING):
    encoded = _encoded(max_input_length=4, max_target_length=3, truncate=True)
  assert any('truncated 3 of 5' in r.getMessage() for r in caplog.records)
  np.testing.assert_array_equal(encoded.index, [0, 1, 2, 3, 4])
  np.testing.assert_array_equal(encoded.source_lengths, [4, 5, 2, 5, 3])
  np.testing.assert_array_equal(encoded.target_lengths, [3, 4, 4, 2, 4])
  np.testing.assert_array_equal(encoded.source[4:9], [6, 6, 6, 6, 2])


def test_empty_after_filtering_names_the_limit():
  """If the limits remove every example, the error says which limit did."""
  with pytest.raises(ValueError, match=r'all 5 examples.*5 over max_target_length=0'):
    _encoded(max_target_length=0)
  with pytest.raises(ValueError, match='has no examples'):
    encode_split('empty', [], [], max_input_length=4, max_target_length=4, truncate=False)


def test_shuffled_epochs_cover_every_example_and_differ():
  """Each epoch visits every example once, in a new order; each batch takes the smallest bucket."""
  encoded = _random_encoded()
  it = _iterator(encoded, shuffle=True, seed=3, num_epochs=3, batch_size=8)
  assert it.batches_per_epoch == 38  # 300 / 8, rounded up
  orders = []
  for _ in range(3):
    epoch = [next(it) for _ in range(it.batches_per_epoch)]
    rows = [int(i) for b in epoch for i in b['index']]
    assert sorted(rows) == [-1] * 4 + list(range(300))
    orders.append(rows)
    for b in epoch:
      for key in ('inputs', 'targets'):
        longest = int((b[key] != 0).sum(axis=1).max())
        assert b[key].shape[1] % 4 == 0 and b[key].shape[1] - 4 < longest
  assert orders[0] != orders[1] != orders[2]
  with pytest.raises(StopIteration):
    next(it)


def test_bucketing_keeps_padding_small():
  """Length-sorted pools pad far less than random batches of the same size would."""
  encoded = _random_encoded()
  it = _iterator(encoded, shuffle=True, seed=0, num_epochs=1, batch_size=8)
  padding = np.mean([(b['inputs'] == 0).mean() for b in it])
  assert padding < 0.25  # 0.15 here; the same batches without length sorting pad 0.44


def test_resume_gives_the_identical_next_batches():
  """A JSON round trip of the state, set on a fresh iterator, continues where the first left off."""
  encoded = _random_encoded()
  it = _iterator(encoded, shuffle=True, seed=7, num_epochs=None, batch_size=8)
  for _ in range(40):  # Crosses the end of the first epoch (38 batches).
    next(it)
  state = json.loads(json.dumps(it.get_state()))
  assert state == {'epoch': 1, 'batch': 2}
  expected = [next(it) for _ in range(5)]
  fresh = next(_iterator(encoded, shuffle=True, seed=7, num_epochs=None, batch_size=8))
  assert fresh['index'].tolist() != expected[0]['index'].tolist()  # so resuming is observable
  resumed = _iterator(encoded, shuffle=True, seed=7, num_epochs=None, batch_size=8)
  resumed.set_state(state)
  from_arrays = _iterator(encoded, shuffle=True, seed=7, num_epochs=None, batch_size=8)
  from_arrays.set_state({key: np.array(value) for key, value in state.items()})
  for want in expected:
    for resumed_it in (resumed, from_arrays):
      got = next(resumed_it)
      for key in want:
        np.testing.assert_array_equal(got[key], want[key])


def test_set_state_rejects_bad_states():
  """A state that does not come from get_state is a ValueError."""
  it = _iterator(_encoded())
  for bad in (
    {'epoch': 0},
    {'epoch': -1, 'batch': 0},
    {'epoch': 0, 'batch': 99},
    [0, 0],
    {'epoch': 0.0, 'batch': 1},
  ):
    with pytest.raises(ValueError, match='state'):
      it.set_state(bad)


def test_hosts_split_each_global_batch():
  """With 2 hosts each gets half the rows of the same global batch, at the same padded shape."""
  encoded = _random_encoded(n=30)
  full = list(_iterator(encoded, batch_size=8, shuffle=True, seed=1))
  hosts = [
    list(_iterator(encoded, batch_size=8, shuffle=True, seed=1, process_index=p, process_count=2))
    for p in range(2)
  ]
  assert len(full) == len(hosts[0]) == len(hosts[1]) == 4
  for k, batch in enumerate(full):
    assert hosts[0][k]['inputs'].shape[0] == 4
    for key in batch:
      np.testing.assert_array_equal(
        np.concatenate([hosts[0][k][key], hosts[1][k][key]]), batch[key]
      )
