"""Attention kernels side by side: Attend's implementations vs jax.nn, flax and torch, same run.

    python -m benchmarks.attention_bench                 # full table (about 15 min on 2 cores)
    python -m benchmarks.attention_bench --sizes=512 --memory_length=0   # one size, no memory

Speed: fp32, N=8, H=64, B=8 (B=1 from S=8192 on), forward and forward+backward, median wall time
of `--repeats` runs after a warm-up. GFLOP/s counts the two matmuls (backward: twice that again);
"x peak" divides it by this machine's fp32 matmul rate, measured in the same run on a square
matmul. Memory: B=1, N=8, S=8192, each case in a fresh process; the figure is the peak resident
memory the case adds on top of its inputs (VmHWM after resetting it, minus VmRSS).
Peers run only when installed (torch comes with the `bench` extra).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import attention

HEADS, HEAD_DIM = 8, 64
LONG = 8192  # from this length on, B=1 (as the memory runs)


def _to_btnh(x):
  return jnp.swapaxes(x, 1, 2)                                        # [B, N, T, H] <-> [B, T, N, H]


def _attend(implementation):
  return lambda q, k, v: attention.scaled_dot_product_attention(q, k, v, implementation=implementation)


def _jax_nn(q, k, v):
  return _to_btnh(jax.nn.dot_product_attention(_to_btnh(q), _to_btnh(k), _to_btnh(v)))


def _flax(q, k, v):
  import flax.linen as nn  # imported here: only this peer needs it
  return _to_btnh(nn.dot_product_attention(_to_btnh(q), _to_btnh(k), _to_btnh(v)))


JAX_CASES = {
    "attend default": _attend(None),
    "attend reference": _attend("reference"),
    "attend chunked": _attend("chunked"),
    "jax.nn.dot_product_attention": _jax_nn,
    "flax.linen.dot_product_attention": _flax,
}
TORCH_CASE = "torch scaled_dot_product_attention"


def _torch_available() -> bool:
  try:
    import torch  # noqa: F401
    return True
  except ImportError:
    return False


def _inputs(batch, length, seed=0):
  rng = np.random.default_rng(seed)
  return [rng.standard_normal((batch, HEADS, length, HEAD_DIM), dtype=np.float32) for _ in range(4)]


def _jax_runner(name, batch, length, backward):
  """Returns a zero-argument function running one case to completion."""
  q, k, v, cotangent = map(jnp.asarray, _inputs(batch, length))
  fn = JAX_CASES[name]
  if backward:
    step = jax.jit(jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v) * cotangent), (0, 1, 2)))
  else:
    step = jax.jit(fn)
  step = step.lower(q, k, v).compile()
  return lambda: jax.block_until_ready(step(q, k, v))


def _torch_runner(batch, length, backward):
  import torch
  q, k, v, cotangent = (torch.from_numpy(x) for x in _inputs(batch, length))
  if not backward:
    def run():
      with torch.no_grad():
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    return run
  q, k, v = (x.requires_grad_() for x in (q, k, v))

  def run_backward():
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    out.backward(cotangent)
    for x in (q, k, v):
      x.grad = None
  return run_backward


def _runner(name, batch, length, backward):
  if name == TORCH_CASE:
    return _torch_runner(batch, length, backward)
  return _jax_runner(name, batch, length, backward)


def time_case(name, batch, length, backward, repeats):
  """Median seconds of one call, after one warm-up call."""
  run = _runner(name, batch, length, backward)
  run()
  return statistics.median(_timed(run) for _ in range(repeats))


def _status_kib(field):
  with open("/proc/self/status") as f:
    return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def peak_memory_child(name, batch, length, backward):
  """Runs in a fresh process: the peak resident bytes one call adds on top of its inputs."""
  run = _runner(name, batch, length, backward)  # inputs allocated, program compiled
  baseline = _status_kib("VmRSS")
  with open("/proc/self/clear_refs", "w") as f:
    f.write("5")                                  # resets VmHWM to the current RSS
  run()
  return (_status_kib("VmHWM") - baseline) * 1024


def peak_memory(name, batch, length, backward):
  """Spawns `peak_memory_child` so that each figure starts from a clean process."""
  cmd = [sys.executable, "-m", "benchmarks.attention_bench", "--memory-child",
         json.dumps([name, batch, length, backward])]
  done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
  if done.returncode != 0:
    last_line = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
    return f"failed: {last_line[0]}"
  return int(done.stdout.strip().splitlines()[-1])


def matmul_peak_gflops(n=2048, repeats=5):
  """This machine's fp32 matmul rate: the best of `repeats` jitted [n, n] @ [n, n] products."""
  a, b = (jnp.asarray(x) for x in np.random.default_rng(0).standard_normal((2, n, n), np.float32))
  matmul = jax.jit(jnp.matmul).lower(a, b).compile()
  jax.block_until_ready(matmul(a, b))
  best = min(_timed(lambda: jax.block_until_ready(matmul(a, b))) for _ in range(repeats))
  return 2 * n ** 3 / best / 1e9


def _timed(fn):
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def gflops(batch, length, backward):
  """Model GFLOPs: forward is 2 matmuls of 2·B·N·T·S·H; backward adds twice that (recompute not counted)."""
  forward = 4 * batch * HEADS * length * length * HEAD_DIM
  return forward * (3.0 if backward else 1.0) / 1e9


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sizes", default=f"512,2048,{LONG}", help="comma-separated lengths")
  parser.add_argument("--batch", type=int, default=8, help=f"batch below S={LONG} (then 1)")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--memory_length", type=int, default=8192, help="0 skips memory runs")
  parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
  parser.add_argument("--json", default="", help="also write the results to this JSON file")
  parser.add_argument("--memory-child", default="", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.memory_child:
    print(peak_memory_child(*json.loads(args.memory_child)))
    return

  cases = list(JAX_CASES) + ([TORCH_CASE] if _torch_available() else [])
  if args.cases:
    cases = [c for c in cases if c in args.cases.split(",")]
  peak = matmul_peak_gflops()
  print(f"# attention, fp32, N={HEADS}, H={HEAD_DIM}, backend={jax.default_backend()}, "
        f"{os.cpu_count()} CPUs, jax {jax.__version__}; fp32 matmul peak {peak:.0f} GFLOP/s",
        flush=True)
  results = [dict(case="fp32 matmul peak", gflops=peak)]
  print("| case | B | S | pass | ms | GFLOP/s | x peak | x torch time |\n"
        "|---|---|---|---|---|---|---|---|", flush=True)
  for length in (int(s) for s in args.sizes.split(",")):
    batch = 1 if length >= LONG else args.batch
    for backward in (False, True):
      row = {c: time_case(c, batch, length, backward, args.repeats) for c in cases}
      for c, seconds in row.items():
        vs_torch = f"{seconds / row[TORCH_CASE]:.2f}" if TORCH_CASE in row else "-"
        mode = "fwd+bwd" if backward else "fwd"
        rate = gflops(batch, length, backward) / seconds
        print(f"| {c} | {batch} | {length} | {mode} | {seconds * 1e3:.0f} | {rate:.1f} | "
              f"{rate / peak:.2f} | {vs_torch} |", flush=True)
        results.append(dict(case=c, batch=batch, length=length, mode=mode, seconds=seconds,
                            gflops=rate))
  if args.memory_length:
    print(f"\n# peak memory added by one call, B=1, S={args.memory_length}\n"
          "| case | pass | peak MB |\n|---|---|---|", flush=True)
    for c in cases:
      for backward in (False, True):
        peak = peak_memory(c, 1, args.memory_length, backward)
        mode = "fwd+bwd" if backward else "fwd"
        shown = f"{peak / 2**20:.0f}" if isinstance(peak, int) else peak
        print(f"| {c} | {mode} | {shown} |", flush=True)
        results.append(dict(case=c, length=args.memory_length, mode=mode, peak_bytes=peak))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(results, f, indent=1)


if __name__ == "__main__":
  main()
