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

`--peer` measures the same on transformers + kvpress in the same run (benchmarks/kvpress_cost.py
in `.venv-kvpress`, `make kvpress`; the GGUF --checkpoint names, or `--peer_gguf`): the same
token ids, presses and order of turns, passed in a job file. The JSON then holds kvpress's side
under 'kvpress' in the same shape, and 'attend_over_kvpress': Attend's medians over kvpress's,
and on each side the pressed cache's bytes and decoding speed over the full cache's:

    python -m benchmarks.press_bench --checkpoint=SmolLM2-135M-Instruct --length=2048 \
        --ratio=0.75 --peer --out=runs/bench/press_smollm2_kvpress.json
"""

import argparse
import functools
import json
import os
import time

from flax import nnx
import jax
import jax.numpy as jnp

from attention import get_press
from benchmarks import machine, press_agreement, timing
from models import compression, pretrained
import sources
from training import layout

BOOK = os.path.join(os.path.dirname(__file__), '..', '..', 'shared', 'data', 'books')
BOOK = os.path.join(BOOK, 'pride_and_prejudice.txt')
PRESSES = ('knorm', 'snapkv', 'tova', 'expected_attention', 'adakv', 'pyramidkv', 'streaming_llm')


@functools.partial(jax.jit, static_argnums=0, static_argnames=('room', 'pressing'))
def _prefill(graphdef, state, prompt, *, room, pressing):
  """The prompt's cache, pressed by `pressing` = `(press, ratio)` (None: whole)."""
  return compression.pressed_prefill(nnx.merge(graphdef, state), prompt, room, pressing)


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


def summary(turns: dict, cache_bytes: dict, rates: dict, decode: str) -> dict:
  """One side's figures: per-turn prefill seconds of 'prefill' and each press, each cache's
  bytes, and per-turn decoding tokens/s of 'full' and 'pressed' -> spreads and ratios."""
  timed = timing.Timing(turns, {}, {})
  presses = [name for name in turns if name != 'prefill']
  return dict(
    prefill_s=timed.spread('prefill')._asdict(),
    presses={
      name: dict(
        seconds=timed.spread(name)._asdict(),
        over_prefill=timed.ratio(name, 'prefill')._asdict(),
        cache_bytes=cache_bytes[name],
      )
      for name in presses
    },
    full_cache_bytes=cache_bytes['prefill'],
    decode={
      side: dict(tokens_per_s=timing.Spread.of(values)._asdict(), press=decode)
      for side, values in rates.items()
    },
  )


def peer_job(ids: list[int], args, presses: list[str], gguf: str) -> dict:
  """What benchmarks/kvpress_cost.py reads: the same ids, presses and order of turns."""
  return dict(
    gguf=gguf,
    folder=os.path.expanduser(args.peer_folder),
    context_ids=ids[:-1],
    token=ids[-1],
    presses=presses,
    ratio=args.ratio,
    decode=args.decode,
    tokens=args.tokens,
    prefill_order=list(timing.order(['prefill', *presses], args.turns)),
    decode_order=list(timing.order(['full', 'pressed'], args.turns)),
  )


def attend_over_kvpress(attend: dict, peer: dict) -> dict:
  """Attend's medians over kvpress's (seconds: < 1, Attend faster; tokens/s: > 1, Attend faster),
  and on each side the pressed cache's bytes and decoding speed over the full cache's."""
  median = lambda side, *keys: functools.reduce(dict.get, keys, side)['median']
  out = dict(prefill_s=median(attend, 'prefill_s') / median(peer, 'prefill_s'))
  out['press_s'] = {
    name: median(attend['presses'][name], 'seconds') / median(entry, 'seconds')
    for name, entry in peer['presses'].items()
  }
  out['decode_tokens_per_s'] = {
    side: median(attend['decode'][side], 'tokens_per_s') / median(entry, 'tokens_per_s')
    for side, entry in peer['decode'].items()
  }
  press = attend['decode']['pressed']['press']
  for name, side in (('attend', attend), ('kvpress', peer)):
    out[name] = dict(
      cache_fraction=side['presses'][press]['cache_bytes'] / side['full_cache_bytes'],
      decode_speedup=median(side['decode']['pressed'], 'tokens_per_s')
      / median(side['decode']['full'], 'tokens_per_s'),
      press=press,
    )
  return out


def run(args) -> dict:
  presses = args.presses.split(',')
  resolved = {name: get_press(name) for name in presses}  # an unknown name before any work
  decoder = sources.load_decoder(args.checkpoint)
  graphdef, state = nnx.split(decoder.model)
  with open(args.text, encoding='utf-8') as f:  # real text: scores as a press meets them
    ids = decoder.tokenizer.encode(f.read(8 * args.length))[: args.length + 1]
  if len(ids) <= args.length:
    raise SystemExit(f'{args.text} holds fewer than {args.length + 1} tokens.')
  prompt = jnp.asarray([ids], jnp.int32)
  room = args.tokens + 1
  prefill = functools.partial(_prefill, graphdef, state, prompt, room=room)
  sides = {'prefill': lambda: prefill(pressing=None)}
  for name, press in resolved.items():
    sides[name] = functools.partial(prefill, pressing=(press, args.ratio))
  timed = timing.compare(sides, turns=args.turns, warmup=1)
  token = prompt[:, -1]
  caches = {'full': lambda: prefill(pressing=None), 'pressed': sides[args.decode]}
  rates = {side: [] for side in caches}
  _decode(graphdef, state, caches['pressed'](), token, args.tokens)  # compile both caches' steps
  _decode(graphdef, state, caches['full'](), token, args.tokens)
  for side in timing.order(caches, args.turns):
    cache = jax.block_until_ready(caches[side]())  # a fresh cache; its prefill is not timed
    started = time.perf_counter()
    jax.block_until_ready(_decode(graphdef, state, cache, token, args.tokens))
    rates[side].append(args.tokens / (time.perf_counter() - started))
  cache_bytes = {name: _bytes(cache) for name, cache in timed.results.items()}
  report = dict(
    machine=machine.facts(),
    checkpoint=args.checkpoint,
    length=args.length,
    ratio=args.ratio,
    **summary(timed.turns, cache_bytes, rates, args.decode),
  )
  if args.peer:
    if args.peer_gguf is None and layout.holds_checkpoints(args.checkpoint):
      raise SystemExit('--peer reads a GGUF file: name the one --checkpoint holds, --peer_gguf.')
    gguf = args.peer_gguf or pretrained.locate(args.checkpoint)
    peer = press_agreement.kvpress_run(
      'benchmarks.kvpress_cost', peer_job(ids, args, presses, gguf)
    )
    report['kvpress'] = dict(
      versions=peer['versions'],
      threads=peer['threads'],
      attention=peer['attention'],
      kept_per_layer=peer['kept_per_layer'],
      **summary(peer['turns'], peer['cache_bytes'], peer['tokens_per_s'], args.decode),
    )
    report['attend_over_kvpress'] = attend_over_kvpress(report, report['kvpress'])
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
  parser.add_argument(
    '--peer', action='store_true', help='kvpress on transformers too (.venv-kvpress), same ids'
  )
  parser.add_argument('--peer_gguf', help="the peer's GGUF (default: --checkpoint's file)")
  parser.add_argument('--peer_folder', default=press_agreement.FOLDER, help="transformers' copy")
  parser.add_argument('--out', required=True)
  args = parser.parse_args()
  report = run(args)
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, 'w', encoding='utf-8') as f:
    json.dump(report, f, indent=1)
  shown = {k: v for k, v in report.items() if k != 'machine'}
  if 'kvpress' in shown:
    shown['kvpress'] = {k: v for k, v in shown['kvpress'].items() if k != 'kept_per_layer'}
  print(json.dumps(shown, indent=1))


if __name__ == '__main__':
  main()
