"""Decoding speed: greedy and beam search with the models' KV cache vs recomputing the prefix.

    python -m benchmarks.decode_bench                          # both families, B=32, 64 tokens
    python -m benchmarks.decode_bench --batch=8 --repeats=1    # a quick look
    python -m benchmarks.decode_bench --models=transformer,seq2seq,seq2seq_luong \
        --json=/tmp/decode_bench.json

Models: `transformer` is the model of configs/default.py (d_model 128, 4 heads, d_ff 256, 2+2
layers), `seq2seq` that of configs/seq2seq_bahdanau.py, `seq2seq_luong` that of
configs/seq2seq_luong.py, `transformer_base` that of configs/transformer_base.py (d_model 512, 8
heads, 6+6 layers); random float32 weights, vocabularies 1000 in / 64 out like the default task
(transformer_base: one shared vocabulary of 8000, as its config has), `--batch` sources of 32
random ids (fixed seed).

Both variants run the same search code (`models.decoding.greedy_search` / `beam_search`) and
differ only in the `tokens_to_logits(ids, step, cache)` callback:

- cached: the model's `init_decode_cache` / `decode_step`, exactly as `decoding.generate` uses
  them; each step computes one position.
- uncached (`uncached_decoder`): the "cache" holds the generated ids in a [B', max_length] buffer
  (beam search reorders it like any cache leaf) plus what is computed once per source. Each step
  writes `ids` at position `step`, runs the model's full teacher-forced decoder over the buffer and
  keeps the logits at `step`. Inside `lax.while_loop` shapes are static, so the decoder runs over
  all max_length positions every step: that is how a jitted decoder without a cache works, and
  causal masking (for the RNN, the recurrence) makes positions after `step` irrelevant.

Encoding the source once is fair in both variants and happens inside the timed call in both. The
uncached Transformer calls the public `decode(prefix, memory, source_mask)`, which also projects the
memory into cross-attention keys/values each step; the cached path projects them once.
Seq2Seq's only public teacher-forced decoder is `__call__`, which re-encodes the source; its
decoder is a scan of one recurrence step over the inputs, so the uncached callback scans the public
`decode_step` over the buffer from the initial state of `init_decode_cache` (tests/test_seq2seq.py
checks that this reproduces `__call__`'s logits), and no code in models/ changes.

Timing: each search (cached and uncached) is jitted whole; one warm-up call (compilation) is
excluded; the figure is the median of `--repeats` calls. EOS is -1, an id no model can emit, so no
sequence stops early and every search generates all `--length` tokens. tokens/s = batch * length /
seconds; for beam search that counts the output tokens of the batch (the best hypothesis per
sequence), not the batch * beam hypotheses it extends. Target: cached >= 5x faster than uncached.
"""

import argparse
import functools
import json
import os
import statistics
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import models
from configs import default, seq2seq_bahdanau, seq2seq_luong, transformer_base
from data import BOS_ID, PAD_ID
from models import decoding
from models.seq2seq import Seq2Seq
from models.transformer import Transformer

Array = jax.Array
CONFIGS = {"transformer": default, "seq2seq": seq2seq_bahdanau, "seq2seq_luong": seq2seq_luong,
           "transformer_base": transformer_base}
INPUT_VOCAB, OUTPUT_VOCAB, SOURCE_LENGTH = 1000, 64, 32
VOCABS = {"transformer_base": (8000, 8000)}   # shared embeddings: one vocabulary; others 1000 -> 64
NEVER_EOS = -1   # no argmax or top-k index is negative, so every search runs max_length steps
ALPHA = 0.6      # configs/default.py's length penalty
TARGET_SPEEDUP = 5.0


def _transformer_source(model: Transformer, inputs: Array, max_length: int) -> dict[str, Array]:
  """Encoder output `memory [B, S, D]` and `source_mask [B, S]`, computed once per source."""
  del max_length  # the memory does not depend on it
  memory, _ = model.encode(inputs)
  return {"memory": memory, "source_mask": inputs != model.pad_id}


def _transformer_prefix(model: Transformer, ids: Array, source: dict[str, Array]) -> Array:
  """Teacher-forced logits `[B, L, V]` of decoder inputs `ids [B, L]`."""
  logits, _ = model.decode(ids, source["memory"], source["source_mask"])
  return logits


def _seq2seq_source(model: Seq2Seq, inputs: Array, max_length: int) -> dict[str, Array]:
  """Encoder memory and the decoder's initial state (bridge from the encoder), once per source."""
  return model.init_decode_cache(inputs, max_length)


def _seq2seq_prefix(model: Seq2Seq, ids: Array, source: dict[str, Array]) -> Array:
  """Teacher-forced logits `[B, L, V]`: the recurrence re-run over `ids [B, L]` from step 0."""
  def step(state, xs):
    ids_t, t = xs                                              # [B], scalar
    logits, state = model.decode_step(ids_t, t, state)
    return state, logits

  steps = jnp.arange(ids.shape[1], dtype=jnp.int32)
  _, logits = jax.lax.scan(step, source, (ids.T, steps))      # [L, B, V]
  return jnp.swapaxes(logits, 0, 1)


# Per model class: (what is computed once per source, the teacher-forced decoder over a prefix).
UNCACHED = {
    Transformer: (_transformer_source, _transformer_prefix),
    Seq2Seq: (_seq2seq_source, _seq2seq_prefix),
}


def uncached_decoder(model: nnx.Module, inputs: Array,
                     max_length: int) -> tuple[decoding.TokensToLogits, dict[str, Any]]:
  """A search callback that recomputes the decoder over the whole prefix at every step.

  Args:
    model: a Transformer or Seq2Seq.
    inputs: source ids int32 [B, S].
    max_length: the number of tokens the search generates at most.

  Returns:
    `(tokens_to_logits, cache)`: the cache is `{'ids': [B, max_length] int32, 'source': ...}`,
    every leaf leading with B so that beam search repeats and reorders it.
  """
  encode, decode_prefix = UNCACHED[type(model)]
  # Zeros: step 0 writes BOS at position 0, and a position cannot affect earlier logits.
  cache = {"ids": jnp.zeros((inputs.shape[0], max_length), jnp.int32),
           "source": encode(model, inputs, max_length)}

  def tokens_to_logits(ids: Array, step: Array, cache: dict[str, Any]):
    buffer = cache["ids"].at[:, step].set(ids)                        # [B', L]
    logits = decode_prefix(model, buffer, cache["source"])            # [B', L, V]
    return logits[:, step], {"ids": buffer, "source": cache["source"]}

  return tokens_to_logits, cache


@functools.partial(jax.jit, static_argnums=0,
                   static_argnames=("cached", "beam_size", "max_length", "eos_id"))
def _search(graphdef: nnx.GraphDef, state: nnx.State, inputs: Array, *, cached: bool,
            beam_size: int, max_length: int, eos_id: int) -> Array:
  """One whole search, compiled; `cached` picks the callback and nothing else."""
  model = nnx.merge(graphdef, state)
  if cached:
    tokens_to_logits, cache = model.decode_step, model.init_decode_cache(inputs, max_length)
  else:
    tokens_to_logits, cache = uncached_decoder(model, inputs, max_length)
  kwargs = dict(batch_size=inputs.shape[0], max_length=max_length, bos_id=BOS_ID, eos_id=eos_id,
                pad_id=PAD_ID)
  if beam_size == 1:
    return decoding.greedy_search(tokens_to_logits, cache, **kwargs)
  ids, _ = decoding.beam_search(tokens_to_logits, cache, beam_size=beam_size, alpha=ALPHA,
                                **kwargs)
  return ids[:, 0]


def search(model: nnx.Module, inputs: Array, *, cached: bool, beam_size: int, max_length: int,
           eos_id: int = NEVER_EOS) -> Array:
  """Greedy (`beam_size=1`) or beam search with or without the cache.

  Args:
    model: a Transformer or Seq2Seq.
    inputs: source ids int32 [B, S].
    cached: use `init_decode_cache`/`decode_step` (True) or `uncached_decoder` (False).
    beam_size: 1 = greedy, otherwise the best hypothesis of a beam search (alpha 0.6).
    max_length: the number of tokens to generate at most.
    eos_id: the end token; the default never occurs.

  Returns:
    ids int32 [B, max_length], as `decoding.generate` returns them.
  """
  graphdef, state = nnx.split(model)
  return _search(graphdef, state, jnp.asarray(inputs), cached=cached, beam_size=beam_size,
                 max_length=max_length, eos_id=eos_id)


def time_search(run: Callable[[], Array], repeats: int) -> tuple[float, float]:
  """`(median seconds of one call, seconds of the warm-up call)`; the warm-up compiles."""
  start = time.perf_counter()
  jax.block_until_ready(run())
  warmup = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(run())
    times.append(time.perf_counter() - start)
  return statistics.median(times), warmup


def bench_model(name: str, args: argparse.Namespace) -> list[dict[str, Any]]:
  """Times cached and uncached greedy and beam search for one model; one row per search."""
  input_vocab, output_vocab = VOCABS.get(name, (INPUT_VOCAB, OUTPUT_VOCAB))
  model = models.build(CONFIGS[name].get_config().model, input_vocab_size=input_vocab,
                       output_vocab_size=output_vocab, pad_id=PAD_ID, rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(model)
  # Ids 3.. are ordinary tokens: no padding (0), BOS (1) or EOS (2) in the source.
  inputs = jnp.asarray(np.random.default_rng(0).integers(
      3, input_vocab, (args.batch, SOURCE_LENGTH), dtype=np.int32))
  tokens = args.batch * args.length
  rows = []
  for label, beam_size in (("greedy", 1), (f"beam {args.beam_size}", args.beam_size)):
    seconds, compile_s = {}, {}
    for cached in (True, False):
      run = functools.partial(_search, graphdef, state, inputs, cached=cached,
                              beam_size=beam_size, max_length=args.length, eos_id=NEVER_EOS)
      seconds[cached], compile_s[cached] = time_search(run, args.repeats)
    speedup = seconds[False] / seconds[True]
    rows.append(dict(model=name, search=label, beam_size=beam_size, batch=args.batch,
                     length=args.length, cached_s=seconds[True], uncached_s=seconds[False],
                     cached_tokens_per_s=tokens / seconds[True],
                     uncached_tokens_per_s=tokens / seconds[False], speedup=speedup,
                     meets_target=speedup >= TARGET_SPEEDUP, cached_warmup_s=compile_s[True],
                     uncached_warmup_s=compile_s[False]))
  return rows


def _row_line(r: dict[str, Any]) -> str:
  verdict = "yes" if r["meets_target"] else "NO"
  return (f"| {r['model']} | {r['search']} | {r['cached_s'] * 1e3:.0f} | "
          f"{r['uncached_s'] * 1e3:.0f} | {r['cached_tokens_per_s']:,.0f} | "
          f"{r['uncached_tokens_per_s']:,.0f} | {r['speedup']:.1f}x | {verdict} |")


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--models", default="transformer,seq2seq",
                      help=f"comma-separated, from {', '.join(CONFIGS)}")
  parser.add_argument("--batch", type=int, default=32, help="source sequences per search")
  parser.add_argument("--length", type=int, default=64, help="output tokens per sequence")
  parser.add_argument("--beam_size", type=int, default=4)
  parser.add_argument("--repeats", type=int, default=3, help="timed calls after the warm-up")
  parser.add_argument("--json", default="", help="also write the results to this JSON file")
  args = parser.parse_args()
  names = [n for n in args.models.split(",") if n]
  unknown = [n for n in names if n not in CONFIGS]
  if unknown or not names:
    parser.error(f"--models must name one or more of {', '.join(CONFIGS)}; got {args.models!r}.")
  for field in ("batch", "length", "beam_size", "repeats"):
    if getattr(args, field) < 1:
      parser.error(f"--{field} must be >= 1; got {getattr(args, field)}.")

  header = (f"# decoding, B={args.batch}, source {SOURCE_LENGTH} random ids (vocab {INPUT_VOCAB}),"
            f" {args.length} output tokens (vocab {OUTPUT_VOCAB}; transformer_base 8000 shared, "
            f"EOS never emitted), float32, "
            f"backend={jax.default_backend()}, {os.cpu_count()} CPUs, jax {jax.__version__}")
  print(header, flush=True)
  print(f"# median of {args.repeats} after a warm-up; tok/s = batch * length / s (beam: output "
        f"tokens, not hypotheses); target: cached >= {TARGET_SPEEDUP:.0f}x uncached", flush=True)
  print("| model | search | cached ms | uncached ms | cached tok/s | uncached tok/s | speed-up | "
        f">= {TARGET_SPEEDUP:.0f}x |\n|---|---|---|---|---|---|---|---|", flush=True)
  results = []
  for name in names:
    for row in bench_model(name, args):
      print(_row_line(row), flush=True)
      results.append(row)
  if args.json:
    meta = dict(header=header, cpu_count=os.cpu_count(), jax=jax.__version__,
                backend=jax.default_backend(), source_length=SOURCE_LENGTH,
                input_vocab=INPUT_VOCAB, output_vocab=OUTPUT_VOCAB, repeats=args.repeats,
                target_speedup=TARGET_SPEEDUP)
    with open(args.json, "w") as f:
      json.dump({"meta": meta, "results": results}, f, indent=1)


if __name__ == "__main__":
  main()
