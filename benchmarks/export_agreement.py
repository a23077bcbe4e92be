"""Attend against transformers on a workdir that export.py wrote as a Hugging Face folder: the
logits on held-out text, both in float32, and the greedy tokens of some prompts.

  python export.py --workdir=runs/gemma3_ft --format=hf --out=exported/gemma3_ft
  python -m benchmarks.export_agreement --workdir=runs/gemma3_ft --folder=exported/gemma3_ft \\
      --out=runs/export_agreement_gemma3.json

Held-out text: the first --windows rows of the workdir's validation split, at its own
`dataset.seq_length`. The folder is read by `from_pretrained` alone. Greedy: each --prompt's ids
(Attend's tokenizer; whether the folder's own tokenizer gives the same ids is recorded) continued
--max_new_tokens tokens by Attend (`continue_prompt`, temperature 0) and by transformers
(`generate`, no sampling), compared up to the first special token (an end of text or of a turn),
where transformers stops. With --gguf (export.py --format=gguf of the same
checkpoint), that file read back by Attend against the folder, tensor by tensor. Writes JSON: the
largest logit difference beside the largest logit, the share of positions whose next token
agrees, each prompt's tokens and text on both sides, and the GGUF's tensors that differ from the
folder's (and by how much); prints a summary.
"""

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from models import generation, pretrained
import sources

PROMPTS = ('The capital of France is', 'An attention head')


def _held_out(source: sources.Source, windows: int) -> np.ndarray:
  """The first `windows` rows `[W, T]` of the run's validation split."""
  split = source.config.dataset.eval_split
  batches = source.task.batches(split, batch_size=windows, shuffle=False, seed=0, num_epochs=1)
  ids = np.asarray(next(iter(batches))['inputs'])
  if ids.shape[0] < windows:
    raise ValueError(
      f'--windows={windows}: the {split} split holds {ids.shape[0]} rows of '
      f'{ids.shape[1]} tokens; ask for fewer.'
    )
  return ids


def _until_special(tokens: list[int], special: set[int]) -> list[int]:
  """`tokens` up to and with the first special one."""
  for i, token in enumerate(tokens):
    if token in special:
      return tokens[: i + 1]
  return tokens


def gguf_against_folder(gguf: str, folder: str) -> dict:
  """Every tensor of the GGUF file as Attend reads it against the folder's (both by Hugging
  Face's names): how many, and the largest difference of those that differ."""
  ours, theirs = pretrained.read(gguf).tensors, pretrained.read(folder).tensors
  if set(ours) != set(theirs):
    raise ValueError(f'--gguf={gguf} and --folder={folder} hold different tensors.')
  differ = {
    name: float(np.max(np.abs(ours[name].astype(np.float64) - theirs[name])))
    for name in theirs
    if not np.array_equal(ours[name], theirs[name])
  }
  return dict(tensors=len(theirs), differ=differ)


def compare(workdir: str, folder: str, prompts: list[str], windows: int, max_new: int) -> dict:
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  source = sources.require_causal(sources.resolve(workdir))
  model = source.model()
  tokenizer = source.tokenizer
  theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
  their_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
  ids = _held_out(source, windows)
  ours = np.asarray(model.token_logits(jnp.asarray(ids)), np.float32)
  with torch.no_grad():
    logits = theirs(torch.tensor(ids, dtype=torch.long)).logits.numpy()
  special = set(tokenizer.special_ids)
  greedy = []
  for prompt in prompts:
    prompt_ids = list(tokenizer.encode(prompt))
    attend = generation.continue_prompt(
      model,
      jnp.asarray([prompt_ids], jnp.int32),
      max_length=max_new,
      rng=jax.random.key(0),
      temperature=0.0,
    )
    with torch.no_grad():
      out = theirs.generate(
        torch.tensor([prompt_ids], dtype=torch.long), max_new_tokens=max_new, do_sample=False
      )
    mine = _until_special([int(t) for t in np.asarray(attend)[0]], special)
    other = _until_special(out[0, len(prompt_ids) :].tolist(), special)
    greedy.append(
      dict(
        prompt=prompt,
        same_prompt_ids=their_tokenizer(prompt)['input_ids'] == prompt_ids,
        attend=mine,
        transformers=other,
        equal=mine == other,
        attend_text=tokenizer.decode(mine),
        transformers_text=tokenizer.decode(other),
      )
    )
  return dict(
    workdir=workdir,
    folder=folder,
    windows=list(ids.shape),
    max_abs_difference=float(np.max(np.abs(ours - logits))),
    max_abs_logit=float(np.max(np.abs(logits))),
    same_next_token=float(np.mean(ours.argmax(-1) == logits.argmax(-1))),
    greedy=greedy,
  )


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--workdir', required=True, help="the exported run's workdir")
  parser.add_argument('--folder', required=True, help='what export.py --format=hf wrote')
  parser.add_argument('--prompt', action='append', help=f'(repeatable) default: {PROMPTS}')
  parser.add_argument('--windows', type=int, default=4, help='held-out rows compared')
  parser.add_argument('--max_new_tokens', type=int, default=32)
  parser.add_argument('--gguf', default='', help='export.py --format=gguf of the same checkpoint')
  parser.add_argument('--out', default='', help='the JSON file (default: print only)')
  args = parser.parse_args(argv)
  if not os.path.isfile(os.path.join(args.folder, 'config.json')):
    raise SystemExit(
      f'--folder={args.folder} holds no config.json; export.py --format=hf writes one.'
    )
  started = time.perf_counter()
  result = compare(
    args.workdir, args.folder, args.prompt or list(PROMPTS), args.windows, args.max_new_tokens
  )
  if args.gguf:
    result['gguf'] = dict(file=args.gguf, **gguf_against_folder(args.gguf, args.folder))
  result['seconds'] = time.perf_counter() - started
  print(
    f'logits on {result["windows"][0]} x {result["windows"][1]} held-out tokens: at most '
    f'{result["max_abs_difference"]:.2g} apart on logits up to {result["max_abs_logit"]:.1f}; '
    f'the same next token at {result["same_next_token"]:.1%} of positions'
  )
  for row in result['greedy']:
    verdict = 'equal' if row['equal'] else 'DIFFERENT'
    if not row['same_prompt_ids']:
      verdict += " (the folder's tokenizer encodes the prompt differently)"
    print(
      f'{row["prompt"]!r}: {len(row["attend"])} greedy tokens {verdict}: {row["attend_text"]!r}'
    )
    if not row['equal']:
      print(f'  transformers: {row["transformers_text"]!r}')
  if args.gguf:
    read = result['gguf']
    worst = max(read['differ'].items(), key=lambda item: item[1], default=None)
    print(
      f'{args.gguf} read back: {read["tensors"] - len(read["differ"])} of {read["tensors"]} '
      "tensors equal to the folder's, bit for bit"
      + (f'; the others at most {worst[1]:.2g} apart ({worst[0]})' if worst else '')
    )
  if args.out:
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w', encoding='utf-8') as f:
      json.dump(result, f, indent=1)
    print(f'Wrote {args.out}.')
  return result


if __name__ == '__main__':
  main()
