"""Every head of a real model zero-ablated on one prompt: Attend's batched sweep against
transformers with a forward hook per head, the same weights, the same effects.

    python -m benchmarks.prompt_heads_peer --checkpoint=SmolLM2-135M-Instruct \
        --text=../shared/data/books/pride_and_prejudice.txt --tokens=64 --out=runs/prompt_peer.json

The prompt is the text's first `--tokens` tokens. The metric is the mean next-token loss over
the prompt; a head's effect is the loss with its output zeroed (its slice of the output
projection's input) less the clean loss. Attend runs `interpret.effects.head_effects` (a
layer's heads one vmapped batch); transformers runs one forward pass per head with a
`forward_pre_hook` on that layer's `o_proj` (the TransformerLens recipe, without the library).
Both sweeps are timed with `benchmarks.timing.compare` (one warm-up each, then alternating
rounds); the effects are compared head by head. Needs the bench extra (torch, transformers,
accelerate for the GGUF file).
"""

import argparse
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import finetune_torch, timing
from data.pretrained_tokenizer import PretrainedTokenizer
from interpret import effects
from models import pretrained
from training import failures


def torch_sweep(model, ids: np.ndarray) -> tuple[float, np.ndarray]:
  """`(clean loss, [L, N] effects)` of transformers' model with one hook per zeroed head."""
  import torch  # pylint: disable=import-outside-toplevel

  config, layers = model.config, model.model.layers
  heads = config.num_attention_heads
  size = getattr(config, 'head_dim', None) or config.hidden_size // heads
  inputs = torch.tensor(ids, dtype=torch.long)

  def loss() -> float:
    logits = model(inputs).logits[:, :-1].float()
    return float(torch.nn.functional.cross_entropy(logits.flatten(0, 1), inputs[:, 1:].flatten()))

  effects = np.zeros((len(layers), heads))
  with torch.no_grad():
    clean = loss()
    for layer, block in enumerate(layers):
      for head in range(heads):

        def zero(module, args, head=head):
          value = args[0].clone()
          value[..., head * size : (head + 1) * size] = 0
          return (value,)

        handle = block.self_attn.o_proj.register_forward_pre_hook(zero)
        effects[layer, head] = loss() - clean
        handle.remove()
  return clean, effects


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--checkpoint', required=True, help='a .gguf file or a registry name')
  parser.add_argument('--text', required=True, help='the prompt is its first --tokens tokens')
  parser.add_argument('--tokens', type=int, default=64)
  parser.add_argument('--rounds', type=int, default=2, help='timed rounds of both sweeps')
  parser.add_argument('--out', default='', help='a JSON file for the numbers')
  args = parser.parse_args(argv)
  checkpoint = pretrained.read(args.checkpoint)
  with open(args.text, encoding='utf-8') as f:
    ids = PretrainedTokenizer(checkpoint.tokenizer_json).encode(f.read(100_000))[: args.tokens]
  ids = np.asarray([ids], np.int32)
  model, _ = pretrained.load_decoder(checkpoint)
  reference = finetune_torch.load(pretrained.locate(args.checkpoint), attention='eager').eval()
  metric = effects.Metric('loss')
  quiet = lambda line: None
  measured = timing.compare(
    {
      'attend': lambda: effects.head_effects(model, jnp.asarray(ids), metric, progress=quiet),
      'transformers': lambda: torch_sweep(reference, ids),
    },
    turns=args.rounds,
  )
  (clean, ours), (ref_clean, theirs) = (measured.results[s] for s in ('attend', 'transformers'))
  heads = ours.size
  result = dict(
    checkpoint=args.checkpoint,
    tokens=int(ids.shape[1]),
    heads=heads,
    seconds={side: measured.seconds(side) for side in ('attend', 'transformers')},
    first_call_seconds=measured.warmup_s,
    ratio=measured.ratio('transformers', 'attend')._asdict(),
    clean_loss=dict(attend=clean, transformers=ref_clean),
    max_effect_difference=float(np.max(np.abs(ours - theirs))),
    largest_effect=float(np.max(np.abs(theirs))),
    same_top_10=sorted(np.argsort(-np.abs(ours), axis=None)[:10].tolist())
    == sorted(np.argsort(-np.abs(theirs), axis=None)[:10].tolist()),
    device=str(jax.devices()[0]),
  )
  print(json.dumps(result, indent=1))
  if args.out:
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w', encoding='utf-8') as f:
      json.dump(result, f, indent=1)
  return result


if __name__ == '__main__':
  failures.run('python -m benchmarks.prompt_heads_peer', main)
