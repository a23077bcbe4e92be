"""Autoregressive decoding for any Attend model: greedy, sampled and beam search, each a while loop.

The searches see a model only through a callback and its cache:

    tokens_to_logits(ids [B'], step, cache) -> (logits [B', V], new_cache)

where `ids` are the previous tokens (BOS at step 0), `step` is the 0-based position of the token
being predicted and every cache leaf leads with the batch axis B'. Beam search folds beams into that
axis (B' = B * beam_size, beam index fastest) and reorders the cache by gathering along it.

Every search takes `(tokens_to_logits, cache)`, the cache holding `batch_size` (B) sequences, and
the keywords `batch_size`, `max_length` (the most tokens to generate), `bos_id` (the first input),
`eos_id` (the end token) and `pad_id` (fills each row after its EOS). The special ids are the
tokenizer's: the searches hard-code none. `bos_id` may also be ids [B], one first token per row:
a language model continues from each prompt's last token (`models.generation.continue_prompt`).
An `eos_id` that never occurs (e.g. -1) generates `max_length` tokens. Outputs hold the generated
tokens (no BOS), EOS included, padding after EOS. `models.generation` runs a model's own cache
through these searches.
"""

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from models.sampling import NEG_INF, check_sampling, filter_logits

Array = jax.Array
Cache = Any
TokensToLogits = Callable[[Array, Array, Cache], tuple[Array, Cache]]


def check_sizes(batch_size: int, max_length: int, beam_size: int = 1) -> None:
  """Raises ValueError for sizes a search cannot run with."""
  for field, value in (
    ('batch_size', batch_size),
    ('max_length', max_length),
    ('beam_size', beam_size),
  ):
    if not isinstance(value, int) or value < 1:
      raise ValueError(f'Decoding: {field} must be an integer >= 1, got {value!r}.')


def _first_tokens(bos_id: int | Array, batch_size: int) -> Array:
  """`bos_id` (an int, or ids [B]) as the first inputs int32 [B]."""
  if jnp.shape(bos_id) not in ((), (batch_size,)):
    raise ValueError(
      f'Decoding: bos_id must be an int or ids [batch_size={batch_size}], got '
      f'shape {jnp.shape(bos_id)}.'
    )
  return jnp.broadcast_to(jnp.asarray(bos_id, jnp.int32), (batch_size,))


def argmax(logits: Array) -> Array:
  """`jnp.argmax(logits, axis=-1)`: the first index of each row's maximum, a NaN counting as the
  maximum; int32 `[...]` of float `[..., V]`.

  Computed as a max, then the smallest index that reaches it: XLA:CPU runs argmax's paired
  (value, index) reduction as a scalar loop, four times slower than these two plain reductions
  on a decoding step's few rows (32 x 1000: 0.19 against 0.05 ms). Over a train batch's logits
  it is the other way round: XLA:CPU splits the long reductions and writes the indices out first
  (8 x 128 x 49152: 384 MB and 240 ms against none and 130 ms for `jnp.argmax`), so the tasks'
  token counts (`tasks.teacher_forcing.token_counts`) use `jnp.argmax`.
  """
  best = jnp.max(logits, axis=-1, keepdims=True)  # NaN if any is NaN
  reaches = (logits == best) | jnp.isnan(logits)  # [..., V]
  ids = jnp.arange(logits.shape[-1], dtype=jnp.int32)
  return jnp.min(jnp.where(reaches, ids, logits.shape[-1]), axis=-1)


def length_penalty(length: Array | int, alpha: float) -> Array:
  """GNMT length penalty `((5 + length) / 6) ** alpha` (Wu et al. 2016); scores divide by it."""
  return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


def _search(
  tokens_to_logits: TokensToLogits,
  cache: Cache,
  choose: Callable[[Array, Array], Array],
  *,
  batch_size: int,
  max_length: int,
  bos_id: int | Array,
  eos_id: int,
  pad_id: int,
) -> Array:
  """The loop of greedy and sampling search: `choose(logits [B, V], step)` picks the tokens [B]."""
  check_sizes(batch_size, max_length)

  def cond(carry):
    step, _, _, finished, _ = carry
    return (step < max_length) & ~jnp.all(finished)

  def body(carry):
    step, prev, out, finished, cache = carry
    logits, cache = tokens_to_logits(prev, step, cache)
    token = jnp.where(finished, pad_id, choose(logits, step).astype(jnp.int32))  # [B]
    out = out.at[:, step].set(token)
    return step + 1, token, out, finished | (token == eos_id), cache

  init = (
    jnp.int32(0),
    _first_tokens(bos_id, batch_size),
    jnp.full((batch_size, max_length), pad_id, jnp.int32),
    jnp.zeros((batch_size,), bool),
    cache,
  )
  return jax.lax.while_loop(cond, body, init)[2]


def greedy_search(
  tokens_to_logits: TokensToLogits,
  cache: Cache,
  *,
  batch_size: int,
  max_length: int,
  bos_id: int | Array,
  eos_id: int,
  pad_id: int,
) -> Array:
  """Picks the most likely token at every step; stops once every sequence has produced EOS.

  Takes the searches' common arguments (see the module docstring) and returns ids int32
  [B, max_length].
  """
  return _search(
    tokens_to_logits,
    cache,
    lambda logits, step: argmax(logits),
    batch_size=batch_size,
    max_length=max_length,
    bos_id=bos_id,
    eos_id=eos_id,
    pad_id=pad_id,
  )


def sample_tokens(
  logits: Array, rng: Array, step: Array | int, *, temperature: float, top_k: int, top_p: float
) -> Array:
  """Step `step`'s tokens `[B]` drawn from `logits [B, V]` as `sample_search` draws them: from
  `softmax(filter_logits(logits / temperature))` with the key `fold_in(rng, step)`; temperature
  0 is the most likely token."""
  if temperature == 0:  # the filters always keep the most likely token: greedy is exact
    return argmax(logits)
  logits = filter_logits(logits.astype(jnp.float32) / temperature, top_k=top_k, top_p=top_p)
  return jax.random.categorical(jax.random.fold_in(rng, step), logits, axis=-1)


def sample_search(
  tokens_to_logits: TokensToLogits,
  cache: Cache,
  *,
  batch_size: int,
  max_length: int,
  bos_id: int | Array,
  eos_id: int,
  pad_id: int,
  rng: Array,
  temperature: float = 1.0,
  top_k: int = 0,
  top_p: float = 1.0,
) -> Array:
  """Samples every token from the model's tempered, filtered distribution; stops at EOS like greedy.

  Each step draws from `softmax(filter_logits(logits / temperature))` with the key
  `fold_in(rng, step)`, so the same `rng` gives the same ids. Temperature comes first, as in common
  samplers (Hugging Face's, vLLM's): top-p keeps the nucleus of the tempered distribution. The
  searches' common arguments are described in the module docstring.

  Args:
    rng: a JAX PRNG key.
    temperature: divides the logits; below 1 sharpens, above 1 flattens, 0 is greedy search.
    top_k: keep only the k most likely tokens; 0 keeps all (see `filter_logits`).
    top_p: keep only the nucleus of this probability mass; 1 keeps all (see `filter_logits`).

  Returns:
    ids int32 [B, max_length].
  """
  check_sampling(top_k, top_p, temperature)

  def choose(logits: Array, step: Array) -> Array:
    return sample_tokens(logits, rng, step, temperature=temperature, top_k=top_k, top_p=top_p)

  return _search(
    tokens_to_logits,
    cache,
    choose,
    batch_size=batch_size,
    max_length=max_length,
    bos_id=bos_id,
    eos_id=eos_id,
    pad_id=pad_id,
  )


class _Beams(NamedTuple):
  """Beam search state; [B, K] per hypothesis, ids [B, K, max_length]."""

  step: Array
  live_ids: Array  # hypotheses still growing; padding beyond `step`
  live_logp: Array  # their log-probabilities
  prev: Array  # their last tokens, the next inputs
  done_ids: Array  # the best hypotheses that ended with EOS
  done_scores: Array  # their length-penalised scores (-inf in empty slots)
  done_flags: Array  # which slots of `done_*` are filled
  cache: Cache  # leaves [B * K, ...]


def beam_search(
  tokens_to_logits: TokensToLogits,
  cache: Cache,
  *,
  batch_size: int,
  beam_size: int,
  max_length: int,
  bos_id: int | Array,
  eos_id: int,
  pad_id: int,
  alpha: float = 0.6,
) -> tuple[Array, Array]:
  """Beam search with the GNMT length penalty.

  Each step extends the live beams by every token and keeps the 2K best candidates: those ending
  in EOS compete, scored `log p / length_penalty(length)` (length counts EOS), for the K finished
  slots; the K best others stay live. The loop stops early once every sequence has K finished
  hypotheses that no live beam can beat: a live beam's log-probability only falls, so its best
  possible score is `log p / max(length_penalty)`. A sequence that never finishes K hypotheses
  fills the remaining slots with its live beams, scored as if they ended at the last step;
  finished ones rank first. The searches' common arguments are described in the module docstring;
  here the cache's leaves are repeated per beam and `pad_id` fills each hypothesis after its EOS.

  Args:
    beam_size: K.
    alpha: length-penalty exponent; 0 ranks by log-probability alone.

  Returns:
    `(ids int32 [B, K, max_length], scores float32 [B, K])`, best first.
  """
  check_sizes(batch_size, max_length, beam_size)
  init = _initial_beams(cache, bos_id, pad_id, batch_size, beam_size, max_length)
  best_penalty = jnp.maximum(length_penalty(1, alpha), length_penalty(max_length, alpha))

  def cond(s: _Beams) -> Array:
    best_live = jnp.max(s.live_logp, axis=1) / best_penalty  # [B]
    worst_done = jnp.min(jnp.where(s.done_flags, s.done_scores, NEG_INF), axis=1)
    return (s.step < max_length) & ~jnp.all(best_live < worst_done)

  def body(s: _Beams) -> _Beams:
    return _beam_step(s, tokens_to_logits, eos_id=eos_id, alpha=alpha)

  return _best_hypotheses(jax.lax.while_loop(cond, body, init), beam_size, alpha)


def _initial_beams(
  cache: Cache, bos_id: int | Array, pad_id: int, b: int, k: int, length: int
) -> _Beams:
  """The state before the first step: B sequences of K empty beams, the cache repeated per beam."""
  # Only beam 0 starts alive; K identical copies would fill the beam with duplicates.
  start_logp = jnp.where(jnp.arange(k) == 0, 0.0, NEG_INF)
  return _Beams(
    step=jnp.int32(0),
    live_ids=jnp.full((b, k, length), pad_id, jnp.int32),
    live_logp=jnp.tile(start_logp, (b, 1)),
    prev=jnp.repeat(_first_tokens(bos_id, b)[:, None], k, axis=1),
    done_ids=jnp.full((b, k, length), pad_id, jnp.int32),
    done_scores=jnp.full((b, k), NEG_INF),
    done_flags=jnp.zeros((b, k), bool),
    cache=jax.tree.map(lambda x: jnp.repeat(x, k, axis=0), cache),
  )


def _beam_step(s: _Beams, tokens_to_logits: TokensToLogits, *, eos_id: int, alpha: float) -> _Beams:
  """One step: every live beam extended by every token, the 2K best candidates split into those
  ending in EOS (competing for the finished slots) and the K best others (the new live beams)."""
  b, k = s.live_logp.shape
  logits, cache = tokens_to_logits(s.prev.reshape(b * k), s.step, s.cache)
  vocab = logits.shape[-1]
  logp = jax.nn.log_softmax(logits.astype(jnp.float32)).reshape(b, k, vocab)
  cand_logp = (s.live_logp[:, :, None] + logp).reshape(b, k * vocab)  # [B, K*V]
  # 2K candidates leave K that do not end in EOS: each beam has only one EOS extension.
  top_logp, top = jax.lax.top_k(cand_logp, min(2 * k, k * vocab))  # [B, 2K]
  source, token = top // vocab, (top % vocab).astype(jnp.int32)
  seqs = jnp.take_along_axis(s.live_ids, source[:, :, None], axis=1)  # [B, 2K, L]
  seqs = seqs.at[:, :, s.step].set(token)
  ends = (token == eos_id) & jnp.isfinite(top_logp)

  live_logp, pick = jax.lax.top_k(jnp.where(ends, NEG_INF, top_logp), k)  # [B, K]
  beam = jnp.take_along_axis(source, pick, axis=1)  # [B, K]
  flat = (jnp.arange(b)[:, None] * k + beam).reshape(b * k)  # rows of the cache
  cache = jax.tree.map(lambda x: x[flat], cache)

  new_scores = jnp.where(ends, top_logp / length_penalty(s.step + 1, alpha), NEG_INF)
  all_scores = jnp.concatenate([s.done_scores, new_scores], axis=1)  # [B, 3K]
  done_scores, keep = jax.lax.top_k(all_scores, k)  # [B, K]
  all_ids = jnp.concatenate([s.done_ids, seqs], axis=1)  # [B, 3K, L]
  return _Beams(
    step=s.step + 1,
    live_ids=jnp.take_along_axis(seqs, pick[:, :, None], axis=1),
    live_logp=live_logp,
    prev=jnp.take_along_axis(token, pick, axis=1),
    done_ids=jnp.take_along_axis(all_ids, keep[:, :, None], axis=1),
    done_scores=done_scores,
    done_flags=jnp.take_along_axis(jnp.concatenate([s.done_flags, ends], 1), keep, axis=1),
    cache=cache,
  )


def _best_hypotheses(s: _Beams, k: int, alpha: float) -> tuple[Array, Array]:
  """The K best hypotheses of the final state and their scores: finished ones first, then live
  beams scored as if they ended at the last step."""
  scores = jnp.concatenate([s.done_scores, s.live_logp / length_penalty(s.step, alpha)], 1)
  flags = jnp.concatenate([s.done_flags, jnp.zeros_like(s.done_flags)], axis=1)  # [B, 2K]
  order = jnp.lexsort((-scores, ~flags), axis=-1)[:, :k]  # finished first, then by score
  ids = jnp.concatenate([s.done_ids, s.live_ids], axis=1)
  return (
    jnp.take_along_axis(ids, order[:, :, None], axis=1),
    jnp.take_along_axis(scores, order, axis=1),
  )
