"""Training throughput: Attend's train step vs the same Transformer in flax.linen and PyTorch.

    python -m benchmarks.train_bench                          # sizes default and medium, fp32
    python -m benchmarks.train_bench --sizes=default          # the model of configs/default.py
    python -m benchmarks.train_bench --sizes=medium --steps=50 --repeats=5 --json=/tmp/train.json
    python -m benchmarks.train_bench --dtype=bfloat16         # Attend and Linen compute dtype (GPU)
    python -m benchmarks.train_bench --sizes=base --models=attend,linen --dtype=bfloat16 \
        --peak_tflops=989                                     # configs/transformer_base.py, H100
    python -m benchmarks.train_bench --models=attend,torch --torch_compile

Rows, all trained on the same synthetic batch (fixed seed, ids in [4, vocab), a few trailing pad
positions per row):
- `attend`: what train.py runs: the state of `training.setup.build_state` on the config's mesh
  (the model of `config.model`, AdamW of `training.optim`), `training.steps.train_step` jitted by
  `training.loop.jit_train_step` with the config's label smoothing and dtype and the state
  donated, called as the loop calls it (the run's one dropout key, which the step folds with its
  step number).
- `linen`: `benchmarks/linen_peer_train.py`, the same model in flax.linen blocks, optax AdamW
  with the same betas, epsilon, clipping and schedule, the same label-smoothed loss, a jitted step.
- `torch`: `benchmarks/torch_peer.py`, `torch.nn.Transformer` in eager mode (`--torch_compile`
  compiles the model), `torch.optim.AdamW`, always float32; skipped when torch is not installed.
- `seq2seq`: Attend's train step on the model of configs/seq2seq_bahdanau.py; no peer.

Sizes: `default` is configs/default.py (d=128, 4 heads, d_ff=256, 2+2 layers, dropout 0.1) at
batch 64, S=16, T=32, vocabularies 1000 -> 64; `medium` is d=256, 4 heads, d_ff=1024, 3+3 layers
at batch 32, S=T=64, vocabularies 8000 -> 8000; `base` is configs/transformer_base.py (d=512, 8
heads, d_ff=2048, 6+6 layers, shared embeddings, tied output) at batch 128, S=T=128, a shared
vocabulary of 8000. Figures (`benchmarks.timing.compare`): a call is `--steps` steps, ended by
waiting for the device; one warm-up call (compilation included) is not timed, then the rows take
`--repeats` turns, alternating, each the median of `--calls` calls back to back (a call is already
`--steps` steps in a row, so the other library's threads, still busy after its turn, slow the
first of them only); a row's figure is the median of its turns. The ratio columns are (row's
tokens/s) / (peer's tokens/s), the median of the per-round ratios: above 1 the row is faster; the
JSON gives each figure's spread (min-max over the turns). Parameter counts are checked: Linen
equals Attend, torch is Attend plus the `4 * d_model` of the final LayerNorms `nn.Transformer`
always adds.

Model FLOP utilisation: `train_flops` counts the matmuls of one step (forward and backward, 3x the
forward: every weight matmul over all positions, pads included, the output projection, and the
attention products QK^T and AV of every layer; embedding lookups, norms and softmax not counted);
achieved TFLOP/s over `--peak_tflops` (default: this device's matmul rate in the compute dtype,
measured in the same run) is the MFU column.
"""

from training import allocator

if __name__ == '__main__':
  allocator.use_mimalloc()  # first: the allocator is chosen at process start, before JAX loads

import argparse
import functools
import json

import numpy as np

from benchmarks import machine, peers, timing, train_runners
from benchmarks.attention_bench import matmul_peak_gflops
from configs import default, seq2seq_bahdanau, transformer_base

SIZES = {
  'default': dict(
    model={}, batch=64, source_length=16, target_length=32, input_vocab=1000, output_vocab=64
  ),
  'medium': dict(
    model=dict(d_model=256, num_heads=4, d_ff=1024, num_layers=3),
    batch=32,
    source_length=64,
    target_length=64,
    input_vocab=8000,
    output_vocab=8000,
  ),
  'base': dict(
    config=transformer_base,
    model={},
    batch=128,
    source_length=128,
    target_length=128,
    input_vocab=8000,
    output_vocab=8000,
  ),
}
MODELS = ('attend', 'linen', 'torch', 'seq2seq')
ROW_NAMES = {
  'attend': 'Attend Transformer',
  'linen': 'flax.linen Transformer',
  'torch': 'torch.nn.Transformer',
  'seq2seq': 'Attend Seq2Seq (Bahdanau)',
}


def synthetic_batch(size: dict, seed: int = 0) -> dict[str, np.ndarray]:
  """`{'inputs': int32 [B, S], 'targets': int32 [B, T]}`, ids in [4, vocab), right-padded.

  Each row ends in 1 to max(1, length // 8) pad (0) positions, so every mask is exercised.
  """
  rng = np.random.default_rng(seed)

  def ids(length: int, vocab: int) -> np.ndarray:
    x = rng.integers(4, vocab, (size['batch'], length), dtype=np.int32)
    pads = rng.integers(1, max(1, length // 8) + 1, size['batch'])  # [B]
    x[np.arange(length)[None, :] >= (length - pads)[:, None]] = 0
    return x

  return {
    'inputs': ids(size['source_length'], size['input_vocab']),
    'targets': ids(size['target_length'], size['output_vocab']),
  }


def experiment_config(size_name: str, model: str = 'attend', dtype: str = 'float32'):
  """The experiment config the `model` row trains: configs/default.py resized, or Bahdanau's."""
  if model == 'seq2seq':
    config = seq2seq_bahdanau.get_config()
  else:
    config = SIZES[size_name].get('config', default).get_config()
    config.model.update(SIZES[size_name]['model'])
  config.dtype = dtype
  return config


def train_flops(model_config, size: dict) -> float:
  """Matmul FLOPs of one encoder-decoder train step (forward + backward = 3x forward)."""
  d, f, v = model_config.d_model, model_config.d_ff, size['output_vocab']
  enc = model_config.get('num_encoder_layers') or model_config.num_layers
  dec = model_config.get('num_decoder_layers') or model_config.num_layers
  s, t = size['source_length'], size['target_length']
  weights = (
    s * enc * (4 * d * d + 2 * d * f)  # encoder: Q, K, V, O and the FFN
    + t * dec * (6 * d * d + 2 * d * f)  # decoder: self Q, K, V, O, cross Q, O, FFN
    + s * dec * 2 * d * d  # cross-attention K, V over the memory
    + t * d * v
  )  # output projection
  scores = enc * 4 * s * s * d + dec * (4 * t * t * d + 4 * t * s * d)  # QK^T and AV
  return 3.0 * size['batch'] * (2 * weights + scores)


def time_steps(runs: dict, steps: int, repeats: int, calls: int) -> timing.Timing:
  """Per run, the seconds of `steps` steps (`benchmarks.timing.compare`): after one untimed call,
  the runs take `repeats` turns of `calls` calls each, alternating, so that a slow spell of a
  shared machine hits every row alike instead of one row's whole measurement."""
  return timing.compare(
    {name: functools.partial(run, steps) for name, run in runs.items()}, turns=repeats, calls=calls
  )


def run_size(size_name: str, args: argparse.Namespace) -> list[dict]:
  """Times the selected models on one size; prints and returns its rows."""
  size = SIZES[size_name]
  batch = synthetic_batch(size)
  tokens = int((batch['targets'] != 0).sum())
  config = experiment_config(size_name, dtype=args.dtype)
  m = config.model
  print(
    f'\n## {size_name}: d={m.d_model}, {m.num_heads} heads, d_ff={m.d_ff}, '
    f'{m.num_layers}+{m.num_layers} layers, dropout {m.dropout_rate}; batch {size["batch"]}, '
    f'S={size["source_length"]}, T={size["target_length"]}, vocab {size["input_vocab"]} -> '
    f'{size["output_vocab"]}; {tokens} non-pad target tokens/step',
    flush=True,
  )
  total = (1 + args.repeats * args.calls) * args.steps  # the warm-up call, then the turns
  builders = {
    'attend': lambda: train_runners.attend_runner(config, size, batch),
    'linen': lambda: train_runners.linen_runner(config, size, batch),
    'torch': lambda: train_runners.torch_runner(config, size, batch, total, args.torch_compile),
    'seq2seq': lambda: train_runners.attend_runner(
      experiment_config(size_name, 'seq2seq', args.dtype), size, batch
    ),
  }
  params, runs, notes = {}, {}, []
  for name in args.models:
    built = builders[name]()
    if built is None:
      notes.append(f'{ROW_NAMES[name]}: skipped, torch is not installed.')
      continue
    params[name], runs[name] = built
  times = time_steps(runs, args.steps, args.repeats, args.calls)
  speed = {name: times.seconds(name) / args.steps for name in runs}
  if 'attend' in params:
    peers.check_param_counts(params, m.d_model)
  shown = ' | '.join(f'{n} {c:,}' for n, c in params.items())
  extra = (
    '; torch = Attend + its final encoder/decoder LayerNorms (4 * d_model)'
    if 'torch' in params
    else ''
  )
  flops = train_flops(m, size)
  print(
    f'params: {shown}{extra}; {flops / 1e12:.3f} model TFLOP per step; peak '
    f'{args.peak_tflops:.3g} TFLOP/s\n\n| model | ms/step | target tokens/s (non-pad) | '
    'TFLOP/s | MFU | x Linen | x torch |\n|---|---|---|---|---|---|---|'
  )
  rows = []
  for name, seconds in speed.items():
    row = dict(
      size=size_name,
      model=name,
      params=params[name],
      ms_per_step=seconds * 1e3,
      tokens_per_s=tokens / seconds,
      tflops=None,
      mfu=None,
    )
    if name != 'seq2seq':  # train_flops counts the Transformer's matmuls only
      row.update(tflops=flops / seconds / 1e12, mfu=flops / seconds / 1e12 / args.peak_tflops)
    row['ms_per_step_spread'] = times.spread(name).scaled(1e3 / args.steps)._asdict()
    for peer in ('linen', 'torch'):
      # A ratio compares the same model only; the Seq2Seq row has no peer.
      ratio = times.ratio(peer, name) if name != 'seq2seq' and peer in speed else None
      row[f'x_{peer}'] = None if ratio is None else ratio.median
      row[f'x_{peer}_spread'] = None if ratio is None else ratio._asdict()
    ratios = [f'{row[k]:.2f}' if row[k] is not None else '-' for k in ('x_linen', 'x_torch')]
    rate = '- | -' if row['tflops'] is None else f'{row["tflops"]:.1f} | {row["mfu"]:.1%}'
    print(
      f'| {ROW_NAMES[name]} | {row["ms_per_step"]:.1f} | {row["tokens_per_s"]:,.0f} | '
      f'{rate} | {" | ".join(ratios)} |',
      flush=True,
    )
    rows.append(row)
  for note in notes:
    print(note)
  return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    '--sizes', default='default,medium', help=f'comma-separated, of {list(SIZES)}'
  )
  parser.add_argument('--models', default=','.join(MODELS), help=f'comma-separated, of {MODELS}')
  parser.add_argument('--steps', type=int, default=20, help='train steps per timed run')
  parser.add_argument('--repeats', type=int, default=3, help='turns of each row')
  parser.add_argument(
    '--calls', type=int, default=1, help='timed runs of --steps steps back to back per turn'
  )
  parser.add_argument(
    '--dtype',
    default='float32',
    choices=('float32', 'bfloat16'),
    help='compute dtype of Attend and Linen (torch stays float32)',
  )
  parser.add_argument(
    '--peak_tflops',
    type=float,
    default=0.0,
    help="the device's peak for MFU (default: measure a matmul in --dtype)",
  )
  parser.add_argument('--torch_compile', action='store_true', help='torch.compile the torch model')
  parser.add_argument('--json', default='', help='also write the results to this JSON file')
  args = parser.parse_args(argv)
  args.sizes, args.models = args.sizes.split(','), args.models.split(',')
  for field, given, valid in (('sizes', args.sizes, SIZES), ('models', args.models, MODELS)):
    unknown = sorted(set(given) - set(valid))
    if unknown:
      parser.error(f'--{field}: {unknown[0]!r} is not one of {list(valid)}.')
  if min(args.steps, args.repeats, args.calls) < 1:
    parser.error(
      f'--steps, --repeats and --calls must be >= 1; got {args.steps}, {args.repeats} and '
      f'{args.calls}.'
    )
  return args


def main(argv: list[str] | None = None) -> dict:
  """Runs the benchmark; returns `{'machine': facts, 'results': rows}` (also written to --json)."""
  args = parse_args(argv)
  if not args.peak_tflops:
    args.peak_tflops = matmul_peak_gflops(args.dtype) / 1e3
  machine.torch_on_every_core()
  facts = machine.facts(args.dtype)
  facts['peak_tflops'] = args.peak_tflops
  torch_facts = (
    f'torch {facts["torch"]} ({facts["torch_threads"]} threads, {facts["torch_device"]}, float32)'
    if facts['torch']
    else 'torch not installed'
  )
  print(
    f'# training throughput, {args.dtype}, {facts["cpus"]} CPUs, backend {facts["backend"]} '
    f'({", ".join(facts["devices"])}), jax {facts["jax"]}, flax {facts["flax"]}, '
    f'{torch_facts}; median of {args.repeats} turns x {args.calls} x {args.steps} steps',
    flush=True,
  )
  results = [row for size in args.sizes for row in run_size(size, args)]
  out = {'machine': facts, 'results': results}
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(out, f, indent=1)
  return out


if __name__ == '__main__':
  main()
