"""A researcher's own prompt through a workdir: what each head does to it, and its attention.

  python prompt.py heads --workdir=runs/smollm2 --metric=logit_diff --target=" Mary" \\
      --versus=" John" --prompt="When Mary and John went to the store, John gave a drink to"
  python prompt.py heads ... --ablation=patch \\
      --source="When Alice and Bob went to the store, Carl gave a drink to"
  python prompt.py attribute --workdir=runs/smollm2 --prompt="..." --target=" Mary" --versus=" John"
  python prompt.py attention --workdir=runs/smollm2 --prompt="..." --layers=0,9,18,29
  python prompt.py attention --workdir=runs/default --prompt="three hundred and twelve"
  python prompt.py attention --workdir=runs/smollm2 --prompt="$(cat notes.txt)" --press=snapkv

heads: each head's output replaced (--ablation zero, mean over a --reference text, or patched
from a --source prompt of as many tokens), and the change in --metric: logprob (of --target
after the prompt), logit_diff (--target's logit less --versus's) or loss (over the prompt);
--heads=9.6,10.0 for some heads only. attribute: each head's direct share of --target's logit
(or of the difference with --versus), and the logit lens. heads and attribute read causal
language models. attention: the attention pictures and the explorer page of some layers
(--layers, default 4 evenly spaced; 'all') of a language model; on a run of translation,
classification or question answering, the prompt read as one of its examples (a source
sentence; a text; a story whose last sentence is the question), predicted, and drawn as eval.py
draws an example (--layers: the one layer drawn). With --press (and --press_ratio), attention's
page also shows which tokens each key/value head of a causal language model keeps under that
KV-cache press. Targets are single tokens (' Mary', its space included). Files go to --out
(default WORKDIR/prompt/); a refused command writes nothing. docs/interventions.md has the
walk-through.
"""

from training import allocator

if __name__ == '__main__':
  allocator.use_mimalloc()  # first: the allocator is chosen at process start, before JAX loads

from absl import app, flags, logging

from interpret import effects
from reports import prompt_commands
import training

_WORKDIR = flags.DEFINE_string('workdir', None, 'A training or converted workdir.')
_PROMPT = flags.DEFINE_string('prompt', None, 'The text the model reads.')
_OUT = flags.DEFINE_string('out', '', 'Where the files go (default WORKDIR/prompt/).')
_CHECKPOINT = flags.DEFINE_string('checkpoint', '', "'best', 'latest' or a step.")
_METRIC = flags.DEFINE_enum('metric', 'logprob', effects.METRICS, 'heads: what changes.')
_TARGET = flags.DEFINE_string('target', '', 'The token after the prompt (one token).')
_VERSUS = flags.DEFINE_string('versus', '', 'logit_diff: the token compared with --target.')
_ABLATION = flags.DEFINE_enum('ablation', 'zero', effects.ABLATIONS, 'heads: replaced by.')
_SOURCE = flags.DEFINE_string('source', '', '--ablation=patch: the prompt heads come from.')
_REFERENCE = flags.DEFINE_string('reference', '', '--ablation=mean: the text of the means.')
_HEADS = flags.DEFINE_string('heads', '', 'heads: LAYER.HEAD,... (default every head).')
_LAYERS = flags.DEFINE_string(
  'layers', '', "attention: L,L,... or 'all' (default: 4, or the last)."
)
_PRESS = flags.DEFINE_string(
  'press', '', 'attention: also show what this press keeps of the cache (attention.PRESSES).'
)
_PRESS_RATIO = flags.DEFINE_float('press_ratio', 0.5, 'With --press: the share dropped, [0, 1).')
_CACHE = flags.DEFINE_string(
  'compilation_cache', training.DEFAULT_COMPILATION_CACHE, training.COMPILATION_CACHE_HELP
)
flags.mark_flags_as_required(['workdir', 'prompt'])


def main(argv):
  commands = ', '.join(prompt_commands.COMMANDS)
  if len(argv) != 2 or argv[1] not in prompt_commands.COMMANDS:
    raise app.UsageError(f'Give one command, one of {commands}: python prompt.py heads ...')
  logging.set_verbosity(logging.WARNING)  # its output is what it prints
  training.quiet_library_logs()
  training.enable_compilation_cache(_CACHE.value)
  request = prompt_commands.Request(
    command=argv[1],
    workdir=_WORKDIR.value,
    prompt=_PROMPT.value,
    out=_OUT.value,
    checkpoint=_CHECKPOINT.value,
    metric=_METRIC.value,
    target=_TARGET.value,
    versus=_VERSUS.value,
    ablation=_ABLATION.value,
    source=_SOURCE.value,
    reference=_REFERENCE.value,
    heads=_HEADS.value,
    layers=_LAYERS.value,
    press=_PRESS.value,
    press_ratio=_PRESS_RATIO.value,
  )
  training.failures.run(f'prompt.py {argv[1]}', lambda: prompt_commands.COMMANDS[argv[1]](request))


if __name__ == '__main__':
  app.run(main, flags_parser=training.failures.parse_flags)
