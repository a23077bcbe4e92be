"""Attend's benchmarks: each times Attend against a peer in the same run (see README.md)."""


def turns(names, repeats: int):
  """The order of timed runs: `repeats` rounds in which every name takes a turn, every other round
  in reverse.

  Where a run stands in its round biases it: the train bench's medium size timed the row going
  first 2-3% slower, whichever model it was. Reversing every other round puts each of two rows
  first equally often when `repeats` is even (one more time for the first row when it is odd).
  """
  names = list(names)
  for i in range(repeats):
    yield from (names if i % 2 == 0 else names[::-1])
