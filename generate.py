"""Continues a prompt with a language model's workdir, printing the tokens as they come.

  python generate.py --workdir=runs/smollm2 --prompt="The capital of France is"
  python generate.py --workdir=runs/smollm2 --chat --prompt="What does an attention head do?"
  python generate.py --workdir=runs/gpt_text --prompt="To be" --temperature=0.8 --top_p=0.9
  python generate.py --workdir=runs/smollm2 --prompt="$(cat notes.txt) Summary:" --press=snapkv

Any causal language model's workdir: a converted checkpoint (convert.py) or a trained run. Greedy
by default (--temperature=0); a temperature samples, filtered by --top_k and --top_p, with
--seed. --chat frames the prompt as one user turn under the checkpoint's chat template (instruct
models). It stops at the first special token (an end of text or of a turn) or after
--max_new_tokens, then prints the time to the first token and the tokens/s after it. --press
compresses the prompt's key/value cache before the first token (KV-cache compression: a press of
attention.PRESSES drops --press_ratio of each head's cached positions), and with --press_every=N
again every N tokens. Reads the workdir only.
"""

from training import allocator

if __name__ == '__main__':
  allocator.use_mimalloc()  # first: the allocator is chosen at process start, before JAX loads

from absl import app, flags, logging

from reports import prompt_continuation
import training

_WORKDIR = flags.DEFINE_string('workdir', None, "A language model's workdir.")
_PROMPT = flags.DEFINE_string('prompt', None, 'The text to continue.')
_CHAT = flags.DEFINE_bool('chat', False, "Frame the prompt with the checkpoint's chat template.")
_MAX_NEW = flags.DEFINE_integer('max_new_tokens', 64, 'Tokens to generate at most.')
_TEMPERATURE = flags.DEFINE_float('temperature', 0.0, '0 = greedy; else sample at it.')
_TOP_K = flags.DEFINE_integer('top_k', 0, 'Sample among the k most likely tokens (0 = all).')
_TOP_P = flags.DEFINE_float('top_p', 1.0, 'Sample within this probability nucleus (1 = all).')
_SEED = flags.DEFINE_integer('seed', 0, 'The sampling key; the same seed, the same tokens.')
_PRESS = flags.DEFINE_string(
  'press', '', "Compress the prompt's key/value cache with this press (attention.PRESSES)."
)
_PRESS_RATIO = flags.DEFINE_float(
  'press_ratio', 0.5, 'With --press: the share of cached positions dropped, in [0, 1).'
)
_PRESS_EVERY = flags.DEFINE_integer(
  'press_every',
  0,
  'With --press (one that scores keys alone): compress again every this many tokens, so a long '
  'continuation runs in fixed memory; 0 = only the prompt.',
)
_PRESS_REROTATE = flags.DEFINE_bool(
  'press_rerotate',
  False,
  "With --press: move the kept keys to positions 0..M-1 and go on from M (kvpress's "
  'KeyRerotationPress); by default they stay at their positions.',
)
_CHECKPOINT = flags.DEFINE_string(
  'checkpoint', '', "'best', 'latest' or a step (default: the best, else the latest)."
)
_CACHE = flags.DEFINE_string(
  'compilation_cache', training.DEFAULT_COMPILATION_CACHE, training.COMPILATION_CACHE_HELP
)
flags.mark_flags_as_required(['workdir', 'prompt'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.WARNING)  # the continuation is the output
  training.quiet_library_logs()
  training.enable_compilation_cache(_CACHE.value)
  request = prompt_continuation.Request(
    workdir=_WORKDIR.value,
    prompt=_PROMPT.value,
    chat=_CHAT.value,
    max_new_tokens=_MAX_NEW.value,
    temperature=_TEMPERATURE.value,
    top_k=_TOP_K.value,
    top_p=_TOP_P.value,
    seed=_SEED.value,
    checkpoint=_CHECKPOINT.value,
    press=_PRESS.value,
    press_ratio=_PRESS_RATIO.value,
    press_every=_PRESS_EVERY.value,
    press_rerotate=_PRESS_REROTATE.value,
  )
  training.failures.run('generate.py', lambda: prompt_continuation.continue_prompt(request))


if __name__ == '__main__':
  app.run(main, flags_parser=training.failures.parse_flags)
