"""Prefill time of the gated delta rule's chunked form against its token-by-token recurrence and
against causal softmax attention, same run.

    python -m benchmarks.delta_rule_bench --out=runs/bench          # about 30 s on 2 CPU cores

One small model shape: B=1, 4 heads, Dk = Dv = 64, float32, `--length` tokens (2,048), the
forward pass of each, jitted: `attention.delta_rule_chunked` (chunks of `--chunk`, 64, with
L2-normalised queries and keys and a decay, as Qwen3-Next runs it), `attention.delta_rule_recurrent`
(a `lax.scan` over the tokens) and `attention.scaled_dot_product_attention(is_causal=True)` (the
backend's default kernel). Times: `benchmarks.timing.compare`, a warm-up call each, then
`--repeats` turns alternating, a side's figure the median of its turns. The targets: the chunked
form at least 4x faster than the recurrence and no slower than softmax attention at 2,048 tokens.
Writes `<out>/delta_rule_bench.json`.
"""

from training import allocator

if __name__ == '__main__':
  allocator.use_mimalloc()  # first: the allocator is chosen at process start, before JAX loads

import argparse
import json
import os

import jax
import jax.numpy as jnp

import attention
from benchmarks import machine, timing

BATCH, HEADS, HEAD_DIM = 1, 4, 64


def cases(length: int, chunk: int) -> dict:
  """Per side, a call with no arguments running its jitted forward pass on fixed inputs."""
  keys = jax.random.split(jax.random.key(0), 5)
  shape = (BATCH, HEADS, length, HEAD_DIM)
  q, k, v = (jax.random.normal(key, shape, jnp.float32) for key in keys[:3])
  beta = jax.nn.sigmoid(jax.random.normal(keys[3], shape[:-1]))  # [B, H, T]
  g = -jax.nn.softplus(jax.random.normal(keys[4], shape[:-1]))  # log-decays <= 0
  chunked = jax.jit(lambda *a: attention.delta_rule_chunked(*a, chunk_size=chunk, l2_norm=True)[0])
  recurrent = jax.jit(lambda *a: attention.delta_rule_recurrent(*a, l2_norm=True)[0])
  softmax = jax.jit(lambda q, k, v: attention.scaled_dot_product_attention(q, k, v, is_causal=True))
  return {
    'chunked': lambda: chunked(q, k, v, beta, g),
    'recurrent': lambda: recurrent(q, k, v, beta, g),
    'softmax': lambda: softmax(q, k, v),
  }


def main() -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--length', type=int, default=2048, help='tokens of the prefill')
  parser.add_argument('--chunk', type=int, default=64, help="the chunked form's chunk size")
  parser.add_argument('--repeats', type=int, default=5, help='turns of each side (>= 3)')
  parser.add_argument('--calls', type=int, default=1, help='calls back to back per turn')
  parser.add_argument('--out', required=True, help='the folder the JSON is written into')
  args = parser.parse_args()
  if args.repeats < 3:
    raise SystemExit(f'--repeats must be at least 3 for a median; got {args.repeats}.')
  times = timing.compare(cases(args.length, args.chunk), turns=args.repeats, calls=args.calls)
  seconds = {name: times.seconds(name) for name in times.turns}
  report = dict(
    shape=dict(batch=BATCH, heads=HEADS, d_k=HEAD_DIM, d_v=HEAD_DIM, length=args.length),
    chunk=args.chunk,
    repeats=args.repeats,
    seconds=seconds,
    spread={name: times.spread(name)._asdict() for name in times.turns},
    compile_s=times.warmup_s,
    recurrent_over_chunked=times.ratio('recurrent', 'chunked')._asdict(),
    chunked_over_softmax=times.ratio('chunked', 'softmax')._asdict(),
    targets=dict(
      chunked_4x_faster_than_recurrent=seconds['recurrent'] >= 4 * seconds['chunked'],
      chunked_not_slower_than_softmax=seconds['chunked'] <= seconds['softmax'],
    ),
    machine=machine.facts('float32'),
  )
  os.makedirs(args.out, exist_ok=True)
  path = os.path.join(args.out, 'delta_rule_bench.json')
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(report, f, indent=1)
  print(json.dumps({key: value for key, value in report.items() if key != 'machine'}, indent=1))
  print(f'# written to {path}')
  return report


if __name__ == '__main__':
  main()
