"""The memory-bandwidth bound of decoding: each new token reads every weight once, so a decoder
makes at most `batch × bandwidth ÷ weight bytes` tokens per second, however fast its arithmetic.

The bound holds where the weights are far larger than the caches (a 135 M-parameter float32
model: 538 MB, against 32 MiB of L3 on the benchmark's EPYC); a tiny model's weights stay in
cache, and its "fraction of the bound" may pass 1. It leaves out the K/V cache a step also
reads, so it is a bound, not a prediction: a step cannot beat it, and an ideal one reaches it.
"""

import numpy as np

from benchmarks import timing

COLUMNS = 4096  # the test matrix's row: 16 KiB, so the matrix is read in long runs of memory


def read_bandwidth(nbytes: int = 1 << 30, passes: int = 5) -> float:
  """The machine's memory read bandwidth in GB/s (1e9 bytes per second).

  Method: a float32 matrix of `nbytes` (1 GiB by default, far larger than any cache) times a
  vector with NumPy's BLAS (`matrix @ vector`: each element read once, 2 flops per 4 bytes read,
  on every core BLAS uses), `nbytes` divided by the fastest of `passes` products. The product is
  the read a decoding step does (a weight matrix times one activation row); it is also the
  fastest NumPy read measured on the benchmark's 2 EPYC cores: 17-18 GB/s, where a sum of the same
  array (one thread) read 11-12 GB/s and so would set a bound a decoder could beat.

  Args:
    nbytes: the size of the matrix read; rounded down to whole rows of `COLUMNS` floats.
    passes: products timed; the fastest counts, as the least disturbed by other work.
  """
  rows = max(1, nbytes // (4 * COLUMNS))
  matrix = np.ones((rows, COLUMNS), np.float32)  # written once, so every page is mapped
  vector = np.ones(COLUMNS, np.float32)
  product = lambda: matrix @ vector  # [rows, C] @ [C] -> [rows]
  times = timing.compare({'read': product}, turns=passes, warmup=0)
  return matrix.nbytes / times.spread('read').min / 1e9


def weight_bytes(model) -> int:
  """The bytes of a transformers model's weights that one decoding step reads: every parameter
  (a tied embedding once, as the output layer reads all of it) but the embedding tables a step
  only gathers a row of (untied token embeddings, learned positions)."""
  import torch  # pylint: disable=import-outside-toplevel

  output = model.get_output_embeddings()
  head = None if output is None else output.weight
  gathered = {
    id(module.weight)
    for module in model.modules()
    if isinstance(module, torch.nn.Embedding) and module.weight is not head
  }
  return sum(p.numel() * p.element_size() for p in model.parameters() if id(p) not in gathered)


def decode_bound(bandwidth_gbps: float, nbytes: int, batch: int) -> float:
  """The most tokens per second a decoder of `nbytes` of weights can make, `batch` rows at once:
  one step reads the weights once, whatever the batch, and makes one token per row."""
  return batch * bandwidth_gbps * 1e9 / nbytes
