"""Attend's Pallas flash kernel on a GPU: its error against float32, and its block sizes.

    python -m benchmarks.pallas_check   # a GPU: errors at S=1024, block shapes at S=8192
    python -m benchmarks.pallas_check --check_length=64 --sizes= --dtype=float32  # a CPU smoke run

Errors: for each variant of `benchmarks/fused_bench.py` that the kernel takes, the output and
the gradients of q, k and v in `--dtype`, each as `|x - x32| / |x32|` against the reference kernel
run in float32 at the highest matmul precision. The same error of the reference kernel itself run
in `--dtype` is printed beside it: a fused kernel in bfloat16 should be about as far from float32
as XLA's own bfloat16 attention is, not exactly equal to it.

Blocks: forward+backward time of the plain causal and one variant per block shape
(`block_q x block_k`), with the same inputs as fused_bench; the fastest shape is the kernel's
default to choose.
"""

import argparse
import json

import jax
import jax.numpy as jnp

import attention
from attention.pallas_flash import flash_attention
from benchmarks import fused_bench

# The fused_bench variants whose options flash_attention takes as they are (no [T, S] array).
CHECKED = (
  'plain causal',
  'grouped causal',
  'bidirectional window 1024',
  'causal window 1024 at T = S/2',
  'causal ALiBi',
  'soft-capping 30',
  'causal sink + window 1024',
)


def _inputs(name, s):
  """fused_bench's options (learned arrays among them) and float32 arrays for variant `name`."""
  options, learned, arrays = fused_bench.case_arrays(name, s)
  options = dict(options, **learned)
  if 'sink' in options:
    # A sink of zeros would hide a wrong sign; these logits are not.
    options['sink'] = jnp.linspace(-1.0, 2.0, fused_bench.HEADS)
  return options, arrays


def _outputs_and_grads(fn, arrays, options, dtype):
  q, k, v, cotangent = (x.astype(dtype) for x in arrays)

  def loss(q, k, v):
    out = fn(q, k, v, **options)
    return jnp.sum(out.astype(jnp.float32) * cotangent.astype(jnp.float32)), out

  (dq, dk, dv), out = jax.jit(jax.grad(loss, (0, 1, 2), has_aux=True))(q, k, v)
  return [x.astype(jnp.float32) for x in (out, dq, dk, dv)]


def errors(names, s, dtype, block):
  """One row per variant: the Pallas kernel's and the reference kernel's relative errors in
  `dtype` against the reference kernel in float32."""
  reference = lambda *a, **o: attention.scaled_dot_product_attention(
    *a, implementation='reference', **o
  )
  pallas = lambda *a, **o: flash_attention(*a, block_q=block, block_k=block, **o)
  rows = []
  for name in names:
    options, arrays = _inputs(name, s)
    with jax.default_matmul_precision('highest'):
      exact = _outputs_and_grads(reference, arrays, options, jnp.float32)
    row = dict(variant=name, S=s, dtype=jnp.dtype(dtype).name)
    for label, fn in (('pallas', pallas), ('reference', reference)):
      got = _outputs_and_grads(fn, arrays, options, dtype)
      for what, x, want in zip(('out', 'dq', 'dk', 'dv'), got, exact):
        error = jnp.linalg.norm(x - want) / jnp.linalg.norm(want)
        row[f'{label}_{what}'] = float(error)
    rows.append(row)
    cells = ' | '.join(
      f'{row[f"pallas_{w}"]:.1e} ({row[f"reference_{w}"]:.1e})' for w in ('out', 'dq', 'dk', 'dv')
    )
    print(f'| {name} | {s} | {cells} |', flush=True)
  return rows


def blocks(names, s, dtype, shapes, repeats):
  """Forward+backward milliseconds of each variant for each (block_q, block_k)."""
  rows = []
  for name in names:
    options, arrays = _inputs(name, s)
    q, k, v, cotangent = (x.astype(dtype) for x in arrays)
    for bq, bk in shapes:

      def loss(q, k, v, bq=bq, bk=bk):
        out = flash_attention(q, k, v, block_q=bq, block_k=bk, **options)
        return jnp.sum(out.astype(jnp.float32) * cotangent)

      row = dict(variant=name, S=s, block_q=bq, block_k=bk)
      try:
        compiled = jax.jit(jax.grad(loss, (0, 1, 2))).lower(q, k, v).compile()
        row['fwd_bwd_ms'] = fused_bench._median_ms(compiled, (q, k, v), repeats)
        print(f'| {name} | {s} | {bq}x{bk} | {row["fwd_bwd_ms"]:.2f} |', flush=True)
      except Exception as e:  # noqa: BLE001  # a shape Triton refuses is a row, not the end
        row['error'] = f'{type(e).__name__}: {str(e).splitlines()[0][:200]}'
        print(f'| {name} | {s} | {bq}x{bk} | error: {row["error"]} |', flush=True)
      rows.append(row)
  return rows


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--dtype', default='bfloat16', choices=('bfloat16', 'float16', 'float32'))
  parser.add_argument('--check_length', type=int, default=1024, help='S of the error table')
  parser.add_argument('--sizes', default='8192', help='S of the block table; empty: none')
  parser.add_argument('--blocks', default='64x64,128x64,64x128,128x128,32x64')
  parser.add_argument('--block_variants', default='plain causal,causal ALiBi')
  parser.add_argument('--repeats', type=int, default=5)
  parser.add_argument('--json', default='')
  args = parser.parse_args(argv)
  dtype = jnp.dtype(args.dtype)
  print(
    f'# {jax.devices()[0].device_kind}, jax {jax.__version__}, {dtype.name}, B, N, H = '
    f'{fused_bench.BATCH}, {fused_bench.HEADS}, {fused_bench.HEAD_DIM}'
  )
  print('| variant | S | out | dq | dk | dv |  (relative error vs float32; reference kernel in ())')
  print('|---|---|---|---|---|---|')
  result = dict(errors=errors(CHECKED, args.check_length, dtype, 64))
  shapes = [tuple(int(x) for x in b.split('x')) for b in args.blocks.split(',') if b]
  sizes = [int(x) for x in args.sizes.split(',') if x]
  if sizes:
    print('| variant | S | block_q x block_k | fwd+bwd ms |')
    print('|---|---|---|---|')
  result['blocks'] = [
    row
    for s in sizes
    for row in blocks(args.block_variants.split(','), s, dtype, shapes, args.repeats)
  ]
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(result, f, indent=1)
  return result


if __name__ == '__main__':
  main()
