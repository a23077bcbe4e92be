"""Decoding a model whole: its cache built from the inputs, then one search of `models.decoding`.

`generate` decodes what an encoder-decoder or a captioner reads (source ids, images) with greedy
or beam search; `continue_prompt` continues a language model's prompts by sampling, and
`stream_prompt` continues one prompt the same way a token at a time, handing each token out as
it comes (generate.py prints them). All see the model only through its decoding interface
(`models.interfaces`):

    init_decode_cache(inputs, max_length) -> cache
    decode_step(ids [B'], step, cache) -> (logits [B', V], new_cache)

and each is compiled once per model structure (its NNX graphdef) and static settings, so calling
it again with new parameters or inputs of the same shapes reuses the compiled loop.
"""

import functools
from typing import Iterator

from flax import nnx
import jax
import jax.numpy as jnp

from attention.presses import Press, kept_count
from models import compression
from models.decoding import (
  beam_search,
  check_sizes,
  greedy_search,
  sample_search,
  sample_tokens,
)
from models.sampling import check_sampling

Array = jax.Array


@functools.partial(
  jax.jit,
  static_argnums=0,
  static_argnames=('max_length', 'beam_size', 'alpha', 'bos_id', 'eos_id', 'pad_id'),
)
def _generate(
  graphdef: nnx.GraphDef,
  state: nnx.State,
  inputs: Array,
  *,
  max_length: int,
  beam_size: int,
  alpha: float,
  bos_id: int,
  eos_id: int,
  pad_id: int,
) -> Array:
  """The compiled body of `generate`; jax.jit caches it per graphdef and static settings."""
  model = nnx.merge(graphdef, state)
  cache = model.init_decode_cache(inputs, max_length)
  kwargs = dict(
    batch_size=inputs.shape[0], max_length=max_length, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id
  )
  if beam_size == 1:
    return greedy_search(model.decode_step, cache, **kwargs)
  ids, _ = beam_search(model.decode_step, cache, beam_size=beam_size, alpha=alpha, **kwargs)
  return ids[:, 0]


def generate(
  model: nnx.Module,
  inputs: Array,
  *,
  max_length: int,
  bos_id: int,
  eos_id: int,
  pad_id: int,
  beam_size: int = 1,
  alpha: float = 0.6,
) -> Array:
  """Decodes `inputs` with any model that has `init_decode_cache` and `decode_step`.

  Args:
    model: an NNX model with the common decoding interface.
    inputs: what the model's `init_decode_cache` encodes, batch on axis 0: source ids int32
      [B, S] for translation, images float [B, H, W, C] for captioning. The model checks the rest.
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
  if inputs.ndim < 2:
    raise ValueError(
      f'generate: inputs must be a batch of source ids [B, S] or images '
      f'[B, H, W, C], got shape {inputs.shape}.'
    )
  check_sizes(inputs.shape[0], max_length, beam_size)
  graphdef, state = nnx.split(model)
  return _generate(
    graphdef,
    state,
    inputs,
    max_length=max_length,
    beam_size=beam_size,
    alpha=float(alpha),
    bos_id=bos_id,
    eos_id=eos_id,
    pad_id=pad_id,
  )


@functools.partial(
  jax.jit,
  static_argnums=0,
  static_argnames=('max_length', 'temperature', 'top_k', 'top_p', 'eos_id', 'pad_id', 'press'),
)
def _continue(
  graphdef: nnx.GraphDef,
  state: nnx.State,
  prompt: Array,
  rng: Array,
  *,
  max_length: int,
  temperature: float,
  top_k: int,
  top_p: float,
  eos_id: int,
  pad_id: int,
  press: tuple[Press, float] | None = None,
) -> Array:
  """The compiled body of `continue_prompt`; jax.jit caches it per graphdef and static settings."""
  model = nnx.merge(graphdef, state)
  cache = compression.pressed_prefill(model, prompt, max_length, press)
  # The cache holds positions 0..P-2; the prompt's last token is the first input, at step 0.
  return sample_search(
    model.decode_step,
    cache,
    batch_size=prompt.shape[0],
    max_length=max_length,
    bos_id=prompt[:, -1],
    eos_id=eos_id,
    pad_id=pad_id,
    rng=rng,
    temperature=temperature,
    top_k=top_k,
    top_p=top_p,
  )


def continue_prompt(
  model: nnx.Module,
  prompt: Array,
  *,
  max_length: int,
  rng: Array,
  temperature: float = 1.0,
  top_k: int = 0,
  top_p: float = 1.0,
  eos_id: int = -1,
  pad_id: int = 0,
  press: tuple[Press, float] | None = None,
) -> Array:
  """Continues each prompt with a language model by sampling (temperature 0: greedy search).

  The model's `init_decode_cache(prompt, max_length)` reads positions 0..P-2 of the prompt and
  `decode_step(ids, step, cache)` the token at position P-1+step, so the search starts from the
  prompt's last token at step 0.

  Args:
    model: an NNX language model with `init_decode_cache` and `decode_step`.
    prompt: ids int32 [B, P], P >= 1, every row P tokens long.
    max_length: the number of tokens to generate at most.
    rng: a JAX PRNG key; the same key gives the same continuation.
    temperature: divides the logits; 0 is greedy search (see `sample_search`).
    top_k: keep only the k most likely tokens; 0 keeps all (see `filter_logits`).
    top_p: keep only the nucleus of this probability mass; 1 keeps all (see `filter_logits`).
    eos_id: the end token; the default -1 never occurs, so every row gets `max_length` tokens.
    pad_id: fills each row after its EOS.
    press: `(press, ratio)`: the prompts' cache compressed by that press first (`stream_prompt`),
      its settings checked here: eval.py's continuations know their prompt's length only here.

  Returns:
    ids int32 [B, max_length]: the generated tokens after the prompt, `pad_id` after any EOS.
  """
  prompt = jnp.asarray(prompt)
  if prompt.ndim != 2 or prompt.shape[1] < 1:
    raise ValueError(
      f'continue_prompt: prompt must be int ids [B, P] with P >= 1, got shape {prompt.shape}.'
    )
  check_sizes(prompt.shape[0], max_length)
  check_sampling(top_k, top_p, temperature)
  if press is not None:
    compression.check_settings(press[0], press[1], prompt.shape[1] - 1)
    compression.check_press(model, press[0], prompt.shape[1] - 1)
  graphdef, state = nnx.split(model)
  return _continue(
    graphdef,
    state,
    prompt,
    rng,
    max_length=max_length,
    temperature=float(temperature),
    top_k=int(top_k),
    top_p=float(top_p),
    eos_id=eos_id,
    pad_id=pad_id,
    press=press,
  )


@functools.partial(jax.jit, static_argnums=0, static_argnames=('max_length', 'press', 'rerotate'))
def _prefill(
  graphdef: nnx.GraphDef,
  state: nnx.State,
  prompt: Array,
  *,
  max_length: int,
  press: tuple[Press, float] | None = None,
  rerotate: bool = False,
):
  """`stream_prompt`'s cache, the prompt's positions 0..P-2 read in one pass (then pressed to a
  budget: `models.compression`), and its last token: both placed as `_next_token` places its
  outputs, so that its first call compiles the program every later call runs (an eager slice of
  the prompt would be placed otherwise: a second compilation, 2.4 s for SmolLM2)."""
  model = nnx.merge(graphdef, state)
  cache = compression.pressed_prefill(model, prompt, max_length, press, rerotate)
  return cache, prompt[:, -1]


@functools.partial(
  jax.jit, static_argnums=0, static_argnames=('press', 'count', 'room'), donate_argnames='cache'
)
def _press_again(graphdef: nnx.GraphDef, state: nnx.State, cache, *, press, count, room):
  """`stream_prompt`'s compression while decoding (`compression.press_again`)."""
  return compression.press_again(nnx.merge(graphdef, state), cache, press, count, room)


@functools.partial(
  jax.jit,
  static_argnums=0,
  static_argnames=('temperature', 'top_k', 'top_p'),
  donate_argnames='cache',  # the K/V buffers are updated in place, not copied every token
)
def _next_token(
  graphdef: nnx.GraphDef,
  state: nnx.State,
  token: Array,
  step: Array,
  cache,
  rng: Array,
  *,
  temperature: float,
  top_k: int,
  top_p: float,
):
  """`stream_prompt`'s step: the token after `token [B]` at `step`, and the cache after it."""
  logits, cache = nnx.merge(graphdef, state).decode_step(token, step, cache)
  chosen = sample_tokens(logits, rng, step, temperature=temperature, top_k=top_k, top_p=top_p)
  return chosen.astype(jnp.int32), cache


def stream_prompt(
  model: nnx.Module,
  prompt: Array,
  *,
  max_length: int,
  rng: Array,
  temperature: float = 1.0,
  top_k: int = 0,
  top_p: float = 1.0,
  stop_ids: tuple[int, ...] = (),
  press: tuple[Press, float] | None = None,
  press_every: int = 0,
  press_rerotate: bool = False,
) -> Iterator[int]:
  """Continues one prompt a token at a time, yielding each token id as soon as it is chosen.

  The tokens are `continue_prompt`'s for the same arguments (the same key draws the same
  tokens); the prompt is read in one pass, then each token is one compiled step. Stops after
  `max_length` tokens or after yielding one of `stop_ids` (an end of text or of a turn).

  Args:
    model: an NNX language model with `init_decode_cache` and `decode_step`.
    prompt: ids int32 `[1, P]`, P >= 1.
    max_length: the number of tokens to generate at most.
    rng: a JAX PRNG key.
    temperature, top_k, top_p: as `continue_prompt`'s.
    stop_ids: token ids that end the continuation (yielded, then it stops).
    press: `(press, ratio)`, an `attention.Press` whose settings (with `press_every`) the entry
      point checked (`compression.check_settings`): the prompt's cache is compressed to
      `int(P' * (1 - ratio))` positions per head (P' = P - 1, what the prefill read) before the
      first token (`models.compression`); None keeps every position.
    press_every: with a press that scores keys alone, compress back to that budget every this
      many tokens (`compression.press_again`): the cache then holds `budget + press_every` slots
      per head however long the continuation. 0: only after the prompt.
    press_rerotate: move the kept keys to positions 0 .. M-1 and decode on from M
      (`compression.rerotation`); False keeps them where they were, as kvpress does by default.
  """
  prompt = jnp.asarray(prompt, jnp.int32)
  if prompt.ndim != 2 or prompt.shape[0] != 1 or prompt.shape[1] < 1:
    raise ValueError(
      f'stream_prompt: prompt must be int ids [1, P] with P >= 1, got shape {prompt.shape}.'
    )
  check_sizes(1, max_length)
  check_sampling(top_k, top_p, temperature)
  if press is not None:
    compression.check_press(model, press[0], prompt.shape[1] - 1)
    if press_rerotate:
      if press_every:
        raise ValueError("press_rerotate moves the prompt's kept keys once; not with press_every.")
      compression.rerotation(model, press[0])  # its refusals, before the prefill
  room = press_every if press is not None and press_every else max_length
  graphdef, state = nnx.split(model)
  cache, token = _prefill(
    graphdef, state, prompt, max_length=room, press=press, rerotate=press_rerotate
  )
  settings = dict(temperature=float(temperature), top_k=int(top_k), top_p=float(top_p))
  for step in range(max_length):
    if step and room < max_length and step % room == 0:  # the room is full: press again
      count = kept_count(prompt.shape[1] - 1, press[1])
      cache = _press_again(graphdef, state, cache, press=press[0], count=count, room=room)
    token, cache = _next_token(graphdef, state, token, jnp.int32(step), cache, rng, **settings)
    chosen = int(token[0])
    yield chosen
    if chosen in stop_ids:
      return
