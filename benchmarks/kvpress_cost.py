"""The kvpress side of benchmarks/press_bench.py: what a kvpress press costs and saves on
transformers' SmolLM2, timed as press_bench times Attend.

It runs in kvpress's own environment (`make kvpress`) and imports neither JAX nor Attend's
packages, only the standard library, torch, transformers, kvpress and benchmarks/kvpress_peer.py
(the same GGUF read and saved as a float32 folder once, the same presses):

    .venv-kvpress/bin/python -m benchmarks.kvpress_cost --job=JOB.json --out=PEER.json

(`press_bench --peer` writes the job and starts it.) The job holds the prompt's token ids as
Attend read them (the context, then decoding's first token), the presses, the ratio, the press
whose cache decoding reads, the greedy steps and the order of turns (`benchmarks.timing.order`,
a Williams design, computed on Attend's side so that both sides take their turns alike).

The protocol is `benchmarks.timing.compare`'s with one call per turn, in torch and
`time.perf_counter`: one untimed call of each side, then the job's turns. Prefill is kvpress's
pipeline's: the base model without its head over the context into a fresh `DynamicCache`, alone
or under `with press(model):`. Decoding is the pipeline's `generate_answer` loop (one token at
its position, the logits' argmax; no EOS stop) for `tokens` steps on a fresh full cache and on a
fresh pressed one, its prefill not timed. Bytes: every key and value tensor the cache holds.
"""

import contextlib
from importlib import metadata
import os
import time

import torch
import transformers

from benchmarks import kvpress_peer


def cache_bytes(cache: transformers.DynamicCache) -> int:
  """The bytes of every key and value tensor `cache` holds."""
  return sum(
    tensor.numel() * tensor.element_size()
    for layer in cache.layers
    for tensor in (layer.keys, layer.values)
  )


def prefill(model, context: torch.Tensor, press=None) -> transformers.DynamicCache:
  """kvpress's pipeline's prefill: the model without its head over `context` `[1, S]`, into a
  fresh cache, under `press` (None: kept whole)."""
  cache = transformers.DynamicCache()
  with torch.no_grad(), press(model) if press is not None else contextlib.nullcontext():
    model.model(input_ids=context, past_key_values=cache)
  return cache


def decode(model, cache, token: int, position: int, tokens: int) -> list[int]:
  """`tokens` greedy steps from `token` at `position` on `cache` (`generate_answer`'s loop)."""
  out, current = [], torch.tensor([[token]])
  with torch.no_grad():
    for step in range(tokens):
      logits = model(
        input_ids=current, past_key_values=cache, position_ids=torch.tensor([[position + step]])
      ).logits
      current = logits[:, -1:].argmax(-1)
      out.append(int(current))
  return out


def run(job: dict) -> dict:
  """The job's prefill turns and decoding turns (module docstring) -> seconds, bytes, tokens/s."""
  torch.manual_seed(0)
  torch.set_num_threads(os.cpu_count())  # every core, as `machine.torch_on_every_core`
  transformers.logging.set_verbosity_error()
  transformers.logging.disable_progress_bar()
  kvpress_peer.saved_model(job['gguf'], job['folder'])
  model = transformers.AutoModelForCausalLM.from_pretrained(
    job['folder'], dtype=torch.float32, attn_implementation='sdpa'
  ).eval()
  context = torch.tensor([job['context_ids']])
  presses = {name: kvpress_peer.PRESSES[name] for name in job['presses']}
  refused = {name: attention for name, (_, attention) in presses.items() if attention != 'sdpa'}
  if refused:
    raise ValueError(f'The cost is timed under sdpa attention; {refused} need another.')
  sides = {'prefill': lambda: prefill(model, context)}
  for name, (make, _) in presses.items():
    sides[name] = lambda make=make: prefill(model, context, make(job['ratio']))
  warmup_s, caches = {}, {}
  for name, side in sides.items():
    start = time.perf_counter()
    caches[name] = side()
    warmup_s[name] = time.perf_counter() - start
  turns = {name: [] for name in sides}
  for name in job['prefill_order']:
    start = time.perf_counter()
    sides[name]()
    turns[name].append(time.perf_counter() - start)
  kept = {name: [layer.keys.shape[2] for layer in cache.layers] for name, cache in caches.items()}
  bytes_ = {name: cache_bytes(cache) for name, cache in caches.items()}
  del caches

  fresh = {'full': sides['prefill'], 'pressed': sides[job['decode']]}
  length, token, steps = context.shape[1], job['token'], job['tokens']
  greedy = {
    side: decode(model, fresh[side](), token, length, steps) for side in ('pressed', 'full')
  }
  rates = {side: [] for side in fresh}
  for side in job['decode_order']:
    cache = fresh[side]()
    start = time.perf_counter()
    decode(model, cache, token, length, steps)
    rates[side].append(steps / (time.perf_counter() - start))
  return dict(
    versions=dict(
      kvpress=metadata.version('kvpress'),
      transformers=transformers.__version__,
      torch=torch.__version__,
    ),
    threads=torch.get_num_threads(),
    attention='sdpa',
    turns=turns,
    warmup_s=warmup_s,
    cache_bytes=bytes_,
    kept_per_layer=kept,
    tokens_per_s=rates,
    greedy=greedy,
  )


def main(argv: list[str] | None = None) -> None:
  kvpress_peer.serve(run, argv, __doc__.split('\n')[0], 'press_bench')


if __name__ == '__main__':
  main()
