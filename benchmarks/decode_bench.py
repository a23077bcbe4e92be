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
ids, continued as `decoding.continue_prompt` continues them; sampling uses temperature 0.8, top-p
0.9 and one fixed key (`SAMPLING`, `SAMPLE_SEED`), the same in both variants.
Random float32 weights; random ids are 3.. (no padding, BOS or EOS), fixed seed.

Every variant runs the same search code (`models.decoding.greedy_search` / `beam_search` /
`sample_search`) and differs only in the `tokens_to_logits(ids, step, cache)` callback. The
decoder's given tokens, its prompt [B, P] (`decoder_prompt`), are BOS alone (P = 1) for a source ->
target model and the prompt for gpt; the prompt's last token is the search's first input.

- cached: the model's `init_decode_cache` / `decode_step`, exactly as `decoding.generate` and
  `decoding.continue_prompt` use them; each step computes one position (gpt's cache is prefilled
  with the prompt's first P - 1 tokens in one parallel pass, inside the timed call).
- uncached (`uncached_decoder`): the "cache" holds the ids in a [B', P - 1 + max_length] buffer
  initialised with the prompt (beam search reorders it like any cache leaf) plus what is computed
  once per source. Each step writes `ids` at position P - 1 + step, runs the model's full
  teacher-forced decoder over the buffer (gpt: `token_logits`) and keeps the logits at
  P - 1 + step. Inside `lax.while_loop` shapes are static, so the decoder runs over all
  P - 1 + max_length positions every step: that is how a jitted decoder without a cache works, and
  causal masking (for the RNN, the recurrence) makes positions after P - 1 + step irrelevant.
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

Encoding the source once is fair in all variants and happens inside the timed call in all. The
uncached Transformer calls the public `decode(prefix, memory, source_mask)`, whose code projects
the memory into cross-attention keys/values each step (XLA hoists that loop-invariant projection
out of the while loop, as it does the Linen peer's); the cached path projects them once.
Seq2Seq's only public teacher-forced decoder is `__call__`, which re-encodes the source; its
decoder is a scan of one recurrence step over the inputs, so the uncached callback scans the public
`decode_step` over the buffer from the initial state of `init_decode_cache` (tests/test_seq2seq.py
checks that this reproduces `__call__`'s logits), and no code in models/ changes.

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
import os
from typing import Any, Callable, NamedTuple

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import linen_peer, timing
from benchmarks.train_bench import peer_model_config
from configs import default, gpt_text, seq2seq_bahdanau, seq2seq_luong, transformer_base
from data.tokenizers import BOS_ID, PAD_ID
import models
from models import decoding
from models.language import DecoderLM
from models.seq2seq import Seq2Seq
from models.transformer import Transformer

Array = jax.Array


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
METHODS = ('greedy', 'beam', 'sample')
VARIANTS = ('cached', 'uncached', 'linen')  # linen: Transformer models, greedy rows
SOURCE_LENGTH = 32  # ids per source (gpt: per prompt)
NEVER_EOS = -1  # no argmax or top-k index is negative, so every search runs max_length steps
ALPHA = 0.6  # configs/default.py's length penalty
SAMPLING = dict(temperature=0.8, top_p=0.9)
SAMPLE_SEED = 0  # the sampling key, `jax.random.key(SAMPLE_SEED)`, in both variants
TARGET_SPEEDUP = 5.0
TARGET_X_LINEN = 2.0


def _transformer_source(model: Transformer, inputs: Array, max_length: int) -> dict[str, Array]:
  """Encoder output `memory [B, S, D]` and `source_mask [B, S]`, computed once per source."""
  del max_length  # the memory does not depend on it
  memory = model.encode(inputs)
  return {'memory': memory, 'source_mask': inputs != model.pad_id}


def _transformer_prefix(model: Transformer, ids: Array, source: dict[str, Array]) -> Array:
  """Teacher-forced logits `[B, L, V]` of decoder inputs `ids [B, L]`."""
  return model.decode(ids, source['memory'], source['source_mask'])


def _seq2seq_source(model: Seq2Seq, inputs: Array, max_length: int) -> dict[str, Array]:
  """Encoder memory and the decoder's initial state (bridge from the encoder), once per source."""
  return model.init_decode_cache(inputs, max_length)


def _seq2seq_prefix(model: Seq2Seq, ids: Array, source: dict[str, Array]) -> Array:
  """Teacher-forced logits `[B, L, V]`: the recurrence re-run over `ids [B, L]` from step 0."""

  def step(state, xs):
    ids_t, t = xs  # [B], scalar
    logits, state = model.decode_step(ids_t, t, state)
    return state, logits

  steps = jnp.arange(ids.shape[1], dtype=jnp.int32)
  _, logits = jax.lax.scan(step, source, (ids.T, steps))  # [L, B, V]
  return jnp.swapaxes(logits, 0, 1)


def _lm_source(model: DecoderLM, inputs: Array, max_length: int) -> dict[str, Array]:
  """Nothing: a language model's prompt lives in the id buffer."""
  del model, inputs, max_length
  return {}


def _lm_prefix(model: DecoderLM, ids: Array, source: dict[str, Array]) -> Array:
  """Next-token logits `[B, L, V]` of `ids [B, L]`, causal."""
  del source
  return model.token_logits(ids)


# Per model class: (what is computed once per source, the teacher-forced decoder over a prefix).
UNCACHED = {
  Transformer: (_transformer_source, _transformer_prefix),
  Seq2Seq: (_seq2seq_source, _seq2seq_prefix),
  DecoderLM: (_lm_source, _lm_prefix),
}


def decoder_prompt(model: nnx.Module, inputs: Array) -> Array:
  """The decoder's given ids int32 [B, P]: a language model's prompt `inputs`, otherwise BOS."""
  if isinstance(model, DecoderLM):
    return inputs
  return jnp.full((inputs.shape[0], 1), BOS_ID, jnp.int32)


def uncached_decoder(
  model: nnx.Module, inputs: Array, max_length: int
) -> tuple[decoding.TokensToLogits, dict[str, Any]]:
  """A search callback that recomputes the decoder over the whole prefix at every step.

  Args:
    model: a Transformer, Seq2Seq or DecoderLM.
    inputs: source (DecoderLM: prompt) ids int32 [B, S].
    max_length: the number of tokens the search generates at most.

  Returns:
    `(tokens_to_logits, cache)`: the cache is `{'ids': [B, P - 1 + max_length] int32, 'source':
    ...}` with P the length of `decoder_prompt`; every leaf leads with B so that beam search
    repeats and reorders it.
  """
  encode, decode_prefix = UNCACHED[type(model)]
  prompt = decoder_prompt(model, inputs)
  offset = prompt.shape[1] - 1  # the position of the first input, at step 0
  # Zeros after the prompt: a position cannot affect earlier logits.
  cache = {
    'ids': jnp.pad(prompt, ((0, 0), (0, max_length - 1))),
    'source': encode(model, inputs, max_length),
  }

  def tokens_to_logits(ids: Array, step: Array, cache: dict[str, Any]):
    position = offset + step
    buffer = cache['ids'].at[:, position].set(ids)  # [B', P - 1 + L]
    logits = decode_prefix(model, buffer, cache['source'])  # [B', P - 1 + L, V]
    return logits[:, position], {'ids': buffer, 'source': cache['source']}

  return tokens_to_logits, cache


@functools.partial(
  jax.jit,
  static_argnums=0,
  static_argnames=('cached', 'method', 'beam_size', 'max_length', 'eos_id'),
)
def _search(
  graphdef: nnx.GraphDef,
  state: nnx.State,
  inputs: Array,
  *,
  cached: bool,
  method: str,
  beam_size: int,
  max_length: int,
  eos_id: int,
) -> Array:
  """One whole search, compiled; `cached` picks the callback and nothing else."""
  model = nnx.merge(graphdef, state)
  if cached:
    tokens_to_logits, cache = model.decode_step, model.init_decode_cache(inputs, max_length)
  else:
    tokens_to_logits, cache = uncached_decoder(model, inputs, max_length)
  kwargs = dict(
    batch_size=inputs.shape[0],
    max_length=max_length,
    bos_id=decoder_prompt(model, inputs)[:, -1],
    eos_id=eos_id,
    pad_id=PAD_ID,
  )
  if method == 'greedy':
    return decoding.greedy_search(tokens_to_logits, cache, **kwargs)
  if method == 'sample':
    return decoding.sample_search(
      tokens_to_logits, cache, rng=jax.random.key(SAMPLE_SEED), **SAMPLING, **kwargs
    )
  ids, _ = decoding.beam_search(tokens_to_logits, cache, beam_size=beam_size, alpha=ALPHA, **kwargs)
  return ids[:, 0]


def search(
  model: nnx.Module,
  inputs: Array,
  *,
  cached: bool,
  method: str,
  max_length: int,
  beam_size: int = 4,
  eos_id: int = NEVER_EOS,
) -> Array:
  """Greedy, beam or sampled search with or without the cache.

  Args:
    model: a Transformer, Seq2Seq or DecoderLM.
    inputs: source (DecoderLM: prompt) ids int32 [B, S].
    cached: use `init_decode_cache`/`decode_step` (True) or `uncached_decoder` (False).
    method: 'greedy', 'beam' (the best hypothesis, alpha 0.6) or 'sample' (`SAMPLING` with the
      key of `SAMPLE_SEED`).
    max_length: the number of tokens to generate at most.
    beam_size: the beam of 'beam'; unused otherwise.
    eos_id: the end token; the default never occurs.

  Returns:
    ids int32 [B, max_length], as `decoding.generate` (DecoderLM: `continue_prompt`) returns them.
  """
  if method not in METHODS:
    raise ValueError(f'method must be one of {METHODS}; got {method!r}.')
  graphdef, state = nnx.split(model)
  return _search(
    graphdef,
    state,
    jnp.asarray(inputs),
    cached=cached,
    method=method,
    beam_size=beam_size if method == 'beam' else 1,
    max_length=max_length,
    eos_id=eos_id,
  )


def linen_greedy(
  model: linen_peer.Transformer,
  params: Any,
  inputs: Array,
  *,
  max_length: int,
  eos_id: int = NEVER_EOS,
) -> Array:
  """Greedy search with the Linen peer's KV cache (`cached=True`), run by `decoding.greedy_search`.

  Returns ids int32 [B, max_length]; jit it whole, as `_search` is.
  """
  tokens_to_logits, cache = linen_peer.decoder_callback(model, params, inputs, max_length)
  return decoding.greedy_search(
    tokens_to_logits,
    cache,
    batch_size=inputs.shape[0],
    max_length=max_length,
    bos_id=BOS_ID,
    eos_id=eos_id,
    pad_id=PAD_ID,
  )


def linen_runner(
  model_config: Any, vocabs: dict[str, int], model: nnx.Module, inputs: Array, max_length: int
) -> Callable[[], Array] | None:
  """The Linen peer's cached greedy search with `model`'s weights, jitted; None where the peer
  cannot mirror `model` (not a Transformer, or settings it does not implement)."""
  if not isinstance(model, Transformer):
    return None
  size = dict(input_vocab=vocabs['input_vocab_size'], output_vocab=vocabs['output_vocab_size'])
  try:
    peer_config = peer_model_config(model_config, size)
  except ValueError:
    return None
  peer = linen_peer.Transformer(peer_config, cached=True, max_length=max_length)
  params = linen_peer.params_from_attend(
    nnx.to_pure_dict(nnx.state(model, nnx.Param)), model_config.num_heads
  )
  run = jax.jit(functools.partial(linen_greedy, peer, max_length=max_length))
  return functools.partial(run, params, inputs)


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
    linen_runner(config, bench.vocabs, model, inputs, args.length)
    if 'linen' in args.variants
    else None
  )
  rows = []
  for method in bench.searches:
    beam_size = args.beam_size if method == 'beam' else 1
    runs = {
      variant: functools.partial(
        _search,
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
  header = (
    f'# decoding, B={args.batch}, sources / prompts of {SOURCE_LENGTH} random ids, '
    f'{args.length} output tokens (EOS never emitted), vocabularies: {vocabs}; float32, '
    f'backend={jax.default_backend()}, {os.cpu_count()} CPUs, jax {jax.__version__}'
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
      cpu_count=os.cpu_count(),
      jax=jax.__version__,
      backend=jax.default_backend(),
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
