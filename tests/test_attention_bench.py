"""benchmarks/attention_bench.py: the cases of a row take turns; a failing case is reported."""

from benchmarks import attention_bench


def test_cases_take_turns_and_a_failure_fills_its_cell(monkeypatch):
  """Warm-up calls first, then one call per case per round, the rounds in `timing.order`'s
  Williams design; a case that raises gets its error."""
  calls = []

  def runner(name, *unused):
    if name == 'broken':
      raise RuntimeError('out of memory\ndetails')
    return lambda: calls.append(name)

  monkeypatch.setattr(attention_bench, '_runner', runner)
  monkeypatch.setattr(attention_bench, 'PAUSE_S', 0.0)
  times, failed = attention_bench.time_cases(['a', 'broken', 'c', 'b'], 1, 8, False, 4, 'float32')
  assert failed == {'broken': 'failed: out of memory'}
  assert sorted(times.turns) == ['a', 'b', 'c'] and len(times.turns['a']) == 4
  assert calls == ['a', 'c', 'b'] + ['a', 'c', 'b', 'c', 'b', 'a', 'b', 'a', 'c', 'b', 'c', 'a']
