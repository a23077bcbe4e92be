"""Attention variants against full multi-head softmax attention, same run.

    python -m benchmarks.variants_bench                        # all three tables (~10 min, 2 cores)
    python -m benchmarks.variants_bench --sections=decode --repeats=3

- decode: the GPT of configs/gpt_text.py (4 layers, D=128, N=4, rotary), batch `--batch`,
  greedy decoding of `--tokens` tokens after a one-token prompt (one compiled `lax.scan` of
  `decode_step`). Rows: MHA, GQA (num_kv_heads=2), MQA (1), a 64-position sliding window and
  linear attention. Columns: the decoding state's bytes (all layers) and tokens per second.
- window: forward time of causal sliding-window attention (W=`--window`) against full causal
  attention, both through the chunked kernel (the fastest full kernel on a CPU from S=512),
  B=1, N=4, H=64 float32, at `--lengths`.
- linear: forward+backward time of causal linear attention at the same lengths, with the chunked
  softmax kernel beside it up to `--softmax_max_length` (its time grows as S²).

Times (`benchmarks.timing.compare`): after a warm-up call each, the cases of a row take
`--repeats` turns, alternating, a turn the median of `--calls` calls back to back; a figure is
the median of its turns. Ratios compare cases of one row, so a slow spell of a shared machine
hits them alike.
"""

from training import allocator

if __name__ == '__main__':
  allocator.use_mimalloc()  # first: the allocator is chosen at process start, before JAX loads

import argparse
import json

from flax import nnx
import jax
import jax.numpy as jnp

import attention
from benchmarks import timing
import models

HEADS, HEAD_DIM = 4, 64
GPT = dict(num_layers=4, d_model=128, num_heads=4, d_ff=512, positions='rope', dropout_rate=0.0)
DECODE_ROWS = {
  'MHA': {},
  'GQA (num_kv_heads=2)': dict(num_kv_heads=2),
  'MQA (num_kv_heads=1)': dict(num_kv_heads=1),
  'window 64': dict(window=64),
  'linear': dict(attention='linear'),
}


def median_seconds(fns: dict, repeats: int, calls: int = 1) -> dict[str, float]:
  """Per name, the median seconds of one call of `fns[name]` (`benchmarks.timing.compare`)."""
  times = timing.compare(fns, turns=repeats, calls=calls)
  return {name: times.seconds(name) for name in fns}


def greedy_decoder(variant: dict, batch: int, tokens: int, vocab: int = 128):
  """`(run, state_bytes)`: `run()` greedily decodes `tokens` tokens with a GPT of `variant`."""
  config = models.default_config('decoder_lm', **GPT, max_length=tokens + 1, **variant)
  model = models.build(config, vocab_size=vocab, pad_id=0, rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(model)
  prompt = jnp.ones((batch, 1), jnp.int32)

  @jax.jit
  def decode(state, prompt):
    model = nnx.merge(graphdef, state)
    cache = model.init_decode_cache(prompt, max_length=tokens)

    def step(carry, t):
      ids, cache = carry
      logits, cache = model.decode_step(ids, t, cache)
      ids = jnp.argmax(logits, axis=-1).astype(jnp.int32)  # [B]
      return (ids, cache), ids

    _, out = jax.lax.scan(step, (prompt[:, -1], cache), jnp.arange(tokens, dtype=jnp.int32))
    return out  # [tokens, B]

  cache = jax.eval_shape(lambda: model.init_decode_cache(prompt, max_length=tokens))
  state_bytes = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(cache['layers']))
  return (lambda: decode(state, prompt).block_until_ready()), state_bytes


def decode_table(args) -> list[dict]:
  runs, rows = {}, []
  for name, variant in DECODE_ROWS.items():
    runs[name], state_bytes = greedy_decoder(variant, args.batch, args.tokens)
    rows.append(dict(variant=name, state_bytes=state_bytes))
  seconds = median_seconds(runs, args.repeats, args.calls)
  for row in rows:
    row['seconds'] = seconds[row['variant']]
    row['tokens_per_s'] = args.batch * args.tokens / row['seconds']
    row['speed_vs_mha'] = seconds['MHA'] / row['seconds']
    row['state_vs_mha'] = row['state_bytes'] / rows[0]['state_bytes']
  return rows


def _qkv(length: int):
  keys = jax.random.split(jax.random.key(0), 3)
  return [jax.random.normal(key, (1, HEADS, length, HEAD_DIM), jnp.float32) for key in keys]


def window_table(args) -> list[dict]:
  rows = []
  for length in args.lengths:
    q, k, v = _qkv(length)

    def forward(window):
      fn = jax.jit(
        lambda q, k, v: attention.scaled_dot_product_attention(
          q, k, v, is_causal=True, window=window, implementation='chunked'
        )
      )
      return lambda: fn(q, k, v).block_until_ready()

    cases = {'full': forward(0), 'window': forward(args.window)}
    seconds = median_seconds(cases, args.repeats, args.calls)
    rows.append(
      dict(
        length=length,
        window=args.window,
        full_s=seconds['full'],
        window_s=seconds['window'],
        speedup=seconds['full'] / seconds['window'],
      )
    )
  return rows


def linear_table(args) -> list[dict]:
  rows = []
  for length in args.lengths:
    q, k, v = _qkv(length)
    loss = lambda fn: jax.jit(jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v) ** 2), (0, 1, 2)))
    cases = {'linear': loss(lambda q, k, v: attention.linear_attention(q, k, v, is_causal=True))}
    if length <= args.softmax_max_length:
      cases['softmax'] = loss(
        lambda q, k, v: attention.scaled_dot_product_attention(
          q, k, v, is_causal=True, implementation='chunked'
        )
      )
    runs = {name: (lambda fn=fn: jax.block_until_ready(fn(q, k, v))) for name, fn in cases.items()}
    seconds = median_seconds(runs, args.repeats, args.calls)
    rows.append(dict(length=length, linear_s=seconds['linear'], softmax_s=seconds.get('softmax')))
  base = rows[0]
  for row in rows:
    # 1.0 = exactly linear in S from the first length on.
    row['linear_vs_linear_growth'] = row['linear_s'] / (
      base['linear_s'] * row['length'] / base['length']
    )
  return rows


SECTIONS = {'decode': decode_table, 'window': window_table, 'linear': linear_table}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--sections', default=','.join(SECTIONS))
  parser.add_argument('--batch', type=int, default=64)
  parser.add_argument('--tokens', type=int, default=256)
  parser.add_argument('--window', type=int, default=256)
  parser.add_argument(
    '--lengths', type=lambda s: [int(x) for x in s.split(',')], default=[2048, 8192, 32768]
  )
  parser.add_argument('--softmax_max_length', type=int, default=8192)
  parser.add_argument('--repeats', type=int, default=3, help='turns of each case')
  parser.add_argument(
    '--calls', type=int, default=1, help='calls back to back per turn (all sides are JAX)'
  )
  parser.add_argument('--json', default='')
  args = parser.parse_args()
  results = {
    'device': jax.devices()[0].device_kind,
    'allocator': 'mimalloc' if allocator.active() else 'system',
  }
  print(f'# {results["device"]}, {jax.device_count()} device(s), allocator {results["allocator"]}')
  for name in args.sections.split(','):
    if name not in SECTIONS:
      raise SystemExit(f'--sections: {name!r} is not one of {", ".join(SECTIONS)}.')
    results[name] = SECTIONS[name](args)
    print(f'\n## {name}')
    for row in results[name]:
      print(
        '  '
        + '  '.join(
          f'{key}={value:.4g}' if isinstance(value, float) else f'{key}={value}'
          for key, value in row.items()
        )
      )
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(results, f, indent=1)


if __name__ == '__main__':
  main()
