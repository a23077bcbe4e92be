"""The searches the decoding benchmark (`benchmarks/decode_bench.py`) times against each other:
greedy, beam and sampled search with the model's KV cache, or recomputing the prefix every step.

Both run the same search code (`models.decoding.greedy_search` / `beam_search` / `sample_search`)
and differ only in the `tokens_to_logits(ids, step, cache)` callback. The decoder's given tokens,
its prompt [B, P] (`decoder_prompt`), are BOS alone (P = 1) for a source -> target model and the
prompt for a language model; the prompt's last token is the search's first input.

- cached: the model's `init_decode_cache` / `decode_step`, exactly as `generation.generate` and
  `generation.continue_prompt` use them; each step computes one position (a language model's cache
  is prefilled with the prompt's first P - 1 tokens in one parallel pass, inside the search).
- uncached (`uncached_decoder`): the "cache" holds the ids in a [B', P - 1 + max_length] buffer
  initialised with the prompt (beam search reorders it like any cache leaf) plus what is computed
  once per source. Each step writes `ids` at position P - 1 + step, runs the model's full
  teacher-forced decoder over the buffer (a language model: `token_logits`) and keeps the logits
  at P - 1 + step. Inside `lax.while_loop` shapes are static, so the decoder runs over all
  P - 1 + max_length positions every step: that is how a jitted decoder without a cache works, and
  causal masking (for the RNN, the recurrence) makes positions after P - 1 + step irrelevant.

Encoding the source once is fair in both and happens inside the search in both. The uncached
Transformer calls the public `decode(prefix, memory, source_mask)`, whose code projects the memory
into cross-attention keys/values each step (XLA hoists that loop-invariant projection out of the
while loop); the cached path projects them once. Seq2Seq's only public teacher-forced decoder is
`__call__`, which re-encodes the source; its decoder is a scan of one recurrence step over the
inputs, so the uncached callback scans the public `decode_step` over the buffer from the initial
state of `init_decode_cache` (tests/test_seq2seq.py checks that this reproduces `__call__`'s
logits), and no code in models/ changes.
"""

import functools
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp

from data.tokenizers import BOS_ID, PAD_ID
from models import decoding
from models.language import DecoderLM
from models.seq2seq import Seq2Seq
from models.transformer import Transformer

Array = jax.Array

METHODS = ('greedy', 'beam', 'sample')
NEVER_EOS = -1  # no argmax or top-k index is negative, so every search runs max_length steps
ALPHA = 0.6  # configs/default.py's length penalty
SAMPLING = dict(temperature=0.8, top_p=0.9)
SAMPLE_SEED = 0  # the sampling key, `jax.random.key(SAMPLE_SEED)`, with and without the cache


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
def search_compiled(
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
  """`search` of the model `nnx.merge(graphdef, state)`, compiled whole; `cached` picks the
  callback and nothing else."""
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
    ids int32 [B, max_length], as `generation.generate` (DecoderLM: `continue_prompt`) returns them.
  """
  if method not in METHODS:
    raise ValueError(f'method must be one of {METHODS}; got {method!r}.')
  graphdef, state = nnx.split(model)
  return search_compiled(
    graphdef,
    state,
    jnp.asarray(inputs),
    cached=cached,
    method=method,
    beam_size=beam_size if method == 'beam' else 1,
    max_length=max_length,
    eos_id=eos_id,
  )
