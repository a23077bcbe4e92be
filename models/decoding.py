"""Autoregressive decoding for any Attend model: greedy and beam search, each one `lax.while_loop`.

The searches see a model only through a callback and its cache:

    tokens_to_logits(ids [B'], step, cache) -> (logits [B', V], new_cache)

where `ids` are the previous tokens (BOS at step 0), `step` is the 0-based position of the token
being predicted and every cache leaf leads with the batch axis B'. Beam search folds beams into that
axis (B' = B * beam_size, beam index fastest) and reorders the cache by gathering along it.

Outputs hold the generated tokens (no BOS), EOS included, padding after EOS. The special ids
(`bos_id`, `eos_id`, `pad_id`) are arguments, the tokenizer's: the searches hard-code none.
"""

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

Array = jax.Array
Cache = Any
TokensToLogits = Callable[[Array, Array, Cache], tuple[Array, Cache]]
NEG_INF = float("-inf")


def _check_sizes(batch_size: int, max_length: int, beam_size: int = 1) -> None:
  """Raises ValueError for sizes a search cannot run with."""
  for field, value in (("batch_size", batch_size), ("max_length", max_length),
                       ("beam_size", beam_size)):
    if not isinstance(value, int) or value < 1:
      raise ValueError(f"Decoding: {field} must be an integer >= 1, got {value!r}.")


def length_penalty(length: Array | int, alpha: float) -> Array:
  """GNMT length penalty `((5 + length) / 6) ** alpha` (Wu et al. 2016); scores divide by it."""
  return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


def greedy_search(tokens_to_logits: TokensToLogits, cache: Cache, *, batch_size: int,
                  max_length: int, bos_id: int, eos_id: int, pad_id: int) -> Array:
  """Picks the most likely token at every step; stops once every sequence has produced EOS.

  Args:
    tokens_to_logits: the model callback (see the module docstring).
    cache: the model's decoding cache for `batch_size` sequences.
    batch_size: B.
    max_length: the number of tokens to generate at most.
    bos_id: the first input token.
    eos_id: the end token.
    pad_id: fills each row after its EOS.

  Returns:
    ids int32 [B, max_length].
  """
  _check_sizes(batch_size, max_length)

  def cond(carry):
    step, _, _, finished, _ = carry
    return (step < max_length) & ~jnp.all(finished)

  def body(carry):
    step, prev, out, finished, cache = carry
    logits, cache = tokens_to_logits(prev, step, cache)
    token = jnp.where(finished, pad_id, jnp.argmax(logits, axis=-1).astype(jnp.int32))  # [B]
    out = out.at[:, step].set(token)
    return step + 1, token, out, finished | (token == eos_id), cache

  init = (jnp.int32(0), jnp.full((batch_size,), bos_id, jnp.int32),
          jnp.full((batch_size, max_length), pad_id, jnp.int32), jnp.zeros((batch_size,), bool),
          cache)
  return jax.lax.while_loop(cond, body, init)[2]


class _Beams(NamedTuple):
  """Beam search state; [B, K] per hypothesis, ids [B, K, max_length]."""
  step: Array
  live_ids: Array     # hypotheses still growing; padding beyond `step`
  live_logp: Array    # their log-probabilities
  prev: Array         # their last tokens, the next inputs
  done_ids: Array     # the best hypotheses that ended with EOS
  done_scores: Array  # their length-penalised scores (-inf in empty slots)
  done_flags: Array   # which slots of `done_*` are filled
  cache: Cache        # leaves [B * K, ...]


def beam_search(tokens_to_logits: TokensToLogits, cache: Cache, *, batch_size: int,
                beam_size: int, max_length: int, bos_id: int, eos_id: int, pad_id: int,
                alpha: float = 0.6) -> tuple[Array, Array]:
  """Beam search with the GNMT length penalty.

  Each step extends the live beams by every token and keeps the 2K best candidates: those ending
  in EOS compete, scored `log p / length_penalty(length)` (length counts EOS), for the K finished
  slots; the K best others stay live. The loop stops early once every sequence has K finished
  hypotheses that no live beam can beat: a live beam's log-probability only falls, so its best
  possible score is `log p / max(length_penalty)`. A sequence that never finishes K hypotheses
  fills the remaining slots with its live beams, scored as if they ended at the last step;
  finished ones rank first.

  Args:
    tokens_to_logits: the model callback (see the module docstring).
    cache: the model's decoding cache for `batch_size` sequences; leaves are repeated per beam.
    batch_size: B.
    beam_size: K.
    max_length: the number of tokens to generate at most.
    alpha: length-penalty exponent; 0 ranks by log-probability alone.
    bos_id: the first input token.
    eos_id: the end token.
    pad_id: fills each hypothesis after its EOS.

  Returns:
    `(ids int32 [B, K, max_length], scores float32 [B, K])`, best first.
  """
  _check_sizes(batch_size, max_length, beam_size)
  b, k, length = batch_size, beam_size, max_length
  # Only beam 0 starts alive; K identical copies would fill the beam with duplicates.
  start_logp = jnp.where(jnp.arange(k) == 0, 0.0, NEG_INF)
  init = _Beams(
      step=jnp.int32(0), live_ids=jnp.full((b, k, length), pad_id, jnp.int32),
      live_logp=jnp.tile(start_logp, (b, 1)), prev=jnp.full((b, k), bos_id, jnp.int32),
      done_ids=jnp.full((b, k, length), pad_id, jnp.int32), done_scores=jnp.full((b, k), NEG_INF),
      done_flags=jnp.zeros((b, k), bool),
      cache=jax.tree.map(lambda x: jnp.repeat(x, k, axis=0), cache))
  best_penalty = jnp.maximum(length_penalty(1, alpha), length_penalty(length, alpha))

  def cond(s: _Beams) -> Array:
    best_live = jnp.max(s.live_logp, axis=1) / best_penalty                   # [B]
    worst_done = jnp.min(jnp.where(s.done_flags, s.done_scores, NEG_INF), axis=1)
    return (s.step < length) & ~jnp.all(best_live < worst_done)

  def body(s: _Beams) -> _Beams:
    logits, cache = tokens_to_logits(s.prev.reshape(b * k), s.step, s.cache)
    vocab = logits.shape[-1]
    logp = jax.nn.log_softmax(logits.astype(jnp.float32)).reshape(b, k, vocab)
    cand_logp = (s.live_logp[:, :, None] + logp).reshape(b, k * vocab)       # [B, K*V]
    # 2K candidates leave K that do not end in EOS: each beam has only one EOS extension.
    top_logp, top = jax.lax.top_k(cand_logp, min(2 * k, k * vocab))           # [B, 2K]
    source, token = top // vocab, (top % vocab).astype(jnp.int32)
    seqs = jnp.take_along_axis(s.live_ids, source[:, :, None], axis=1)       # [B, 2K, L]
    seqs = seqs.at[:, :, s.step].set(token)
    ends = (token == eos_id) & jnp.isfinite(top_logp)

    live_logp, pick = jax.lax.top_k(jnp.where(ends, NEG_INF, top_logp), k)   # [B, K]
    beam = jnp.take_along_axis(source, pick, axis=1)                          # [B, K]
    flat = (jnp.arange(b)[:, None] * k + beam).reshape(b * k)                 # rows of the cache
    cache = jax.tree.map(lambda x: x[flat], cache)

    new_scores = jnp.where(ends, top_logp / length_penalty(s.step + 1, alpha), NEG_INF)
    all_scores = jnp.concatenate([s.done_scores, new_scores], axis=1)         # [B, 3K]
    done_scores, keep = jax.lax.top_k(all_scores, k)                          # [B, K]
    all_ids = jnp.concatenate([s.done_ids, seqs], axis=1)                     # [B, 3K, L]
    return _Beams(
        step=s.step + 1, live_ids=jnp.take_along_axis(seqs, pick[:, :, None], axis=1),
        live_logp=live_logp, prev=jnp.take_along_axis(token, pick, axis=1),
        done_ids=jnp.take_along_axis(all_ids, keep[:, :, None], axis=1), done_scores=done_scores,
        done_flags=jnp.take_along_axis(jnp.concatenate([s.done_flags, ends], 1), keep, axis=1),
        cache=cache)

  s = jax.lax.while_loop(cond, body, init)
  scores = jnp.concatenate([s.done_scores, s.live_logp / length_penalty(s.step, alpha)], 1)
  flags = jnp.concatenate([s.done_flags, jnp.zeros_like(s.done_flags)], axis=1)  # [B, 2K]
  order = jnp.lexsort((-scores, ~flags), axis=-1)[:, :k]  # finished first, then by score
  ids = jnp.concatenate([s.done_ids, s.live_ids], axis=1)
  return (jnp.take_along_axis(ids, order[:, :, None], axis=1),
          jnp.take_along_axis(scores, order, axis=1))


@functools.partial(jax.jit, static_argnums=0,
                   static_argnames=("max_length", "beam_size", "alpha", "bos_id", "eos_id",
                                    "pad_id"))
def _generate(graphdef: nnx.GraphDef, state: nnx.State, inputs: Array, *, max_length: int,
              beam_size: int, alpha: float, bos_id: int, eos_id: int, pad_id: int) -> Array:
  """The compiled body of `generate`; jax.jit caches it per graphdef and static settings."""
  model = nnx.merge(graphdef, state)
  cache = model.init_decode_cache(inputs, max_length)
  kwargs = dict(batch_size=inputs.shape[0], max_length=max_length, bos_id=bos_id, eos_id=eos_id,
                pad_id=pad_id)
  if beam_size == 1:
    return greedy_search(model.decode_step, cache, **kwargs)
  ids, _ = beam_search(model.decode_step, cache, beam_size=beam_size, alpha=alpha, **kwargs)
  return ids[:, 0]


def generate(model: nnx.Module, inputs: Array, *, max_length: int, bos_id: int, eos_id: int,
             pad_id: int, beam_size: int = 1, alpha: float = 0.6) -> Array:
  """Decodes `inputs` with any model that has `init_decode_cache` and `decode_step`.

  Args:
    model: an NNX model with the common decoding interface.
    inputs: source ids int32 [B, S].
    max_length: the number of tokens to generate at most.
    beam_size: 1 = greedy search, otherwise the best hypothesis of a beam search.
    alpha: length-penalty exponent for beam search.
    bos_id: the first decoder input (the tokenizer's BOS id).
    eos_id: the end token (the tokenizer's EOS id).
    pad_id: fills each row after its EOS (the tokenizer's padding id).

  Returns:
    ids int32 [B, max_length]: generated tokens, EOS included, `pad_id` after EOS.
  """
  inputs = jnp.asarray(inputs)
  if inputs.ndim != 2:
    raise ValueError(f"generate: inputs must be int ids [B, S], got shape {inputs.shape}.")
  _check_sizes(inputs.shape[0], max_length, beam_size)
  graphdef, state = nnx.split(model)
  return _generate(graphdef, state, inputs, max_length=max_length, beam_size=beam_size,
                   alpha=float(alpha), bos_id=bos_id, eos_id=eos_id, pad_id=pad_id)
