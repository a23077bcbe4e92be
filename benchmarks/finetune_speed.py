"""The speed and memory of a fine-tuning step, Attend's against PyTorch's, for
`python -m benchmarks.finetune_peer --time` (which builds both sides and calls these).

- Time: one train step a call, each side on the same batches in turn (`benchmarks.timing.compare`:
  a warm-up call each, compilation included, then `repeats` rounds of `calls` calls back to back).
- FLOPs: the matmuls of one step of a Llama-family decoder, 3x its forward (the backward pass
  twice the forward): every weight matmul over all positions, the output projection, and QK^T
  and AV over all T x T pairs of every layer (causal masking saves none of them in either side's
  kernel); embedding lookups, norms, softmax and the optimizer not counted.
- Memory: each side's peak resident memory in a process of its own, so that neither side's
  libraries and buffers count for the other: over the whole process (loading included), and over
  the steps after the first (the peak reset after it, where Linux allows).
"""

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Callable

import jax
import numpy as np

from benchmarks import finetune_torch, timing
from training import allocator


def train_flops(model: Any, vocab: int, batch: int, tokens: int) -> float:
  """Matmul FLOPs of one train step of a decoder with `config.model` fields `model` on `batch`
  rows of `tokens` (module docstring)."""
  d, heads, kv_heads = model.d_model, model.num_heads, model.num_kv_heads or model.num_heads
  ffn = (3 if model.gated_mlp else 2) * d * model.d_ff  # gate, up and down projections
  projections = d * heads * model.d_k + d * kv_heads * (model.d_k + model.d_v)  # Q, K, V
  per_token = model.num_layers * (projections + heads * model.d_v * d + ffn) + d * vocab
  attention = model.num_layers * heads * tokens * tokens * (model.d_k + model.d_v)  # per row
  return 3.0 * 2 * batch * (tokens * per_token + attention)


def time_steps(
  attend: tuple[Any, Callable],
  trainer: finetune_torch.Trainer,
  batches: list[dict],
  *,
  repeats: int,
  calls: int,
) -> timing.Timing:
  """The seconds of one train step of each side, `attend` being `(state, step)` of
  `finetune_peer.attend_trainer` and `trainer` PyTorch's, cycling through `batches`."""
  carry = dict(state=attend[0], attend=0, torch=0)

  def attend_step():
    batch = batches[carry['attend'] % len(batches)]
    carry['state'], metrics = attend[1](carry['state'], batch)
    carry['attend'] += 1
    return metrics['loss']

  def torch_step():
    batch = batches[carry['torch'] % len(batches)]
    carry['torch'] += 1
    return trainer.step(batch)['loss']

  fns = {'attend': attend_step, 'torch': torch_step}
  return timing.compare(fns, turns=repeats, calls=calls)


def attend_memory(state: Any, step: Callable, batches: list[dict]) -> dict[str, float]:
  """As `finetune_torch.memory` for Attend's `(state, step)`, in this process, the first
  (compiling) step run as train.py runs it (`allocator.purging`)."""
  with allocator.purging():
    state, metrics = step(state, batches[0])
    jax.block_until_ready(metrics)

  def run():
    carry = state
    for batch in batches[1:]:
      carry, out = step(carry, batch)
    jax.block_until_ready((carry, out))

  return finetune_torch.measured_steps(run)


def _memory_in_process(command: list[str], environ: dict[str, str]) -> dict[str, float]:
  """The JSON line a memory command prints last (`python -m COMMAND...`)."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the import root
  done = subprocess.run(
    [sys.executable, '-m', *command],
    cwd=root,
    env=environ,
    capture_output=True,
    text=True,
    check=False,
  )
  if done.returncode:
    raise RuntimeError(f'python -m {command[0]} failed:\n{done.stderr[-3000:]}')
  return json.loads(done.stdout.strip().splitlines()[-1])


def memories(
  flags: list[str], source: str, batches: list[dict], settings: finetune_torch.Settings
) -> dict[str, dict]:
  """Each side's peak memory in a process of its own: Attend's, `finetune_peer --memory` with
  `flags` under this process's allocator (train.py's), and PyTorch's, `finetune_torch` on the
  model at `source` with `batches` and `settings`, as a PyTorch user runs it (no allocator
  preloaded, training/allocator.py)."""
  attend = _memory_in_process(['benchmarks.finetune_peer', '--memory', *flags], dict(os.environ))
  plain = {k: v for k, v in os.environ.items() if k not in ('LD_PRELOAD', 'MIMALLOC_PURGE_DELAY')}
  with tempfile.TemporaryDirectory() as folder:
    saved = os.path.join(folder, 'batches.npz')
    np.savez(saved, **{key: np.stack([b[key] for b in batches]) for key in finetune_torch.KEYS})
    command = [
      'benchmarks.finetune_torch',
      f'--source={source}',
      f'--batches={saved}',
      f'--settings={json.dumps(dataclasses.asdict(settings))}',
    ]
    return dict(attend_memory=attend, torch_memory=_memory_in_process(command, plain))


def speed_row(times: timing.Timing, flops: float, peak_gflops: float, tokens: int) -> dict:
  """Per side, ms per step (with its spread), tokens/s and achieved FLOP rate over the peak; and
  the ratio PyTorch / Attend (> 1: Attend is faster) round by round."""
  row = dict(step_tflop=flops / 1e12, matmul_peak_gflops=peak_gflops)
  for side in ('attend', 'torch'):
    seconds = times.seconds(side)
    row.update(
      {
        f'{side}_ms': seconds * 1e3,
        f'{side}_ms_spread': times.spread(side).scaled(1e3)._asdict(),
        f'{side}_tokens_per_s': tokens / seconds,
        f'{side}_fraction_of_peak': flops / seconds / 1e9 / peak_gflops,
        f'{side}_first_call_s': times.warmup_s[side],
      }
    )
  row['ratio'] = times.ratio('torch', 'attend')._asdict()
  return row


def speed_text(row: dict) -> str:
  """The timing row (and the memory, where measured) as a few lines."""
  lines = [
    f'{row["step_tflop"]:.3f} TFLOP a step (matmuls); float32 matmul peak '
    f'{row["matmul_peak_gflops"]:.1f} GFLOP/s (JAX, measured in this run)',
    '| side | ms/step (min-max) | tokens/s | of peak | first call s | peak MiB: steps / process |',
    '|---|---|---|---|---|---|',
  ]
  for side in ('attend', 'torch'):
    memory = row.get(f'{side}_memory') or {}
    lines.append(
      f'| {side} | {timing.Spread(**row[f"{side}_ms_spread"]).text(".0f")} | '
      f'{row[f"{side}_tokens_per_s"]:,.0f} | {row[f"{side}_fraction_of_peak"]:.1%} | '
      f'{row[f"{side}_first_call_s"]:.1f} | {memory.get("step_peak_mib") or 0:,.0f} / '
      f'{memory.get("process_peak_mib") or 0:,.0f} |'
    )
  ratio = timing.Spread(**row['ratio']).text('.2f')
  lines.append(f'PyTorch / Attend step time: {ratio} (> 1: Attend faster)')
  return '\n'.join(lines)
