"""Attention kernels side by side: Attend's implementations vs jax.nn, flax and torch, same run.

    python -m benchmarks.attention_bench                 # full table (about 15 min on 2 cores)
    python -m benchmarks.attention_bench --sizes=512 --memory_lengths=   # one size, no memory
    python -m benchmarks.attention_bench --dtype=bfloat16 --sizes=512,2048,8192,16384 \
        --batch=4 --long_batch=4 --memory_lengths=2048,8192,16384     # a GPU: B*N fixed

Speed: `--dtype` inputs, N=8, H=64, B=`--batch` (`--long_batch` from S=8192 on), forward and
forward+backward, each call waited for on the device; after a warm-up call each, the cases of a row
take `--repeats` turns, alternating, so that a slow spell of a shared machine hits them alike, a
turn the median of `--calls` calls back to back (`benchmarks.timing.compare`); the figure is the
median of the turns, "x torch time" the median of the per-round ratios (min-max beside it).
GFLOP/s counts the two matmuls (backward: twice that again); "x peak" divides it by this device's
matmul rate in the same dtype, measured in the same run on a square matmul. On Linux
the process runs under mimalloc (`training/allocator.py`; `ATTEND_ALLOCATOR=system` keeps the
system allocator; the header says which ran): under glibc the buffers of kernels that form
`[T, S]` scores fault in afresh at every call, which made 'attend reference' about 2x slower at
S=512. Memory: B=1, N=8, each case in a fresh process; the figure is the peak memory the case adds
on top of its inputs: on a GPU the device allocator's peak bytes in use minus the bytes in use
before the call, on a CPU the resident memory (VmHWM after resetting it, minus VmRSS).
Cases a backend cannot run are left out (cuDNN needs an NVIDIA GPU and 16-bit inputs); peers run
only when installed (torch comes with the `bench` extra, and runs on CUDA when it sees a GPU).
"""

from training import allocator

if __name__ == '__main__':
  allocator.use_mimalloc()  # first: the allocator is chosen at process start, before JAX loads

import argparse
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

import attention
from benchmarks import resident_memory, timing

HEADS, HEAD_DIM = 8, 64
LONG = 8192  # from this length on, B=--long_batch (the memory runs use B=1)
DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16}
# Idle time before each timed call: the worker threads of the call before (torch's OpenMP team,
# XLA's pool) spin-wait for a while after their work and take cores from this call. Without it,
# on 2 cores, 'attend default' (timed right after torch) took 1.4x the time of the same kernel as
# 'attend chunked'; 0.1 s made every case 1.4-1.5x slower (the cores go idle), 0.01 s none.
PAUSE_S = 0.01


def _to_btnh(x):
  return jnp.swapaxes(x, 1, 2)  # [B, N, T, H] <-> [B, T, N, H]


def _attend(implementation):
  return lambda q, k, v: attention.scaled_dot_product_attention(
    q, k, v, implementation=implementation
  )


def _jax_nn(implementation=None):
  return lambda q, k, v: _to_btnh(
    jax.nn.dot_product_attention(
      _to_btnh(q), _to_btnh(k), _to_btnh(v), implementation=implementation
    )
  )


def _flax(q, k, v):
  import flax.linen as nn  # imported here: only this peer needs it

  return _to_btnh(nn.dot_product_attention(_to_btnh(q), _to_btnh(k), _to_btnh(v)))


JAX_CASES = {
  'attend default': _attend(None),
  'attend reference': _attend('reference'),
  'attend chunked': _attend('chunked'),
  'jax.nn.dot_product_attention': _jax_nn(),
  'jax.nn xla': _jax_nn('xla'),
  'jax.nn cudnn': _jax_nn('cudnn'),
  'flax.linen.dot_product_attention': _flax,
}
NEEDS_CUDNN = ('jax.nn cudnn',)
TORCH_CASE = 'torch scaled_dot_product_attention'


def _torch_available() -> bool:
  try:
    import torch  # noqa: F401

    return True
  except ImportError:
    return False


def available_cases(dtype: str) -> list[str]:
  """The cases this backend can run in `dtype`."""
  cudnn = jax.default_backend() == 'gpu' and dtype != 'float32'
  cases = [c for c in JAX_CASES if cudnn or c not in NEEDS_CUDNN]
  return cases + ([TORCH_CASE] if _torch_available() else [])


def _inputs(batch, length, seed=0):
  rng = np.random.default_rng(seed)
  return [rng.standard_normal((batch, HEADS, length, HEAD_DIM), dtype=np.float32) for _ in range(4)]


def _jax_runner(name, batch, length, backward, dtype):
  """Returns a zero-argument function running one case to completion."""
  q, k, v, cotangent = (jnp.asarray(x, DTYPES[dtype]) for x in _inputs(batch, length))
  fn = JAX_CASES[name]
  if backward:  # the cotangent is an argument: a closed-over array would be a compile-time constant
    step = jax.jit(jax.grad(lambda q, k, v, dy: jnp.sum(fn(q, k, v) * dy), (0, 1, 2)))
    args = (q, k, v, cotangent)
  else:
    step, args = jax.jit(fn), (q, k, v)
  step = step.lower(*args).compile()
  return lambda: jax.block_until_ready(step(*args))


def _torch_runner(batch, length, backward, dtype):
  import torch

  device = 'cuda' if torch.cuda.is_available() else 'cpu'
  sync = torch.cuda.synchronize if device == 'cuda' else lambda: None
  q, k, v, cotangent = (
    torch.from_numpy(x).to(device, getattr(torch, dtype)) for x in _inputs(batch, length)
  )
  if not backward:

    def run():
      with torch.no_grad():
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
      sync()

    return run
  q, k, v = (x.requires_grad_() for x in (q, k, v))

  def run_backward():
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    out.backward(cotangent)
    for x in (q, k, v):
      x.grad = None
    sync()

  return run_backward


def _runner(name, batch, length, backward, dtype):
  if name == TORCH_CASE:
    return _torch_runner(batch, length, backward, dtype)
  return _jax_runner(name, batch, length, backward, dtype)


def time_cases(names, batch, length, backward, repeats, dtype, calls=1):
  """`(timing, failures)`: each case's warm-up call, then `benchmarks.timing.compare`'s alternating
  turns of `calls` calls, `repeats` rounds, `PAUSE_S` before each; a case that fails in its
  warm-up (e.g. out of device memory) is left out of the rounds, `failures` says why."""
  runs, failed = {}, {}
  for name in names:
    try:
      runs[name] = _runner(name, batch, length, backward, dtype)
      jax.block_until_ready(runs[name]())  # the warm-up, and the probe of whether the case runs
    except Exception as e:  # the row says so, the table goes on
      runs.pop(name, None)
      failed[name] = f'failed: {str(e).strip().splitlines()[0][:80]}'
  times = timing.compare(runs, turns=repeats, calls=calls, warmup=0, pause_s=PAUSE_S)
  return times, failed


def _device_peak_added(run, name):
  """Peak device bytes `run` adds over what is in use before it (a fresh process: peak so far is
  the inputs and the compiled program)."""
  if name == TORCH_CASE:
    import torch

    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    run()
    return torch.cuda.max_memory_allocated() - before
  device = jax.devices()[0]
  before = device.memory_stats()['bytes_in_use']
  run()
  return device.memory_stats()['peak_bytes_in_use'] - before


def peak_memory_child(name, batch, length, backward, dtype):
  """Runs in a fresh process: the peak bytes one call adds on top of its inputs."""
  run = _runner(name, batch, length, backward, dtype)  # inputs allocated, program compiled
  if jax.default_backend() == 'gpu':
    return _device_peak_added(run, name)
  baseline = resident_memory.status_kib('VmRSS')
  if not resident_memory.reset_peak():  # VmHWM to the current RSS
    raise OSError('The peak resident memory cannot be reset here (/proc/self/clear_refs).')
  run()
  return (resident_memory.status_kib('VmHWM') - baseline) * 1024


def peak_memory(name, batch, length, backward, dtype):
  """Spawns `peak_memory_child` so that each figure starts from a clean process."""
  cmd = [
    sys.executable,
    '-m',
    'benchmarks.attention_bench',
    '--memory-child',
    json.dumps([name, batch, length, backward, dtype]),
  ]
  # A GPU process must not take most of the device up front, or the peak says nothing.
  env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE='false')
  done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
  if done.returncode != 0:
    last_line = done.stderr.strip().splitlines()[-1:] or [f'exit code {done.returncode}']
    return f'failed: {last_line[0]}'
  return int(done.stdout.strip().splitlines()[-1])


def matmul_peak_gflops(dtype, n=None, repeats=5):
  """This device's matmul rate in `dtype`: the fastest of `repeats` jitted [n, n] @ [n, n]
  products after a warm-up."""
  n = n or (8192 if jax.default_backend() == 'gpu' else 2048)  # large enough to fill the device
  rng = np.random.default_rng(0)
  a, b = (jnp.asarray(x, DTYPES[dtype]) for x in rng.standard_normal((2, n, n), np.float32))
  matmul = jax.jit(jnp.matmul).lower(a, b).compile()
  times = timing.compare({'matmul': lambda: matmul(a, b)}, turns=repeats)
  return 2 * n**3 / times.spread('matmul').min / 1e9


def gflops(batch, length, backward):
  """Model GFLOPs: forward is 2 matmuls of 2·B·N·T·S·H; backward adds twice that (recompute not
  counted)."""
  forward = 4 * batch * HEADS * length * length * HEAD_DIM
  return forward * (3.0 if backward else 1.0) / 1e9


def parse_args() -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--sizes', default=f'512,2048,{LONG}', help='comma-separated lengths')
  parser.add_argument('--batch', type=int, default=8, help=f'batch below S={LONG}')
  parser.add_argument('--long_batch', type=int, default=1, help=f'batch from S={LONG} on')
  parser.add_argument('--dtype', default='float32', choices=list(DTYPES))
  parser.add_argument('--repeats', type=int, default=3, help='turns of each case')
  parser.add_argument('--calls', type=int, default=3, help='calls back to back per turn')
  parser.add_argument(
    '--memory_lengths',
    default=str(LONG),
    help="comma-separated lengths of the memory runs ('' skips them)",
  )
  parser.add_argument('--cases', default='', help='comma-separated case names (default: all)')
  parser.add_argument('--json', default='', help='also write the results to this JSON file')
  parser.add_argument('--memory-child', default='', help=argparse.SUPPRESS)
  return parser.parse_args()


def timed_rows(cases: list[str], args: argparse.Namespace, peak: float) -> list[dict]:
  """Every case timed at each of `--sizes`, forward, then with backward: the table printed."""
  print(
    '| case | B | S | pass | ms | GFLOP/s | x peak | x torch time |\n'
    '|---|---|---|---|---|---|---|---|',
    flush=True,
  )
  results = []
  for length in (int(s) for s in args.sizes.split(',') if s):
    batch = args.long_batch if length >= LONG else args.batch
    for backward in (False, True):
      times, failed = time_cases(
        cases, batch, length, backward, args.repeats, args.dtype, args.calls
      )
      mode = 'fwd+bwd' if backward else 'fwd'
      for c in cases:
        if c in failed:
          print(f'| {c} | {batch} | {length} | {mode} | {failed[c]} | | | |', flush=True)
          results.append(dict(case=c, batch=batch, length=length, mode=mode, error=failed[c]))
          continue
        seconds = times.seconds(c)
        # Time over torch's, round by round: the two calls of a round are moments apart.
        vs_torch = times.ratio(c, TORCH_CASE) if TORCH_CASE in times.turns else None
        rate = gflops(batch, length, backward) / seconds
        print(
          f'| {c} | {batch} | {length} | {mode} | {seconds * 1e3:.1f} | {rate:.1f} | '
          f'{rate / peak:.2f} | {"-" if vs_torch is None else vs_torch.text()} |',
          flush=True,
        )
        results.append(
          dict(
            case=c,
            batch=batch,
            length=length,
            mode=mode,
            seconds=seconds,
            seconds_spread=times.spread(c)._asdict(),
            gflops=rate,
            x_torch_time=None if vs_torch is None else vs_torch._asdict(),
          )
        )
  return results


def memory_rows(cases: list[str], memory_lengths: list[int], dtype: str) -> list[dict]:
  """The peak memory one call of each case adds, B=1, a fresh process each: the table printed."""
  print(
    f'\n# peak memory added by one call, B=1 (MB)\n'
    f'| case | pass | {" | ".join(f"S={n}" for n in memory_lengths)} |\n'
    f'|---|---|{"---|" * len(memory_lengths)}',
    flush=True,
  )
  results = []
  for c in cases:
    for backward in (False, True):
      mode = 'fwd+bwd' if backward else 'fwd'
      shown = []
      for length in memory_lengths:
        peak = peak_memory(c, 1, length, backward, dtype)
        shown.append(f'{peak / 2**20:.0f}' if isinstance(peak, int) else peak)
        results.append(dict(case=c, length=length, mode=mode, peak_bytes=peak))
      print(f'| {c} | {mode} | {" | ".join(shown)} |', flush=True)
  return results


def main():
  args = parse_args()
  if args.memory_child:
    print(peak_memory_child(*json.loads(args.memory_child)))
    return
  cases = available_cases(args.dtype)
  if args.cases:
    cases = [c for c in cases if c in args.cases.split(',')]
  peak = matmul_peak_gflops(args.dtype)
  device = jax.devices()[0].device_kind
  print(
    f'# attention, {args.dtype}, N={HEADS}, H={HEAD_DIM}, backend={jax.default_backend()} '
    f'({device}), {os.cpu_count()} CPUs, jax {jax.__version__}, allocator '
    f'{"mimalloc" if allocator.active() else "system"}; {args.dtype} matmul peak '
    f'{peak:.0f} GFLOP/s',
    flush=True,
  )
  results = [dict(case=f'{args.dtype} matmul peak', gflops=peak, device=device)]
  results += timed_rows(cases, args, peak)
  memory_lengths = [int(s) for s in args.memory_lengths.split(',') if s]
  if memory_lengths:
    results += memory_rows(cases, memory_lengths, args.dtype)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(results, f, indent=1)


if __name__ == '__main__':
  main()
