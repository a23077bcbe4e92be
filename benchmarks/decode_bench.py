"""Decoding speed: greedy, beam and sampled search with the KV cache vs recomputing the prefix,
and Attend's cached greedy search vs the flax.linen decoder with its KV cache.

    python -m benchmarks.decode_bench                          # three families, B=32, 64 tokens
    python -m benchmarks.decode_bench --batch=8 --repeats=1    # a quick look
    python -m benchmarks.decode_bench --models=transformer,seq2seq,seq2seq_luong,gpt \
        --json=/tmp/decode_bench.json
    python -m benchmarks.decode_bench --models=transformer_medium --batch=64 \
        --variants=cached,linen --repeats=9                    # Attend vs Linen, cached greedy

Source -> target models, rows greedy and beam `--beam_size`: `transformer` is the model of
configs/default.py (d_model 128, 4 heads, d_ff 256, 2+2 layers), `seq2seq` that of
configs/seq2seq_bahdanau.py, `seq2seq_luong` that of configs/seq2seq_luong.py, `transformer_medium`
configs/default.py at d_model 256, 4 heads, d_ff 1024, 3+3 layers with vocabularies of 1000 in and
out (the train bench's medium model), `transformer_base` that of configs/transformer_base.py
(d_model 512, 8 heads, 6+6 layers); vocabularies 1000 in / 64 out like the default task otherwise
(transformer_base: one shared vocabulary of 8000, as its config has), `--batch` sources of 32
random ids.
Language model, rows greedy and sample: `gpt` is the GPT-style `DecoderLM` of configs/gpt_text.py
(d_model 128, 4 heads, d_ff 512, 4 layers, RoPE), vocabulary 128, `--batch` prompts of 32 random
ids, continued as `generation.continue_prompt` continues them; sampling uses temperature 0.8, top-p
0.9 and one fixed key (`SAMPLING`, `SAMPLE_SEED`), the same in both variants.
Random float32 weights; random ids are 3.. (no padding, BOS or EOS), fixed seed.

Variants (`benchmarks/decoding_searches.py` says how each runs, from the same search code):
- cached: the model's `init_decode_cache` / `decode_step`, as `generation.generate` and
  `generation.continue_prompt` use them.
- uncached: the model's full teacher-forced decoder re-run over the prefix at every step.
- linen (Transformer models, greedy row): `benchmarks/linen_peer.py`, the same Transformer in
  flax.linen blocks with Attend's weights, decoding as flax's examples/wmt does: the decoder's
  self-attention is `nn.MultiHeadDotProductAttention(decode=True)` with its `'cache'` collection,
  one `model.apply(..., mutable=['cache'])` per token (`linen_peer.decoder_callback`), run by the
  same `greedy_search`. As published, its cross-attention projects the encoder memory into keys
  and values in every step's code; in the one jitted while loop XLA hoists that projection out of
  the loop (it is loop-invariant), but not the per-step transposes of those keys and values and of
  the self-attention cache into the layout its attention contracts. Same sizes, float32, full
  vocabulary logits; `linen_agreement` in the JSON is the fraction of its tokens equal to Attend's
  (1.0 up to float rounding at near-ties: it computes the same function).
Encoding the source once is fair in all variants and happens inside the timed call in all.

Timing (`benchmarks.timing.compare`): each search is jitted whole; one warm-up call (compilation)
per variant is excluded; the variants of a row then take turns, `--repeats` rounds, so that a slow
spell of a shared machine hits them alike, a turn the median of `--calls` calls back to back; each
figure is the median of its turns, each ratio the median of the per-round ratios, with their
spreads (min-max) in the JSON. EOS is -1, an id no model
can emit, so no sequence stops early and every search generates all `--length` tokens.
tokens/s = batch * length / seconds (gpt: generated tokens, not the prompt); for beam search that
counts the output tokens of the batch (the best hypothesis per sequence), not the batch * beam
hypotheses it extends. Targets: cached >= 5x faster than uncached, and >= 2x the Linen decoder's
tokens/s (`x linen`, Linen's seconds over Attend's cached seconds).
"""

from training import allocator

if __name__ == '__main__':
  allocator.use_mimalloc()  # first: the allocator is chosen at process start, before JAX loads

import argparse
import functools
import json
from typing import Any, NamedTuple

from flax import nnx
import jax.numpy as jnp
import numpy as np

from benchmarks import linen_peer, machine, timing
from benchmarks.decoding_searches import NEVER_EOS, SAMPLE_SEED, SAMPLING, search_compiled
from configs import default, gpt_text, seq2seq_bahdanau, seq2seq_luong, transformer_base
from data.tokenizers import PAD_ID
import models


class Bench(NamedTuple):
  """What one `--models` name builds and runs."""

  config: Any  # a configs module; its `get_config().model` is built
  vocabs: dict[str, int]  # the vocabulary sizes `models.build` takes from the data
  searches: tuple[str, ...]  # one table row each, from METHODS
  resize: dict[str, Any] = {}  # changes to that `config.model`


S2S_VOCABS = dict(input_vocab_size=1000, output_vocab_size=64)  # the default task's
BENCHES = {
  'transformer': Bench(default, S2S_VOCABS, ('greedy', 'beam')),
  'transformer_medium': Bench(
    default,
    dict(input_vocab_size=1000, output_vocab_size=1000),
    ('greedy', 'beam'),
    dict(d_model=256, num_heads=4, d_ff=1024, num_layers=3),
  ),
  'seq2seq': Bench(seq2seq_bahdanau, S2S_VOCABS, ('greedy', 'beam')),
  'seq2seq_luong': Bench(seq2seq_luong, S2S_VOCABS, ('greedy', 'beam')),
  'transformer_base': Bench(
    transformer_base, dict(input_vocab_size=8000, output_vocab_size=8000), ('greedy', 'beam')
  ),
  'gpt': Bench(gpt_text, dict(vocab_size=128), ('greedy', 'sample')),
}
VARIANTS = ('cached', 'uncached', 'linen')  # linen: Transformer models, greedy rows
SOURCE_LENGTH = 32  # ids per source (gpt: per prompt)
TARGET_SPEEDUP = 5.0
TARGET_X_LINEN = 2.0


def _label(method: str, beam_size: int) -> str:
  """The table's search column."""
  if method == 'beam':
    return f'beam {beam_size}'
  if method == 'sample':
    return f'sample (T {SAMPLING["temperature"]}, top-p {SAMPLING["top_p"]})'
  return method


def bench_model(name: str, args: argparse.Namespace) -> list[dict[str, Any]]:
  """Times the `args.variants` of each search of one model; one row per search."""
  bench = BENCHES[name]
  config = bench.config.get_config().model
  config.update(bench.resize)
  model = models.build(config, **bench.vocabs, pad_id=PAD_ID, rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(model)
  input_vocab = bench.vocabs.get('input_vocab_size', bench.vocabs.get('vocab_size'))
  # Ids 3.. are ordinary tokens: no padding (0), BOS (1) or EOS (2) in the source or prompt.
  inputs = jnp.asarray(
    np.random.default_rng(0).integers(3, input_vocab, (args.batch, SOURCE_LENGTH), dtype=np.int32)
  )
  tokens = args.batch * args.length
  linen = (
    linen_peer.greedy_runner(
      config, bench.vocabs, model, inputs, max_length=args.length, eos_id=NEVER_EOS
    )
    if 'linen' in args.variants
    else None
  )
  rows = []
  for method in bench.searches:
    beam_size = args.beam_size if method == 'beam' else 1
    runs = {
      variant: functools.partial(
        search_compiled,
        graphdef,
        state,
        inputs,
        cached=variant == 'cached',
        method=method,
        beam_size=beam_size,
        max_length=args.length,
        eos_id=NEVER_EOS,
      )
      for variant in ('cached', 'uncached')
      if variant in args.variants
    }
    if linen is not None and method == 'greedy':
      runs['linen'] = linen
    times = timing.compare(runs, turns=args.repeats, calls=args.calls)
    seconds = {variant: times.seconds(variant) for variant in runs}
    row = dict(
      model=name,
      search=_label(method, beam_size),
      method=method,
      beam_size=beam_size,
      batch=args.batch,
      length=args.length,
      vocabs=bench.vocabs,
    )
    for variant in VARIANTS:
      row[f'{variant}_s'] = seconds.get(variant)
      row[f'{variant}_tokens_per_s'] = tokens / seconds[variant] if variant in seconds else None
      row[f'{variant}_warmup_s'] = times.warmup_s.get(variant)
      row[f'{variant}_s_spread'] = times.spread(variant)._asdict() if variant in runs else None
    for key, slower in (('speedup', 'uncached'), ('x_linen', 'linen')):
      ratio = times.ratio(slower, 'cached') if {'cached', slower} <= set(runs) else None
      row[key] = None if ratio is None else ratio.median
      row[f'{key}_spread'] = None if ratio is None else ratio._asdict()
    row['linen_agreement'] = None
    if row['x_linen'] is not None:
      ids = times.results
      row['linen_agreement'] = float(np.mean(np.asarray(ids['linen']) == np.asarray(ids['cached'])))
    row.update(
      meets_target=None if row['speedup'] is None else row['speedup'] >= TARGET_SPEEDUP,
      meets_linen_target=(None if row['x_linen'] is None else row['x_linen'] >= TARGET_X_LINEN),
    )
    rows.append(row)
  return rows


def _vocab_label(vocabs: dict[str, int]) -> str:
  """'1000 -> 64', '8000 shared' or '128' (a language model's one vocabulary)."""
  if 'vocab_size' in vocabs:
    return str(vocabs['vocab_size'])
  source, target = vocabs['input_vocab_size'], vocabs['output_vocab_size']
  return f'{source} shared' if source == target else f'{source} -> {target}'


def _row_line(r: dict[str, Any]) -> str:
  """One table row; '-' where a variant did not run."""
  ms = lambda v: '-' if r[f'{v}_s'] is None else f'{r[f"{v}_s"] * 1e3:.0f}'
  rate = lambda v: '-' if r[f'{v}_tokens_per_s'] is None else f'{r[f"{v}_tokens_per_s"]:,.0f}'
  ratio = lambda x: '-' if r[x] is None else f'{r[x]:.2f}x'
  verdict = lambda met: '-' if met is None else ('yes' if met else 'NO')
  return (
    f'| {r["model"]} | {r["search"]} | {" | ".join(ms(v) for v in VARIANTS)} | '
    f'{" | ".join(rate(v) for v in VARIANTS)} | {ratio("speedup")} | '
    f'{verdict(r["meets_target"])} | {ratio("x_linen")} | '
    f'{verdict(r["meets_linen_target"])} |'
  )


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
  """Runs the benchmark on `argv` (default: the command line); returns the rows it printed."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    '--models',
    default='transformer,seq2seq,gpt',
    help=f'comma-separated, from {", ".join(BENCHES)}',
  )
  parser.add_argument('--batch', type=int, default=32, help='sources (prompts) per search')
  parser.add_argument('--length', type=int, default=64, help='output tokens per sequence')
  parser.add_argument('--beam_size', type=int, default=4)
  parser.add_argument(
    '--variants',
    default=','.join(VARIANTS),
    help=f"comma-separated, from {', '.join(VARIANTS)} (linen: Transformer models' greedy rows)",
  )
  parser.add_argument('--repeats', type=int, default=3, help='turns of each variant')
  parser.add_argument(
    '--calls', type=int, default=1, help='calls back to back per turn (all sides are JAX)'
  )
  parser.add_argument('--json', default='', help='also write the results to this JSON file')
  args = parser.parse_args(argv)
  names = [n for n in args.models.split(',') if n]
  unknown = [n for n in names if n not in BENCHES]
  if unknown or not names:
    parser.error(f'--models must name one or more of {", ".join(BENCHES)}; got {args.models!r}.')
  args.variants = [v for v in args.variants.split(',') if v]
  if not args.variants or set(args.variants) - set(VARIANTS):
    parser.error(
      f'--variants must name one or more of {", ".join(VARIANTS)}; got {",".join(args.variants)!r}.'
    )
  for field in ('batch', 'length', 'beam_size', 'repeats', 'calls'):
    if getattr(args, field) < 1:
      parser.error(f'--{field} must be >= 1; got {getattr(args, field)}.')

  vocabs = ', '.join(f'{n} {_vocab_label(BENCHES[n].vocabs)}' for n in names)
  facts = machine.facts('float32')
  header = (
    f'# decoding, B={args.batch}, sources / prompts of {SOURCE_LENGTH} random ids, '
    f'{args.length} output tokens (EOS never emitted), vocabularies: {vocabs}; float32, '
    f'backend={facts["backend"]} ({facts["device"]}), {facts["cpus"]} CPUs, jax {facts["jax"]}, '
    f'flax {facts["flax"]}, allocator {facts["allocator"]}'
  )
  print(header, flush=True)
  print(
    f'# after a warm-up, {args.repeats} turns of {args.calls} calls each, the variants of a row '
    f'alternating (benchmarks.timing), medians; tok/s = '
    f'batch * length / s (beam: output tokens, not hypotheses); targets: cached >= '
    f'{TARGET_SPEEDUP:.0f}x uncached, >= {TARGET_X_LINEN:.0f}x the flax.linen decoder (its KV '
    f'cache, wmt-style; greedy)',
    flush=True,
  )
  print(
    '| model | search | cached ms | uncached ms | linen ms | cached tok/s | uncached tok/s | '
    f'linen tok/s | x uncached | >= {TARGET_SPEEDUP:.0f}x | x linen | '
    f'>= {TARGET_X_LINEN:.0f}x |\n|{"---|" * 12}',
    flush=True,
  )
  results = []
  for name in names:
    for row in bench_model(name, args):
      print(_row_line(row), flush=True)
      results.append(row)
  if args.json:
    meta = dict(
      header=header,
      machine=facts,
      source_length=SOURCE_LENGTH,
      vocabs={n: BENCHES[n].vocabs for n in names},
      sampling=SAMPLING,
      sample_seed=SAMPLE_SEED,
      repeats=args.repeats,
      calls=args.calls,
      variants=args.variants,
      target_speedup=TARGET_SPEEDUP,
      target_x_linen=TARGET_X_LINEN,
    )
    with open(args.json, 'w') as f:
      json.dump({'meta': meta, 'results': results}, f, indent=1)
  return results


if __name__ == '__main__':
  main()
