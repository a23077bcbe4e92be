"""Checkpoint references, resolved once at the entry point into a typed `Source`.

    import sources
    source = sources.resolve('runs/smollm2')             # or 'SmolLM2-135M-Instruct', a folder,
    model = source.model()                               # a .gguf, WORKDIR/checkpoints/STEP
    decoder = sources.load_decoder('gemma-3-270m')       # a causal model and its tokenizer

- reference.py decides what a reference names (one sentence for one that names nothing);
- source.py reads its config and tokenizer (`resolve`), then its parameters when asked
  (`Source.model`, `Source.restore`, `Source.parameters`);
- decoder.py: a causal language model and its tokenizer, for prompts, studies and benchmarks.

A fine-tune's start is `resolve_init_from(config)`, whose parameters training/init_from.py
converts in one seam.
"""

from sources.decoder import Decoder, load_decoder, require_causal
from sources.reference import PRETRAINED, WORKDIR, Reference, parse, unknown
from sources.source import ModelShapes, Source, resolve

__all__ = [
  'PRETRAINED',
  'WORKDIR',
  'Decoder',
  'ModelShapes',
  'Reference',
  'Source',
  'load_decoder',
  'parse',
  'require_causal',
  'resolve',
  'resolve_init_from',
  'unknown',
]


def resolve_init_from(config) -> Source | None:
  """`config.init_from` resolved (its newest readable checkpoint, for a workdir), or None when
  it is ''."""
  if not config.init_from:
    return None
  return resolve(config.init_from, flag='config.init_from', newest=True)
