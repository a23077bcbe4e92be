"""What a press costs and what it saves: prefill time with and without scoring and eviction, the
cache's bytes, and decoding speed on the full and the pressed cache, all in one process.

    python -m benchmarks.press_bench --checkpoint=runs/smollm2 --length=2048 --ratio=0.75 \
        --out=runs/bench/press_smollm2.json

Sides of the prefill (`benchmarks.timing.compare`, alternating turns): the prompt's prefill alone
(`init_decode_cache`, the tap of the queries off), then the prefill with each press's scoring and
eviction (`models.compression`). The press's cost is its ratio to the prefill alone, round by
round. Decoding: `--tokens` greedy steps (`decode_step`, one compiled step each, as generate.py
decodes) on the full cache and on the cache pressed at `--ratio` by `--decode`, in alternating
turns from a fresh cache each (its prefill not timed), tokens/s per side. Bytes: every
leaf of each cache (keys, values, and the pressed cache's positions and heads).
"""

import argparse
import functools
import json
import os
import time

from flax import nnx
import jax
import jax.numpy as jnp

from benchmarks import machine, timing
from interpret import loading
from models import compression

BOOK = os.path.join(os.path.dirname(__file__), '..', '..', 'shared', 'data', 'books')
BOOK = os.path.join(BOOK, 'pride_and_prejudice.txt')
PRESSES = ('knorm', 'snapkv', 'tova', 'expected_attention', 'adakv', 'pyramidkv', 'streaming_llm')


@functools.partial(jax.jit, static_argnums=0, static_argnames=('room', 'name', 'ratio'))
def _prefill(graphdef, state, prompt, *, room, name, ratio):
  press = None if name is None else (name, ratio)
  return compression.pressed_prefill(nnx.merge(graphdef, state), prompt, room, press)


@functools.partial(jax.jit, static_argnums=0, donate_argnames='cache')
def _step(graphdef, state, token, step, cache):
  logits, cache = nnx.merge(graphdef, state).decode_step(token, step, cache)
  return jnp.argmax(logits, -1).astype(jnp.int32), cache


def _decode(graphdef, state, cache, token, tokens: int):
  """`tokens` greedy steps; returns the last token (waited for by the timer)."""
  for step in range(tokens):
    token, cache = _step(graphdef, state, token, jnp.int32(step), cache)
  return token


def _bytes(cache) -> int:
  return int(sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(cache)))


def run(args) -> dict:
  decoder = loading.load_decoder(args.checkpoint)
  graphdef, state = nnx.split(decoder.model)
  with open(args.text, encoding='utf-8') as f:  # real text: scores as a press meets them
    ids = decoder.tokenizer.encode(f.read(8 * args.length))[: args.length + 1]
  if len(ids) <= args.length:
    raise SystemExit(f'{args.text} holds fewer than {args.length + 1} tokens.')
  prompt = jnp.asarray([ids], jnp.int32)
  room = args.tokens + 1
  prefill = functools.partial(_prefill, graphdef, state, prompt, room=room)
  sides = {'prefill': lambda: prefill(name=None, ratio=0.0)}
  for name in args.presses.split(','):
    sides[name] = functools.partial(prefill, name=name, ratio=args.ratio)
  timed = timing.compare(sides, turns=args.turns, warmup=1)
  report = dict(
    machine=machine.facts(),
    checkpoint=args.checkpoint,
    length=args.length,
    ratio=args.ratio,
    prefill_s=timed.spread('prefill')._asdict(),
    presses={
      name: dict(
        seconds=timed.spread(name)._asdict(),
        over_prefill=timed.ratio(name, 'prefill')._asdict(),
        cache_bytes=_bytes(timed.results[name]),
      )
      for name in sides
      if name != 'prefill'
    },
    full_cache_bytes=_bytes(timed.results['prefill']),
  )
  token = prompt[:, -1]
  caches = {'full': lambda: prefill(name=None, ratio=0.0), 'pressed': sides[args.decode]}
  rates = {side: [] for side in caches}
  _decode(graphdef, state, caches['pressed'](), token, args.tokens)  # compile both caches' steps
  _decode(graphdef, state, caches['full'](), token, args.tokens)
  for side in timing.order(caches, args.turns):
    cache = jax.block_until_ready(caches[side]())  # a fresh cache; its prefill is not timed
    started = time.perf_counter()
    jax.block_until_ready(_decode(graphdef, state, cache, token, args.tokens))
    rates[side].append(args.tokens / (time.perf_counter() - started))
  report['decode'] = {
    side: dict(tokens_per_s=timing.Spread.of(values)._asdict(), press=args.decode)
    for side, values in rates.items()
  }
  return report


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--checkpoint', required=True)
  parser.add_argument('--length', type=int, default=2048, help='prompt tokens')
  parser.add_argument('--text', default=BOOK, help='the text whose first tokens are the prompt')
  parser.add_argument('--ratio', type=float, default=0.75)
  parser.add_argument('--presses', default=','.join(PRESSES))
  parser.add_argument('--decode', default='snapkv', help='the press whose cache decoding reads')
  parser.add_argument('--tokens', type=int, default=32, help='greedy steps per decoding call')
  parser.add_argument('--turns', type=int, default=3)
  parser.add_argument('--out', required=True)
  args = parser.parse_args()
  report = run(args)
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, 'w', encoding='utf-8') as f:
    json.dump(report, f, indent=1)
  print(json.dumps({k: v for k, v in report.items() if k != 'machine'}, indent=1))


if __name__ == '__main__':
  main()
