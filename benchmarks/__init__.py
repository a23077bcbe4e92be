"""Attend's benchmarks: each times Attend against a peer in the same run (see README.md)."""


def turns(names, repeats: int):
  """The order of timed runs: `repeats` rounds in which every name takes a turn, round i starting
  from name i (mod the number of names), so that over any n rounds of n names each stands in each
  place once.

  Where a run stands in its round biases it: the train bench's medium size timed the row going
  first 2-3% slower, whichever model it was.
  """
  names = list(names)
  for i in range(repeats if names else 0):
    start = i % len(names)
    yield from names[start:] + names[:start]
