"""benchmarks/press_bench.py's kvpress side without kvpress (it runs in .venv-kvpress, minutes of
work, outside the suite): the job file the peer reads, one side's summary and the ratios of the
two sides on hand-made figures, and the peer script's promise to import nothing of Attend's."""

import argparse
import ast
import os
import sys

import pytest

from benchmarks import press_bench

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_peer_job_holds_attends_ids_and_order_of_turns():
  args = argparse.Namespace(peer_folder='~/copy', ratio=0.75, decode='snapkv', tokens=8, turns=3)
  job = press_bench.peer_job([5, 6, 7, 9], args, ['knorm', 'snapkv'], 'model.gguf')
  assert job['context_ids'] == [5, 6, 7] and job['token'] == 9  # the context, then decoding's
  assert job['folder'] == os.path.expanduser('~/copy') and job['gguf'] == 'model.gguf'
  assert (job['presses'], job['ratio'], job['decode'], job['tokens']) == (
    ['knorm', 'snapkv'],
    0.75,
    'snapkv',
    8,
  )
  # Williams rounds for three sides: 0 1 2, 1 2 0, 2 0 1, as compare takes them.
  rounds = ['prefill', 'knorm', 'snapkv', 'knorm', 'snapkv', 'prefill', 'snapkv', 'prefill']
  assert job['prefill_order'] == rounds + ['knorm']
  assert job['decode_order'] == ['full', 'pressed', 'pressed', 'full', 'full', 'pressed']


def _side(prefill, press, full_bytes, pressed_bytes, full_rate, pressed_rate):
  turns = {'prefill': prefill, 'snapkv': press}
  cache_bytes = {'prefill': full_bytes, 'snapkv': pressed_bytes}
  rates = {'full': full_rate, 'pressed': pressed_rate}
  return press_bench.summary(turns, cache_bytes, rates, 'snapkv')


def test_summary_takes_medians_and_round_by_round_ratios():
  side = _side([2.0, 4.0, 3.0], [2.2, 4.0, 3.3], 100, 25, [8.0, 9.0, 10.0], [14.0, 15.0, 13.0])
  assert side['prefill_s'] == dict(min=2.0, median=3.0, max=4.0)
  press = side['presses']['snapkv']
  assert press['over_prefill'] == pytest.approx(dict(min=1.0, median=1.1, max=1.1))
  assert press['cache_bytes'] == 25 and side['full_cache_bytes'] == 100
  assert side['decode']['pressed'] == dict(
    tokens_per_s=dict(min=13.0, median=14.0, max=15.0), press='snapkv'
  )


def test_attend_over_kvpress_divides_medians_and_gives_each_sides_savings():
  attend = _side([3.0], [3.3], 100, 25, [8.0], [16.0])
  peer = _side([2.0], [2.5], 80, 40, [10.0], [12.0])
  ratios = press_bench.attend_over_kvpress(attend, peer)
  assert ratios['prefill_s'] == 1.5 and ratios['press_s'] == {'snapkv': pytest.approx(3.3 / 2.5)}
  assert ratios['decode_tokens_per_s'] == {'full': 0.8, 'pressed': 16.0 / 12.0}
  assert ratios['attend'] == dict(cache_fraction=0.25, decode_speedup=2.0, press='snapkv')
  assert ratios['kvpress'] == dict(cache_fraction=0.5, decode_speedup=1.2, press='snapkv')


def test_the_kvpress_cost_side_imports_neither_jax_nor_attend():
  with open(os.path.join(ROOT, 'benchmarks', 'kvpress_cost.py'), encoding='utf-8') as f:
    tree = ast.parse(f.read())
  names = {
    alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
  }
  names |= {
    f'{node.module}.{alias.name}'
    for node in ast.walk(tree)
    if isinstance(node, ast.ImportFrom)
    for alias in node.names
  }
  outside = {name for name in names if name.split('.')[0] not in sys.stdlib_module_names}
  assert outside == {'torch', 'transformers', 'benchmarks.kvpress_peer'}  # kvpress through it
