"""Every attention variant through the default dispatcher, against cuDNN's plain causal attention.

    python -m benchmarks.fused_bench                          # a GPU: S=8192,16384, bfloat16
    python -m benchmarks.fused_bench --implementation=pallas  # Attend's own kernel for each
    python -m benchmarks.fused_bench --sizes=512 --dtype=float32 --repeats=2   # a CPU smoke run

For each variant: the kernel `scaled_dot_product_attention(implementation=None)` picks
(`attention.dispatch.chosen_implementation` says which), the median time of forward+backward
(and forward alone) after a warm-up, the ratio to cuDNN's plain causal attention at the same shape
(on a CPU the default kernel's plain causal call), and the compiled program's
temporary memory (XLA's memory analysis of the forward+backward program: a kernel whose memory is
linear in S doubles it from S to 2S, one that forms `[T, S]` arrays quadruples it).
B=4, N=8, H=64 as in docs/benchmarks.md; `grouped` has 2 key/value heads. `--implementation`
names one kernel for every variant but the baseline (a variant it cannot run is an error row).
"""

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

import attention
from attention import dispatch
from benchmarks import timing

BATCH, HEADS, HEAD_DIM = 4, 8, 64
BASELINE = 'plain causal'


def _slopes():
  return attention.alibi_slopes(HEADS)


# name: (options for scaled_dot_product_attention given S, learned arrays given S, kv heads, T/S)
VARIANTS = {
  BASELINE: (lambda s: dict(is_causal=True), lambda s: {}, HEADS, 1),
  'grouped causal': (lambda s: dict(is_causal=True), lambda s: {}, 2, 1),
  'causal window 1024': (lambda s: dict(is_causal=True, window=1024), lambda s: {}, HEADS, 1),
  'bidirectional window 1024': (lambda s: dict(window=1024), lambda s: {}, HEADS, 1),
  'causal window 1024 at T = S/2': (
    lambda s: dict(is_causal=True, window=1024),
    lambda s: {},
    8,
    2,
  ),
  'causal ALiBi': (lambda s: dict(is_causal=True, alibi_slopes=_slopes()), lambda s: {}, HEADS, 1),
  'soft-capping 30': (lambda s: dict(is_causal=True, softcap=30.0), lambda s: {}, HEADS, 1),
  'causal sink': (
    lambda s: dict(is_causal=True),
    lambda s: {'sink': jnp.zeros(HEADS, jnp.float32)},
    HEADS,
    1,
  ),
  'T5 bias (learned N x T x S)': (
    lambda s: dict(is_causal=True),
    lambda s: {'bias': jnp.zeros((HEADS, s, s), jnp.bfloat16)},
    HEADS,
    1,
  ),
  'kept first tokens (window 1024 + 4)': (
    lambda s: dict(mask=attention.window_mask(jnp.arange(s), jnp.arange(s), 1024, 4)),
    lambda s: {},
    HEADS,
    1,
  ),
  'causal sink + window 1024': (
    lambda s: dict(is_causal=True, window=1024),
    lambda s: {'sink': jnp.zeros(HEADS, jnp.float32)},
    HEADS,
    1,
  ),
}


def case_arrays(name, s):
  """(options, learned arrays, [q, k, v, cotangent] float32) of variant `name` at key length S,
  drawn from one seed."""
  options_of, learned_of, kv_heads, shrink = VARIANTS[name]
  t = s // shrink
  rng = np.random.default_rng(0)
  shapes = [(BATCH, HEADS, t, HEAD_DIM), *[(BATCH, kv_heads, s, HEAD_DIM)] * 2]
  shapes.append(shapes[0])  # the cotangent
  arrays = [jnp.asarray(rng.standard_normal(shape, dtype=np.float32)) for shape in shapes]
  return options_of(s), learned_of(s), arrays


def _case(name, s, dtype, backward, implementation=None):
  """(compiled step, its arguments, kernel picked, why); `implementation` names one for every
  variant but the baseline."""
  options, learned, arrays = case_arrays(name, s)
  q, k, v, cotangent = (x.astype(dtype) for x in arrays)
  picked, why = dispatch.chosen_implementation(q, k, v, **options, **learned)

  if implementation:
    options = dict(options, implementation=implementation)
    picked, why = implementation, 'named'

  def loss(q, k, v, learned, dy):
    out = attention.scaled_dot_product_attention(q, k, v, **options, **learned)
    return jnp.sum(out.astype(jnp.float32) * dy)

  if backward:
    fn, args = jax.grad(loss, (0, 1, 2, 3)), (q, k, v, learned, cotangent)
  else:
    fn, args = (
      (
        lambda q, k, v, learned: attention.scaled_dot_product_attention(
          q, k, v, **options, **learned
        )
      ),
      (q, k, v, learned),
    )
  compiled = jax.jit(fn).lower(*args).compile()
  return compiled, args, picked, why


def _median_ms(compiled, args, repeats):
  """Milliseconds of one call: the median of `repeats` after a warm-up (`benchmarks.timing`)."""
  times = timing.compare({'case': lambda: compiled(*args)}, turns=repeats)
  return 1e3 * times.seconds('case')


def _temp_mb(compiled):
  analysis = compiled.memory_analysis()
  return None if analysis is None else analysis.temp_size_in_bytes / 1e6


def run(names, sizes, dtype, repeats, implementation=None):
  rows = []
  for s in sizes:
    baseline = {}
    for name in names:
      row = dict(variant=name, S=s)
      try:
        for backward in (False, True):
          named = None if name == BASELINE else implementation
          compiled, args, picked, why = _case(name, s, dtype, backward, named)
          key = 'fwd_bwd' if backward else 'fwd'
          row[f'{key}_ms'] = _median_ms(compiled, args, repeats)
          if backward:
            row['temp_mb'] = _temp_mb(compiled)
          row.update(kernel=picked, why=why)
          del compiled, args
      except Exception as e:  # noqa: BLE001  # a failing case is a row, not the end of the run
        row['error'] = f'{type(e).__name__}: {str(e).splitlines()[0][:300]}'
      if name == BASELINE:
        baseline = row
      for key in ('fwd_ms', 'fwd_bwd_ms'):
        if key in row and key in baseline:
          row[key.replace('_ms', '_x')] = row[key] / baseline[key]
      rows.append(row)
      print(_format(row), flush=True)
  return rows


def _format(row):
  if 'error' in row:
    return f'| {row["variant"]} | {row["S"]} | - | error: {row["error"]} |'
  temp = '-' if row.get('temp_mb') is None else f'{row["temp_mb"]:.0f}'
  return (
    f'| {row["variant"]} | {row["S"]} | {row["kernel"]} | {row["fwd_ms"]:.2f} '
    f'({row.get("fwd_x", 1):.2f}x) | {row["fwd_bwd_ms"]:.2f} ({row.get("fwd_bwd_x", 1):.2f}x) '
    f'| {temp} |'
  )


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--sizes', default='8192,16384')
  parser.add_argument('--dtype', default='bfloat16', choices=('bfloat16', 'float16', 'float32'))
  parser.add_argument('--repeats', type=int, default=5)
  parser.add_argument('--variants', default=','.join(VARIANTS), help='comma-separated names')
  parser.add_argument(
    '--implementation', default='', help="one kernel for every variant, e.g. 'pallas'"
  )
  parser.add_argument('--json', default='')
  args = parser.parse_args(argv)
  names = [n for n in VARIANTS if n in args.variants.split(',')] or list(VARIANTS)
  if BASELINE not in names:
    names.insert(0, BASELINE)
  sizes = [int(x) for x in args.sizes.split(',') if x]
  print(
    f'# {jax.devices()[0].device_kind}, jax {jax.__version__}, {args.dtype}, B={BATCH}, '
    f'N={HEADS}, H={HEAD_DIM}; times in ms, (x) = / {BASELINE!r} at the same S'
  )
  print('| variant | S | kernel | fwd ms | fwd+bwd ms | temp MB (fwd+bwd) |')
  print('|---|---|---|---|---|---|')
  rows = run(names, sizes, jnp.dtype(args.dtype), args.repeats, args.implementation or None)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(rows, f, indent=1)
  return rows


if __name__ == '__main__':
  main()
