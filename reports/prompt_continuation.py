"""generate.py's work: a language model's workdir continues a researcher's prompt, printed as it
comes, then its speed.

The prompt is encoded as the tokenizer encodes any text (a pretrained tokenizer adds what the
checkpoint's own adds, e.g. Gemma's `<bos>`), or with `chat` as one user turn under the
checkpoint's chat template (`data.chat`). `models.generation.stream_prompt` then picks one token
at a time; the text printed is the decoded continuation so far, less what was printed before, so
a character split over several tokens appears once it is whole. The continuation stops at the
first special token (an end of text or of a turn: it is not text) or after `max_new_tokens`.
"""

import dataclasses
import sys
import time
from typing import TextIO

import jax

from attention import presses
from data.chat import chat_ids
from models import compression, generation
import sources


@dataclasses.dataclass(frozen=True)
class Request:
  """What generate.py was asked for (its flags)."""

  workdir: str
  prompt: str
  chat: bool = False
  max_new_tokens: int = 64
  temperature: float = 0.0
  top_k: int = 0
  top_p: float = 1.0
  seed: int = 0
  checkpoint: str = ''
  press: str = ''
  press_ratio: float = 0.5
  press_every: int = 0
  press_rerotate: bool = False


def prompt_ids(tokenizer, prompt: str, chat: bool) -> list[int]:
  """The ids the model reads: `prompt` encoded, or framed by the chat template."""
  return chat_ids(tokenizer, prompt) if chat else list(tokenizer.encode(prompt))


def check_request(request: Request, config, ids: list[int]) -> presses.Press | None:
  """The press asked for, resolved from its name (None: none); ValueError, one sentence naming
  the flag, for what the model cannot continue."""
  if not request.prompt.strip():
    raise ValueError('--prompt is empty; give the text to continue.')
  if not ids:
    raise ValueError(f'--prompt={request.prompt!r} encodes to no tokens.')
  press = presses.get_press(request.press) if request.press else None
  if press:  # what the press's settings alone refuse; the model's limits once it is built
    # The cache holds the prompt but its last token, decoding's first input.
    compression.check_settings(press, request.press_ratio, len(ids) - 1, request.press_every)
  if request.max_new_tokens < 1:
    raise ValueError(f'--max_new_tokens must be at least 1, got {request.max_new_tokens}.')
  limit = config.model.get('max_length')
  if limit and len(ids) + request.max_new_tokens > limit:
    raise ValueError(
      f'The prompt ({len(ids)} tokens) and --max_new_tokens={request.max_new_tokens} need '
      f"{len(ids) + request.max_new_tokens} positions, past the model's context of {limit} "
      '(config.model.max_length); shorten the prompt or ask for fewer tokens.'
    )
  return press


def continue_prompt(request: Request, out: TextIO = sys.stdout) -> dict:
  """Prints the continuation of `request.prompt` as it comes, then a line with its speed.

  Returns:
    `{'ids': the continuation's ids, 'text': its text, 'prompt_tokens', 'seconds_to_first',
    'tokens_per_second'}` (the rate over the tokens after the first, which carries the prompt's
    pass and the compiling).

  Raises:
    ValueError: the workdir is not a language model's, or a flag it cannot honour.
  """
  source = sources.require_causal(sources.resolve(request.workdir, checkpoint=request.checkpoint))
  tokenizer = source.tokenizer
  ids = prompt_ids(tokenizer, request.prompt, request.chat)
  press = check_request(request, source.config, ids)  # before the parameters are read
  stream = generation.stream_prompt(
    source.model(),
    [ids],
    max_length=request.max_new_tokens,
    rng=jax.random.key(request.seed),
    temperature=request.temperature,
    top_k=request.top_k,
    top_p=request.top_p,
    stop_ids=tuple(tokenizer.special_ids),
    press=(press, request.press_ratio) if press else None,
    press_every=request.press_every,
    press_rerotate=request.press_rerotate,
  )
  out.write(request.prompt if not request.chat else '')
  out.flush()
  # The continuation's text is what decoding the prompt with it adds to the prompt's: the
  # tokenizer decides the spaces between them. A chat reply is a turn of its own.
  context = [] if request.chat else ids
  before = tokenizer.decode(context)
  started = time.perf_counter()
  generated, shown, first = [], '', None
  for token in stream:
    generated.append(token)
    first = first if first is not None else time.perf_counter() - started
    whole = tokenizer.decode(context + generated)
    text = whole[len(before) :] if whole.startswith(before) else tokenizer.decode(generated)
    if text.startswith(shown) and not text.endswith('\ufffd'):  # whole characters only
      out.write(text[len(shown) :])
      out.flush()
      shown = text
  total = time.perf_counter() - started
  rest = len(generated) - 1
  rate = rest / (total - first) if rest and total > first else float('nan')
  pressed = ''
  if request.press:
    kept = presses.kept_count(len(ids) - 1, request.press_ratio)
    pressed = f'; {request.press} kept {kept} of its {len(ids) - 1} cached positions per head'
  out.write(
    f'\n[{len(generated)} tokens after a prompt of {len(ids)}{pressed}: first in {first:.2f} s '
    f'(reading the prompt and compiling), then {rate:.1f} tokens/s]\n'
  )
  return dict(
    ids=generated,
    text=shown,
    prompt_tokens=len(ids),
    seconds_to_first=first,
    tokens_per_second=rate,
  )
