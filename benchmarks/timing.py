"""Timing Attend against a peer in one process, without cross-talk: every benchmark's one way.

A library's worker threads (torch's OpenMP team, XLA's pool) keep spinning for a while after its
call returns, so a call timed right after the other library's is slowed by them: the decoder
benchmark, timing one call per turn, measured a 4 ms forward at 8.4 ms (0.53x) where calls back
to back gave 3 ms (1.05-1.13x; docs/pretrained_decoders.md). `compare` therefore times every
side so:

1. `warmup` untimed calls each (compilation, caches, the allocator's first pages);
2. `turns` rounds in which every side takes one turn (`order`, a Williams design), so that
   over its rounds each side stands in each place, and follows each other side, equally often,
   and a slow spell of a shared machine hits every side;
3. a turn is `calls` calls back to back, each timed; the turn's figure is their median, so a
   first call slowed by the other side's threads does not set it;
4. a side's figure is the median of its turns' figures, reported with their spread
   (`Timing.spread`); a ratio of two sides is taken round by round, the two turns moments
   apart, and reported with its spread across rounds (`Timing.ratio`).

Several runs of a benchmark (separate processes) are summed up by `python -m benchmarks.timing`:

    python -m benchmarks.timing --field=ratio enc1.json enc2.json enc3.json
"""

import argparse
import dataclasses
import json
import statistics
import time
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple

import jax


def order(names: Iterable[str], rounds: int) -> Iterator[str]:
  """The order of turns: `rounds` rounds in which every name takes a turn, in the rounds of a
  Williams design, repeated.

  Where a turn stands in its round biases it: the train bench's medium size timed the row going
  first 2-3% slower, whichever model it was. So does the turn before it, when that library's
  worker threads still spin: with three sides, plain rotations put the first side right after the
  third twice as often as the second. The design's first round is 0, 1, n-1, 2, n-2, ... and
  round i adds i to each (mod n); for an odd n its n rounds are followed by the same reversed.
  Over its n rounds (2n for an odd n) each name stands in each place, and right after each other
  name within a round, equally often (Williams 1949).
  """
  names = list(names)
  n = len(names)
  first = [0] + [(j + 1) // 2 if j % 2 else n - j // 2 for j in range(1, n)]  # 0, 1, n-1, 2, ...
  design = [[(k + i) % n for k in first] for i in range(n)]
  design += [row[::-1] for row in design] if n % 2 else []
  for i in range(rounds if names else 0):
    yield from (names[k] for k in design[i % len(design)])


class Spread(NamedTuple):
  """The least, the median and the largest of a set of figures."""

  min: float
  median: float
  max: float

  @classmethod
  def of(cls, values: Iterable[float]) -> 'Spread':
    values = sorted(values)
    return cls(values[0], statistics.median(values), values[-1])

  def scaled(self, factor: float) -> 'Spread':
    """Every figure times `factor` (e.g. 1e3 for seconds to milliseconds)."""
    return Spread(*(value * factor for value in self))

  def text(self, spec: str = '.2f') -> str:
    """'median (min-max)', each formatted with `spec`."""
    return f'{self.median:{spec}} ({self.min:{spec}}-{self.max:{spec}})'


@dataclasses.dataclass(frozen=True)
class Timing:
  """What `compare` measured.

  Attributes:
    turns: per side, the seconds of one call in each round (the median of that turn's calls),
      in round order.
    warmup_s: per side, the seconds of its first warm-up call (compilation included); empty
      when there was no warm-up.
    results: per side, what its first warm-up call returned; empty when there was no warm-up.
  """

  turns: dict[str, list[float]]
  warmup_s: dict[str, float]
  results: dict[str, Any]

  def seconds(self, name: str) -> float:
    """The side's figure: the median over its turns of seconds per call."""
    return statistics.median(self.turns[name])

  def spread(self, name: str) -> Spread:
    """The spread of the side's per-turn seconds."""
    return Spread.of(self.turns[name])

  def ratio(self, numerator: str, denominator: str) -> Spread:
    """`numerator`'s seconds over `denominator`'s, round by round (> 1: `denominator` faster)."""
    pairs = zip(self.turns[numerator], self.turns[denominator])
    return Spread.of(top / bottom for top, bottom in pairs)


def compare(
  fns: Mapping[str, Callable[[], Any]],
  *,
  turns: int,
  calls: int = 1,
  warmup: int = 1,
  pause_s: float = 0.0,
  clock: Callable[[], float] = time.perf_counter,
) -> Timing:
  """Times each of `fns` in alternating turns of `calls` calls back to back (module docstring).

  Args:
    fns: per side, a call with no arguments; what it returns is waited for on the device
      (`jax.block_until_ready`; a torch function on a GPU must synchronise itself).
    turns: the rounds; every side takes one turn in each.
    calls: the calls of a turn, timed one by one; the turn's figure is their median.
    warmup: untimed calls of each side before the first round.
    pause_s: idle seconds before each turn (the attention benchmark's cores settle in 0.01 s).
    clock: the clock read around each call.

  Returns:
    The per-turn seconds of every side, its first warm-up call's seconds and result.
  """
  if min(turns, calls) < 1 or warmup < 0:
    raise ValueError(
      f'turns and calls must be >= 1 and warmup >= 0; got {turns}, {calls} and {warmup}.'
    )

  def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = clock()
    out = jax.block_until_ready(fn())
    return out, clock() - start

  warmup_s, results = {}, {}
  for name, fn in fns.items():
    for i in range(warmup):
      out, seconds = timed(fn)
      if i == 0:
        results[name], warmup_s[name] = out, seconds
  per_turn = {name: [] for name in fns}
  for name in order(fns, turns):
    if pause_s:
      time.sleep(pause_s)
    per_turn[name].append(statistics.median(timed(fns[name])[1] for _ in range(calls)))
  return Timing(per_turn, warmup_s, results)


def across_runs(rows: list[Any], field: str) -> Spread:
  """The spread of `field` over the rows of several runs of one benchmark; a field that is itself
  a spread (a ratio's, `{'min', 'median', 'max'}` over one run's rounds) counts its median."""
  return Spread.of(
    row[field]['median'] if isinstance(row[field], dict) else row[field] for row in rows
  )


def main(argv: list[str] | None = None) -> dict[str, Spread]:
  """Prints the spread of `--field` over the JSON files of several runs, row by row."""
  parser = argparse.ArgumentParser(description='The spread of a figure over several runs.')
  parser.add_argument('--field', required=True, help="a row's key, e.g. 'ratio'")
  parser.add_argument('files', nargs='+', help="the runs' --json files")
  args = parser.parse_args(argv)
  runs = []
  for path in args.files:
    with open(path, encoding='utf-8') as f:
      out = json.load(f)
    out = out.get('results', [out]) if isinstance(out, dict) else out  # one row, or a list
    runs.append(out)
  if len({len(rows) for rows in runs}) != 1:
    raise ValueError(f'{", ".join(args.files)}: the runs have different numbers of rows.')
  spreads = {}
  for i, rows in enumerate(zip(*runs)):
    if rows[0].get(args.field) is None:  # e.g. the matmul peak's row, or a row without a peer
      continue
    keys = ('checkpoint', 'model', 'size', 'search', 'case', 'length', 'mode')
    label = ' '.join(str(rows[0][key]) for key in keys if key in rows[0]) or str(i)
    spreads[label] = across_runs(rows, args.field)
    print(f'{label}: {args.field} {spreads[label].text(".3g")} over {len(rows)} runs')
  if not spreads:
    raise ValueError(f'--field={args.field!r} is not a key of any row of {args.files[0]}.')
  return spreads


if __name__ == '__main__':
  main()
