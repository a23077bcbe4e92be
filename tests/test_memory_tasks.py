"""Question answering and the copy task: layouts and counts by hand; tiny runs train, evaluate and
write the hop table and the copy figure."""

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_training import get_config

from data import algorithmic
import models
from reports.run_eval import Request, evaluate
import tasks
from tasks.algorithmic import bit_counts
from tasks.losses import cross_entropy
from tasks.question_answering import hop_table
import training
from training.setup import build_state
from training.steps import merge_model, train_step


def test_copy_layout_by_hand():
  bits = np.array([[[1, 0], [0, 1]], [[1, 1], [0, 0]]], np.uint8)  # lengths 2 and 1
  out = algorithmic.layout(bits, np.array([2, 1]))
  # Row 0: bits at steps 0-1, the delimiter at step 2, the copy at steps 3-4.
  np.testing.assert_array_equal(
    out['inputs'][0], [[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]]
  )
  np.testing.assert_array_equal(out['targets'][0, 3:], [[1, 0], [0, 1]])
  np.testing.assert_array_equal(out['weights'], [[0, 0, 0, 1, 1], [0, 0, 1, 0, 0]])
  # Row 1 (length 1): the delimiter at step 1, its copy at step 2, blank after.
  np.testing.assert_array_equal(out['inputs'][1, :2], [[1, 1, 0], [0, 0, 1]])
  np.testing.assert_array_equal(out['targets'][1], [[0, 0], [0, 0], [1, 1], [0, 0], [0, 0]])


def test_copy_splits_lengths_and_bad_fields():
  copying = algorithmic.build(dict(max_length=5, train_size=100, eval_size=10))
  assert set(copying.sequences('validation').lengths) <= set(range(1, 6))
  np.testing.assert_array_equal(copying.sequences('test').lengths, 10)  # 2 x max_length
  with pytest.raises(ValueError, match=r'config.dataset.min_length=9 exceeds'):
    algorithmic.build(dict(min_length=9, max_length=5))


def test_bit_counts_by_hand():
  batch = dict(
    targets=jnp.array([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [0.0, 0.0]]]),
    weights=jnp.array([[1.0, 1.0], [1.0, 0.0]]),
  )
  logits = jnp.array(
    [
      [[3.0, -2.0], [1.0, 1.0]],  # one wrong bit (step 1, bit 0)
      [[2.0, 2.0], [5.0, 5.0]],
    ]
  )  # right; its step 1 is not scored
  counts = bit_counts(logits, batch)
  assert int(counts['bits']) == 6 and int(counts['bit_errors']) == 1
  assert int(counts['sequences']) == 2 and int(counts['exact']) == 1


def test_hop_table_text():
  table = hop_table(['Greg is a frog.', 'Lily is gray.'], np.array([[0.9, 0.1], [0.2, 0.8]]), [0])
  assert table.splitlines() == [
    'story            support  hop 1  hop 2',
    'Greg is a frog.  yes       0.90   0.20',
    'Lily is gray.              0.10   0.80',
  ]


def _tiny(name, arg, data_dir, model, **dataset):
  config = get_config(name, arg)
  config.model = models.default_config(config.model.name, **model)
  config.dataset.update(batch_size=8, eval_batch_size=16, **dataset)
  if 'data_dir' in config.dataset:
    config.dataset.data_dir = str(data_dir)
  config.update(
    num_train_steps=3,
    log_every_steps=50,
    checkpoint_every_steps=100,
    eval_every_steps=0,
    num_eval_decode=0,
    warmup_steps=1,
  )
  return config


def test_memn2n_on_babi_trains_evaluates_and_writes_the_hop_table(tmp_path, tfds_dir):
  config = _tiny(
    'memn2n_babi', 'qa16', tfds_dir, dict(embed_dim=8, hops=3), builder_config='qa16_1k'
  )
  workdir = str(tmp_path / 'run')
  training.train_and_evaluate(config, workdir)
  metrics = evaluate(Request(workdir, max_examples=16, num_heatmaps=1))
  assert metrics['examples'] == 16 and 0 <= metrics['accuracy'] <= 1
  assert all(0 <= metrics[f'support_hit_rate/hop{k}'] <= 1 for k in (1, 2, 3))
  out = os.path.join(workdir, 'eval')
  table = open(os.path.join(out, 'hops_0000.txt'), encoding='utf-8').read().splitlines()
  assert table[0].endswith('hop 1  hop 2  hop 3') and 'Answer:' in table[-1]
  with open(os.path.join(out, 'hops_0000.png'), 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'


def test_ntm_copy_trains_evaluates_and_draws(tmp_path):
  # The LSTM baseline takes the same path (tests/test_tasks.py trains it for a step).
  config = _tiny(
    'ntm_copy',
    'ntm',
    tmp_path,
    dict(memory_slots=8, memory_width=4, controller_size=8),
    max_length=3,
    train_size=64,
    eval_size=16,
  )
  workdir = str(tmp_path / 'run')
  training.train_and_evaluate(config, workdir)
  metrics = evaluate(Request(workdir, num_heatmaps=1))
  assert metrics['examples'] == 16 and 0 <= metrics['bit_error_rate'] <= 1
  assert metrics['predicted_bit_error_rate'] == pytest.approx(metrics['bit_error_rate'])
  lines = open(os.path.join(workdir, 'eval', 'samples.txt'), encoding='utf-8').read().splitlines()
  assert len(lines) == 17 and lines[1].startswith('6 | ')  # test length 2 x 3
  with open(os.path.join(workdir, 'eval', 'copy_0000.png'), 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'


def test_memn2n_linear_start_follows_the_train_step(tmp_path, tfds_dir):
  config = _tiny(
    'memn2n_babi',
    'qa1',
    tfds_dir,
    dict(embed_dim=8, linear_start_steps=1),
    builder_config='qa1_1k',
  )
  task = tasks.build(config, str(tmp_path / 'run'))
  batch = next(task.batches('train', batch_size=8, shuffle=True, seed=0))
  state = build_state(config, task)
  step = jax.jit(functools.partial(train_step, loss_fn=task.loss))
  model = merge_model(state)
  losses = []
  for linear in (True, False):  # step 0 trains linearly, step 1 with the softmax
    logits = model.answer(batch['story'], batch['query'], linear=linear)
    expected = float(cross_entropy(logits, batch['answer']).mean())
    assert float(step(state, batch, jax.random.key(0))[1]['loss']) == pytest.approx(
      expected, rel=1e-5
    )
    state = state.replace(step=state.step + 1)
    losses.append(expected)
  assert abs(losses[0] - losses[1]) > 1e-4  # the two forward passes differ measurably
