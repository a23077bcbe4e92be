"""benchmarks/variants_bench.py at toy sizes: every section runs and its figures add up."""

import argparse

from benchmarks import variants_bench


def test_window_and_linear_tables_at_toy_sizes(monkeypatch):
  args = argparse.Namespace(lengths=[64, 128], window=16, softmax_max_length=64, repeats=1, calls=1)
  window = variants_bench.window_table(args)
  assert [row['length'] for row in window] == [64, 128]
  assert all(row['speedup'] == row['full_s'] / row['window_s'] for row in window)
  linear = variants_bench.linear_table(args)
  assert linear[0]['softmax_s'] > 0 and linear[1]['softmax_s'] is None
  assert linear[0]['linear_vs_linear_growth'] == 1.0


def test_decode_rows_report_state_bytes(monkeypatch):
  monkeypatch.setattr(
    variants_bench,
    'GPT',
    dict(num_layers=1, d_model=16, num_heads=4, d_ff=16, positions='rope', dropout_rate=0.0),
  )
  monkeypatch.setattr(
    variants_bench,
    'DECODE_ROWS',
    {'MHA': {}, 'MQA': dict(num_kv_heads=1), 'window 2': dict(window=2)},
  )
  rows = variants_bench.decode_table(argparse.Namespace(batch=2, tokens=4, repeats=1, calls=1))
  state = {row['variant']: row['state_bytes'] for row in rows}
  # One layer, K and V of [B=2, heads, slots, H=4] float32: 4 slots (tokens) or 2 (window).
  assert state == {
    'MHA': 2 * 2 * 4 * 4 * 4 * 4,
    'MQA': 2 * 2 * 1 * 4 * 4 * 4,
    'window 2': 2 * 2 * 4 * 2 * 4 * 4,
  }
  assert all(row['tokens_per_s'] > 0 for row in rows)
