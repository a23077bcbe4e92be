"""Attend's pretrained encoder forward against Hugging Face transformers on CPU torch, same run.

    python -m benchmarks.pretrained_bench                  # all-MiniLM-L6-v2, batch 32 x 128
    python -m benchmarks.pretrained_bench --checkpoint=FOLDER --batch=8 --tokens=512

The model is loaded once from the checkpoint (models.pretrained) into both: Attend's
`EncoderMLM.encode` under `jax.jit`, and transformers' `BertModel` (its default attention, SDPA,
under `torch.inference_mode`). Inputs are `--batch` rows of `--tokens` random ids, each row
padded after a random length of at least half the row, so the padding mask is real work. Timing
(`benchmarks.timing.compare`): after a warm-up call each, `--repeats` turns of each side, the two
alternating, a turn the median of `--calls` calls back to back; a side's time is the median of
its turns, `ratio` is torch / Attend (> 1: Attend is faster) as the median of the per-round
ratios, each with its spread (min-max over the turns). The outputs' largest difference on real
tokens is printed too.

`--trace=FOLDER` then shows where each side's time goes over `--calls` more calls: Attend's XLA ops
charged to the line of Attend's code that made each (a `jax.profiler` trace in FOLDER/attend,
which TensorBoard's profile plugin or Perfetto opens, and XLA's dump in FOLDER/hlo; the way
`benchmarks.step_profile` charges a train step's), and transformers' by torch operator
(`torch.profiler`). Attend's figures are op self times summed over XLA's threads, torch's the
calling thread's time in each operator, so compare their shares, not their milliseconds.
"""

from training import allocator

if __name__ == '__main__':
  allocator.use_mimalloc()  # first: the allocator is chosen at process start, before JAX loads

import argparse
import json
import os
import tempfile
import zipfile

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import machine, step_profile, timing
from models import pretrained


def inputs(batch: int, tokens: int, vocab_size: int, pad_id: int, seed: int = 0) -> np.ndarray:
  """`[batch, tokens]` ids, each row padded after a random length in `[tokens / 2, tokens]`."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(1000, vocab_size, (batch, tokens))
  lengths = rng.integers(tokens // 2, tokens + 1, batch)
  ids[np.arange(tokens)[None, :] >= lengths[:, None]] = pad_id
  return ids


def torch_reference(name: str):
  """transformers' BertModel of the checkpoint `name` (models.pretrained.read's), float32, eval."""
  import transformers  # pylint: disable=import-outside-toplevel

  if os.path.isdir(name):
    return transformers.BertModel.from_pretrained(name).eval()
  with tempfile.TemporaryDirectory() as folder:
    with zipfile.ZipFile(pretrained.locate(name)) as z:
      z.extractall(folder)
    root = next(path for path, _, files in os.walk(folder) if 'config.json' in files)
    return transformers.BertModel.from_pretrained(root).eval()


def measure(args) -> dict:
  """The row of the table: median seconds per forward of each, their ratio, the difference."""
  import torch  # pylint: disable=import-outside-toplevel

  machine.torch_on_every_core()
  checkpoint = pretrained.read(args.checkpoint)
  model, _ = pretrained.load_encoder(checkpoint)
  reference = torch_reference(args.checkpoint)
  ids = inputs(args.batch, args.tokens, checkpoint.config['vocab_size'], model.pad_id)
  graphdef, state = nnx.split(model)

  @jax.jit
  def encode(state, ids):
    return nnx.merge(graphdef, state).encode(ids)[0]

  jax_ids, torch_ids = jnp.asarray(ids), torch.tensor(ids)
  torch_mask = torch.tensor(ids != model.pad_id).long()

  def attend():
    return encode(state, jax_ids)

  def torch_forward():
    with torch.inference_mode():
      return reference(input_ids=torch_ids, attention_mask=torch_mask).last_hidden_state

  fns = {'attend': attend, 'torch': torch_forward}
  times = timing.compare(fns, turns=args.repeats, calls=args.calls)
  places = trace(fns, args.calls, args.trace) if args.trace else {}
  real = ids != model.pad_id
  outputs = {name: np.asarray(out) for name, out in times.results.items()}
  difference = float(np.abs(outputs['attend'] - outputs['torch'])[real].max())
  ratio = times.ratio('torch', 'attend')
  return dict(
    checkpoint=args.checkpoint,
    batch=args.batch,
    tokens=args.tokens,
    attend_ms=times.seconds('attend') * 1e3,
    torch_ms=times.seconds('torch') * 1e3,
    ratio=ratio.median,
    attend_ms_spread=times.spread('attend').scaled(1e3)._asdict(),
    torch_ms_spread=times.spread('torch').scaled(1e3)._asdict(),
    ratio_spread=ratio._asdict(),
    turns=args.repeats,
    calls=args.calls,
    max_abs_difference=difference,
    torch_threads=torch.get_num_threads(),
    **places,
  )


def trace(fns: dict, calls: int, folder: str) -> dict[str, dict[str, float]]:
  """Milliseconds per call of each place of Attend's forward (`step_profile.charge`) and of each
  torch operator of transformers' (self time), largest first, over `calls` calls of each."""
  import torch  # pylint: disable=import-outside-toplevel

  jax.profiler.start_trace(os.path.join(folder, 'attend'))
  for _ in range(calls):
    jax.block_until_ready(fns['attend']())
  jax.profiler.stop_trace()
  xplane = step_profile.newest_trace(os.path.join(folder, 'attend'))
  attend = step_profile.charge(xplane, os.path.join(folder, 'hlo'), 'jit_encode', calls)
  with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
    for _ in range(calls):
      fns['torch']()
  ops = {e.key: e.self_cpu_time_total / 1e3 / calls for e in profile.key_averages()}
  return dict(
    attend_ms_by_place=attend,
    torch_ms_by_op=dict(sorted(ops.items(), key=lambda item: -item[1])),
  )


def _print_places(row: dict, top: int = 8) -> None:
  """The largest places of each side and their shares of the side's total."""
  for key, title in (('attend_ms_by_place', 'Attend, XLA ops'), ('torch_ms_by_op', 'torch ops')):
    total = sum(row[key].values())
    print(f'{title}: {total:.1f} ms per call')
    for name, ms in list(row[key].items())[:top]:
      print(f'{ms:9.1f} ms  {ms / total:6.1%}  {name}')


def _shown(value) -> str:
  """A figure of the printed row: 4 significant digits, a spread as 'median (min-max)'."""
  if isinstance(value, dict):
    return timing.Spread(**value).text('.4g')
  return f'{value:.4g}' if isinstance(value, float) else str(value)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--checkpoint', default=pretrained.DEFAULT)
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--tokens', type=int, default=128)
  parser.add_argument('--repeats', type=int, default=5, help='turns of each side')
  parser.add_argument('--calls', type=int, default=5, help='calls back to back per turn')
  parser.add_argument('--json', default='')
  parser.add_argument('--trace', default='', help='also trace each side into this folder')
  args = parser.parse_args()
  if args.trace:  # read when JAX starts its backend, on the first call
    hlo = step_profile.dump_flags(os.path.join(args.trace, 'hlo'), 'jit_encode')
    os.environ['XLA_FLAGS'] = f'{os.environ.get("XLA_FLAGS", "")} {hlo}'.strip()
  row = measure(args)
  facts = machine.facts()
  row.update(device=facts['device'], allocator=facts['allocator'])
  shown = {k: v for k, v in row.items() if not k.endswith(('_by_place', '_by_op'))}
  print('  '.join(f'{key}={_shown(value)}' for key, value in shown.items()))
  if args.trace:
    _print_places(row)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(row, f, indent=1)


if __name__ == '__main__':
  main()
