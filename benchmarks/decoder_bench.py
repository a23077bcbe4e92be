"""A converted decoder's forward pass and cached greedy decoding against Hugging Face transformers
on CPU torch, same run.

    python -m benchmarks.decoder_bench                        # llama, tiny and medium
    python -m benchmarks.decoder_bench --model_type=gpt2 --sizes=medium --json=bench.json

For each size a random checkpoint is built with transformers (seeded `from_config`; nothing is
downloaded), saved, and converted by `models.pretrained_decoders`: both sides hold the same
weights. Forward: the logits of `--batch` rows of `--tokens` random ids (Attend's `token_logits`
under `jax.jit`, transformers' model under `torch.inference_mode`, SDPA attention). Decoding:
`--new_tokens` greedy tokens after a `--prompt`-token prompt (Attend's `continue_prompt`, one
compiled loop over its K/V cache; transformers' `generate(do_sample=False)` with its cache).
Times are medians over `--repeats` turns, the two sides alternating (`benchmarks.turns`), of the
median of `--calls` calls back to back in each turn; `ratio` is torch / Attend (> 1: Attend is
faster). The greedy tokens of the two are compared too.
"""

from training import allocator

if __name__ == '__main__':
  allocator.use_mimalloc()  # first: the allocator is chosen at process start, before JAX loads

import argparse
import json
import os
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import turns
from models import decoding, pretrained
from models.pretrained_decoders import load_decoder

# transformers config fields per size, for a Llama-family model (GPT-2 spells them its way).
SIZES = {
  'tiny': dict(hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, vocab=97),
  'medium': dict(hidden=512, layers=8, heads=8, kv_heads=2, ffn=1408, vocab=32000),
}


def hf_config(model_type: str, size: str) -> dict:
  """`AutoConfig.for_model` arguments of a random `model_type` model of `size`."""
  s = SIZES[size]
  if model_type == 'gpt2':
    return dict(
      vocab_size=s['vocab'],
      n_embd=s['hidden'],
      n_layer=s['layers'],
      n_head=s['heads'],
      n_positions=1024,
      resid_pdrop=0.0,
      embd_pdrop=0.0,
      attn_pdrop=0.0,
    )
  return dict(
    vocab_size=s['vocab'],
    hidden_size=s['hidden'],
    num_hidden_layers=s['layers'],
    num_attention_heads=s['heads'],
    num_key_value_heads=s['kv_heads'],
    intermediate_size=s['ffn'],
    max_position_embeddings=1024,
  )


def measure(model_type: str, size: str, args) -> dict:
  """One row: median milliseconds of each side for the forward and for decoding, and ratios."""
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel

  torch.set_num_threads(os.cpu_count())
  torch.manual_seed(0)
  config = transformers.AutoConfig.for_model(model_type, **hf_config(model_type, size))
  reference = transformers.AutoModelForCausalLM.from_config(config).eval()
  with tempfile.TemporaryDirectory() as folder:
    reference.save_pretrained(folder)
    with open(os.path.join(folder, 'tokenizer.json'), 'w', encoding='utf-8') as f:
      f.write('{}')  # unused here: the benchmark feeds ids
    model, _ = load_decoder(pretrained.read(folder))
  rng = np.random.default_rng(0)
  ids = rng.integers(0, config.vocab_size, (args.batch, args.tokens))
  prompt = ids[:, : args.prompt]
  forward = jax.jit(lambda ids: model.token_logits(ids))
  jax_ids, jax_prompt = jnp.asarray(ids), jnp.asarray(prompt)
  torch_ids, torch_prompt = torch.tensor(ids), torch.tensor(prompt)

  def attend_decode():
    return decoding.continue_prompt(
      model, jax_prompt, max_length=args.new_tokens, rng=jax.random.key(0), temperature=0.0
    ).block_until_ready()

  def torch_decode():
    with torch.inference_mode():
      out = reference.generate(
        torch_prompt,
        attention_mask=torch.ones_like(torch_prompt),
        do_sample=False,
        max_new_tokens=args.new_tokens,
        min_new_tokens=args.new_tokens,
        eos_token_id=None,
        pad_token_id=0,
      )
    return out[:, args.prompt :]

  def torch_forward():
    with torch.inference_mode():
      return reference(torch_ids).logits

  fns = {
    'attend forward': lambda: forward(jax_ids).block_until_ready(),
    'torch forward': torch_forward,
    'attend decode': attend_decode,
    'torch decode': torch_decode,
  }
  difference = float(np.abs(np.asarray(fns['attend forward']()) - torch_forward().numpy()).max())
  same_tokens = bool(np.array_equal(np.asarray(attend_decode()), torch_decode().numpy()))
  times = {name: [] for name in fns}
  for name in turns(fns, args.repeats):
    # A turn is a few calls back to back, timed by their median: right after the other library,
    # its worker threads are still busy, and a single call would time them too (the tiny
    # forward: 8.4 ms one call per turn, 3 ms back to back).
    runs = []
    for _ in range(args.calls):
      start = time.perf_counter()
      fns[name]()
      runs.append(time.perf_counter() - start)
    times[name].append(statistics.median(runs))
  ms = {name: statistics.median(values) * 1e3 for name, values in times.items()}
  return dict(
    model_type=model_type,
    size=size,
    parameters=sum(p.numel() for p in reference.parameters()),
    **{name.replace(' ', '_') + '_ms': value for name, value in ms.items()},
    forward_ratio=ms['torch forward'] / ms['attend forward'],
    decode_ratio=ms['torch decode'] / ms['attend decode'],
    max_abs_logit_difference=difference,
    same_greedy_tokens=same_tokens,
    torch_threads=torch.get_num_threads(),
  )


def main(argv: list[str] | None = None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument(
    '--model_type', default='llama', choices=('gpt2', 'llama', 'mistral', 'qwen2')
  )
  parser.add_argument('--sizes', default='tiny,medium', help=f'of {", ".join(SIZES)}')
  parser.add_argument('--batch', type=int, default=4)
  parser.add_argument('--tokens', type=int, default=256)
  parser.add_argument('--prompt', type=int, default=16)
  parser.add_argument('--new_tokens', type=int, default=64)
  parser.add_argument('--repeats', type=int, default=5, help='turns of each side')
  parser.add_argument('--calls', type=int, default=5, help='calls back to back per turn')
  parser.add_argument('--json', default='')
  args = parser.parse_args(argv)
  rows = []
  for size in args.sizes.split(','):
    row = measure(args.model_type, size, args)
    row.update(
      device=jax.devices()[0].device_kind,
      allocator='mimalloc' if allocator.active() else 'system',
    )
    print(
      '  '.join(
        f'{key}={value:.4g}' if isinstance(value, float) else f'{key}={value}'
        for key, value in row.items()
      )
    )
    rows.append(row)
  if args.json:
    with open(args.json, 'w', encoding='utf-8') as f:
      json.dump(rows, f, indent=1)
  return rows


if __name__ == '__main__':
  main()
