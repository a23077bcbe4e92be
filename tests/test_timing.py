"""benchmarks/timing.py with a fake clock: warm-up calls, alternating turns of several calls, the
median of a turn and of the turns, the spread of a ratio taken round by round."""

import json

import pytest

from benchmarks import timing


class FakeClock:
  """A clock that each side's call advances by the next of its scripted durations."""

  def __init__(self, durations: dict[str, list[float]]):
    self.now, self.durations, self.calls = 0.0, durations, []

  def __call__(self) -> float:
    return self.now

  def side(self, name: str):
    def call():
      self.calls.append(name)
      self.now += self.durations[name].pop(0)
      return name.upper()

    return call


def test_turns_follow_a_williams_design():
  assert ''.join(timing.order('ab', 3)) == 'abbaab'
  assert ''.join(timing.order('abc', 7)) == 'abcbcacabcbaacbbacabc'
  assert ''.join(timing.order('abcd', 4)) == 'abdcbcadcdbadacb'
  assert list(timing.order([], 3)) == []
  # Over the design's rounds each name stands in each place, and follows each other name within
  # a round, equally often.
  for names, rounds in (('abc', 6), ('abcd', 4), ('abcde', 10)):
    n = len(names)
    sequence = ''.join(timing.order(names, rounds))
    turns = [sequence[i : i + n] for i in range(0, len(sequence), n)]
    assert all(
      sorted(r[place] for r in turns) == sorted(names * (rounds // n)) for place in range(n)
    )
    pairs = [r[i : i + 2] for r in turns for i in range(n - 1)]
    assert all(pairs.count(a + b) == rounds // n for a in names for b in names if a != b)


def test_warmup_then_alternating_turns_of_several_calls_with_their_medians():
  # Warm-up: one call each (compilation: 9 and 7 s). Then 3 rounds of 3 calls per turn; the
  # first call of each turn is slowed (as by the other side's threads), the median ignores it.
  clock = FakeClock(
    {
      'attend': [9.0] + [5.0, 1.0, 2.0] + [4.0, 1.5, 1.0] + [6.0, 3.0, 2.0],
      'peer': [7.0] + [9.0, 2.0, 3.0] + [8.0, 3.0, 4.0] + [5.0, 4.0, 3.0],
    }
  )
  times = timing.compare(
    {'attend': clock.side('attend'), 'peer': clock.side('peer')},
    turns=3,
    calls=3,
    clock=clock,
  )
  a, p = ['attend'] * 3, ['peer'] * 3
  assert clock.calls == ['attend', 'peer'] + a + p + p + a + a + p
  assert times.warmup_s == {'attend': 9.0, 'peer': 7.0}
  assert times.results == {'attend': 'ATTEND', 'peer': 'PEER'}
  assert times.turns == {'attend': [2.0, 1.5, 3.0], 'peer': [3.0, 4.0, 4.0]}
  assert times.seconds('attend') == 2.0 and times.seconds('peer') == 4.0
  assert times.spread('attend') == (1.5, 2.0, 3.0)
  # Round by round: 3 / 2, 4 / 1.5, 4 / 3.
  assert times.ratio('peer', 'attend') == pytest.approx((4 / 3, 1.5, 8 / 3))
  assert timing.Spread(1.0, 1.25, 2.5).scaled(2.0) == (2.0, 2.5, 5.0)
  assert timing.Spread(0.5, 1.0626, 1.1).text() == '1.06 (0.50-1.10)'


def test_without_warmup_nothing_is_called_untimed():
  clock = FakeClock({'one': [3.0, 1.0]})
  times = timing.compare({'one': clock.side('one')}, turns=2, warmup=0, clock=clock)
  assert clock.calls == ['one', 'one'] and times.turns == {'one': [3.0, 1.0]}
  assert times.warmup_s == {} and times.results == {}
  assert times.spread('one').min == 1.0


def test_bad_counts_are_refused():
  with pytest.raises(ValueError, match='turns and calls must be >= 1 and warmup >= 0'):
    timing.compare({'one': lambda: None}, turns=0)


def test_spread_over_the_json_files_of_several_runs(tmp_path, capsys):
  paths = []
  for i, ratio in enumerate((1.1, 0.9, 1.3)):
    path = tmp_path / f'run{i}.json'
    rows = [
      dict(case='float32 matmul peak', gflops=100.0),  # a row without the field is skipped
      dict(model='tiny', forward_ratio=ratio),
      dict(model='tiny', search='beam', forward_ratio=None),  # nor is one without a figure
      dict(case='kernel', length=512, mode='fwd', forward_ratio=dict(min=0, median=ratio, max=9)),
    ]
    path.write_text(json.dumps(rows))
    paths.append(str(path))
  spreads = timing.main(['--field=forward_ratio', *paths])
  assert spreads == {'tiny': (0.9, 1.1, 1.3), 'kernel 512 fwd': (0.9, 1.1, 1.3)}
  assert capsys.readouterr().out == (
    'tiny: forward_ratio 1.1 (0.9-1.3) over 3 runs\n'
    'kernel 512 fwd: forward_ratio 1.1 (0.9-1.3) over 3 runs\n'
  )
  with pytest.raises(ValueError, match="--field='ratio' is not a key of any row"):
    timing.main(['--field=ratio', *paths])
