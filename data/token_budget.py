"""The longest text of a growing family that fits a token budget, found with few tokenizer calls.

`data.retrieval_tasks` fits each haystack with it: `build(n)` is the prompt with `n` units of
haystack, and `count_tokens` the caller's tokenizer, which may be slow.
"""

from typing import Callable


def _bracket(fits: Callable[[int], bool], lo: int, guess: int) -> tuple[int, int]:
  """(a, b) with fits(a), not fits(b), a < b, searched outward from `guess` by doubling steps.

  `fits(lo)` must hold. Starting near the answer, this brackets it in a few calls.
  """
  step = max(1, guess // 64)
  if fits(guess):
    while fits(guess + step):
      guess, step = guess + step, 2 * step
    return guess, guess + step
  hi = guess
  while hi - step > lo and not fits(hi - step):
    hi, step = hi - step, 2 * step
  return max(lo, hi - step), hi


def longest_within(
  count_tokens: Callable[[str], int], build: Callable[[int], str], budget: int
) -> str | None:
  """The longest `build(n)` (n haystack units) of at most `budget` tokens, or None if even
  `build(0)` is longer. An estimate of tokens per unit from two counts starts the search near
  the answer; bisection finishes it. Only counted texts are returned, so the bound holds for
  any tokenizer; the length is the longest when tokens grow with `n`."""
  counts = {}

  def fits(n: int) -> bool:
    if n not in counts:
      counts[n] = count_tokens(build(n))
    return counts[n] <= budget

  if not fits(0):
    return None
  probe = 16
  if fits(probe):
    per_unit = max(counts[probe] - counts[0], 1) / probe
    lo, hi = _bracket(fits, probe, probe + int((budget - counts[probe]) / per_unit))
  else:
    lo, hi = 0, probe
  while hi - lo > 1:
    mid = (lo + hi) // 2
    lo, hi = (mid, hi) if fits(mid) else (lo, mid)
  return build(lo)
