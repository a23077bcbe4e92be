"""Attend's fine-tuning step against PyTorch's on a real decoder: equal tensor by tensor, and timed.

    python -m benchmarks.finetune_peer --checkpoint=SmolLM2-135M-Instruct --steps=20 --batch=8 \
        --tokens=128 --text=../shared/data/books/pride_and_prejudice.txt --json=peer.json
    python -m benchmarks.finetune_peer --time --checkpoint=SmolLM2-135M-Instruct --repeats=3 \
        --text=../shared/data/books/pride_and_prejudice.txt --json=speed.json

Both sides start from the checkpoint's weights (any decoder `models.pretrained.read` takes that
transformers reads too: a folder, or a `.gguf` file dequantised) and train on the same batches:
Attend's own, the `--batch` x `--tokens` windows its language-modelling task cuts from `--text`
with the checkpoint's tokenizer (configs/pretrained_lm.py, the data a fine-tuning run reads).

- Attend: what train.py runs. The config of configs/pretrained_lm.py (its optimizer fields changed
  by the flags given), the state of `training.steps.create_train_state` with the optimizer of
  `training.optim.make_optimizer`, and `training.steps.train_step` with the task's loss, jitted
  by `training.loop.jit_train_step`, called with the loop's dropout key.
- PyTorch (benchmarks/finetune_torch.py): transformers' model of the same checkpoint, its loss as
  transformers computes it, `torch.optim.AdamW` with the same rates, betas, epsilon and weight
  decay, and `clip_grad_norm_` at the same norm.

Compared: every gradient of the first step, tensor by tensor through the checkpoint's table
(`models.pretrained.decoders`: each tensor's Attend parameter and transform), the loss of every
step, and every parameter after the last. The gradients of Attend's step are read without
changing it: its optimizer runs behind a pass-through that keeps the step's gradient in the
optimizer state. `--time` times one train step of each side instead (`benchmarks.timing`), with
tokens/s, the step's matmul FLOPs over this machine's measured float32 matmul rate, and each
side's peak resident memory, measured in a process of its own (finetune_torch for PyTorch, which
imports no JAX).
"""

from training import allocator

if __name__ == '__main__':
  allocator.use_mimalloc()  # first: the allocator is chosen at process start, before JAX loads

import argparse
import dataclasses
import json
import os
import tempfile
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks import finetune_speed, finetune_torch, machine
from benchmarks.attention_bench import matmul_peak_gflops
from configs import pretrained_lm
from models import pretrained
from models.pretrained import decoders
import tasks
from training import config as config_lib
from training import loop, pretrained_workdir, sharding, steps
from training.optim import learning_rate_schedule, make_optimizer

# The config's fields a flag may change (configs/pretrained_lm.py's values otherwise).
_FLOATS = ('learning_rate', 'beta1', 'beta2', 'eps', 'weight_decay', 'grad_clip', 'label_smoothing')
OPTIMIZER_FIELDS = {**dict.fromkeys(_FLOATS, float), 'warmup_steps': int, 'schedule': str}
MEMORY_STEPS = 3  # a process measuring one side's memory: one step, then the measured two


class Setup:
  """A checkpoint read for both sides: the config (configs/pretrained_lm.py with `overrides`),
  its task and data, Attend's model, the checkpoint's table of tensors and its source path."""

  def __init__(
    self, checkpoint: str, text: str, batch: int, tokens: int, workdir: str, **overrides
  ):
    read = pretrained.read(checkpoint)
    conversion = pretrained_lm.converted(read)  # step 0 of a fine-tuning run, as convert.py's
    self.config, self.model = conversion.config, conversion.model
    if text:
      self.config.dataset.text_path = os.path.abspath(text)
    self.config.dataset.update(seq_length=tokens, batch_size=batch)
    self.config.update(overrides)
    config_lib.validate(self.config)
    pretrained_workdir.save_vocab(workdir, read)  # where config.init_from would put it
    self.task = tasks.build(self.config, workdir)
    self.rows = decoders.ARCHITECTURES[read.config['model_type']].rows(
      self.config.model.num_layers, read.config
    )
    self.source = pretrained.locate(checkpoint)
    self.vocab_size = read.config['vocab_size']

  def batches(self, count: int) -> list[dict[str, np.ndarray]]:
    """The first `count` training batches, shuffled with the run's seed as train.py reads them."""
    it = self.task.batches(
      self.config.dataset.train_split,
      batch_size=self.config.dataset.batch_size,
      shuffle=True,
      seed=self.config.seed,
    )
    return [{key: np.asarray(value) for key, value in next(it).items()} for _ in range(count)]

  def settings(self, updates: int) -> finetune_torch.Settings:
    """The optimizer's and loss's settings of the config for PyTorch: Attend's rate of the k-th
    update is its schedule at step k (training/optim.py), for k = 1 .. `updates`."""
    c, schedule = self.config, learning_rate_schedule(self.config)
    return finetune_torch.Settings(
      learning_rates=tuple(float(schedule(k)) for k in range(1, updates + 1)),
      beta1=c.beta1,
      beta2=c.beta2,
      eps=c.eps,
      weight_decay=c.weight_decay,
      grad_clip=c.grad_clip,
      label_smoothing=c.label_smoothing,
    )


def keep_gradient() -> optax.GradientTransformation:
  """Passes the gradient on unchanged and keeps it as its state: the gradient `train_step`
  computed, readable from the optimizer state after the step."""
  return optax.GradientTransformation(
    lambda params: jax.tree.map(jnp.zeros_like, params),
    lambda updates, state, params=None: (updates, updates),
  )


def _numpy(tree):
  return jax.tree.map(lambda x: np.array(x), tree)  # copies: the state is donated to the step


def attend_trainer(setup: Setup, tx: optax.GradientTransformation, dtype: str = 'float32'):
  """`(state, step)`: Attend's train state of the model in `dtype` and its jitted train step as
  the loop runs it, `step(state, batch) -> (state, metrics)`. Call it inside `jax.enable_x64`
  for float64. In float32 the state holds the model's own arrays, which the step takes (donated,
  as the loop's): a setup's model trains once, as in train.py, with no second copy."""
  graphdef, variables = nnx.split(setup.model)
  cast = lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x
  annotated = steps.annotated_train_state(nnx.merge(graphdef, jax.tree.map(cast, variables)), tx)
  mesh = sharding.make_mesh(setup.config.mesh)
  # Placed on the mesh as training.setup.build_state places it: the step's outputs keep these
  # shardings, so its second call does not compile again.
  shardings = steps.plain(sharding.state_shardings(annotated, mesh))
  state = jax.device_put(steps.plain(annotated), shardings)
  jitted = loop.jit_train_step(setup.config, setup.task, state, mesh)
  key = jax.random.key(setup.config.seed + 1)  # the loop's dropout key
  return state, lambda state, batch: jitted(state, sharding.shard_batch(batch, mesh), key)


def attend_run(setup: Setup, batches: list[dict], dtype: str = 'float32') -> dict[str, Any]:
  """Attend's fine-tuning on `batches`: the loss of every step, the first step's gradient and
  the parameters before and after, as NumPy trees of Attend's parameter paths."""
  with jax.enable_x64(dtype == 'float64'):
    tx = optax.chain(keep_gradient(), make_optimizer(setup.config))
    state, step = attend_trainer(setup, tx, dtype)
    out = dict(initial=_numpy(state.params), losses=[])
    for i, batch in enumerate(batches):
      state, metrics = step(state, batch)
      out['losses'].append(float(metrics['loss']))
      if i == 0:
        out['gradients'] = _numpy(state.opt_state[0])
    out['params'] = _numpy(state.params)
  return out


def torch_run(
  setup: Setup,
  batches: list[dict],
  dtype: str = 'float32',
  attention: str = 'sdpa',
  settings: finetune_torch.Settings | None = None,
) -> dict[str, Any]:
  """The PyTorch side on `batches` (`settings`: the config's unless given), as `attend_run`
  returns Attend's, by transformers' tensor names."""
  trainer = finetune_torch.Trainer(
    finetune_torch.load(setup.source, dtype, attention), settings or setup.settings(len(batches))
  )
  out = dict(initial=trainer.values(), losses=[])
  for i, batch in enumerate(batches):
    result = trainer.step(batch, keep_gradients=i == 0)
    out['losses'].append(result['loss'])
    out.setdefault('gradients', result.get('gradients'))
  out['params'] = trainer.values()
  return out


def _at(tree: dict, path: str) -> np.ndarray:
  """The leaf of a parameter tree at an Attend path (`layers.0.ffn.w_1.kernel`)."""
  for part in path.split('.'):
    tree = tree[int(part) if part.isdigit() else part]
  return tree


def differences(setup: Setup, ours: dict, theirs: dict[str, np.ndarray]) -> dict[str, dict]:
  """Per checkpoint tensor, Attend's leaf against transformers' tensor transformed as the table
  says: `{'max_abs': the largest |difference|, 'scale': the largest |transformers' value|}`."""
  out = {}
  for path, name, transform in setup.rows:
    reference = np.asarray(transform(theirs[name]), np.float64)
    difference = np.abs(np.asarray(_at(ours, path), np.float64) - reference)
    out[name] = dict(max_abs=float(difference.max()), scale=float(np.abs(reference).max()))
  return out


def compare(setup: Setup, attend: dict, reference: dict) -> dict[str, Any]:
  """What differs between the two sides' runs (`attend_run`, `torch_run`): per tensor, the
  first gradients and the start and end parameters; per step, the losses. `moved` is the
  largest change of a tensor over the run (PyTorch's), the scale of its end difference."""
  moved = {
    name: float(np.abs(reference['params'][name] - reference['initial'][name]).max())
    for _, name, _ in setup.rows
  }
  return dict(
    losses=dict(attend=attend['losses'], torch=reference['losses']),
    loss_differences=[abs(a - b) for a, b in zip(attend['losses'], reference['losses'])],
    initial=differences(setup, attend['initial'], reference['initial']),
    gradients=differences(setup, attend['gradients'], reference['gradients']),
    params=differences(setup, attend['params'], reference['params']),
    moved=moved,
  )


def _parts(result: dict[str, Any]) -> list[tuple[str, str, dict[str, dict]]]:
  """(key, what the scale is, per-tensor differences) of the start parameters, the first
  gradients and the end parameters, these scaled by their tensor's change over the run."""
  end = {name: dict(d, scale=result['moved'][name]) for name, d in result['params'].items()}
  return [
    ('initial', 'largest |value|', result['initial']),
    ('gradient', 'largest |gradient|', result['gradients']),
    ('parameter', 'largest change over the run', end),
  ]


def _relative(d: dict[str, float]) -> float:
  return d['max_abs'] / max(d['scale'], 1e-30)


def report(result: dict[str, Any], count: int = 5) -> str:
  """The comparison as text: the losses step by step, and the `count` largest differences
  (relative to their scale) of each part."""
  losses = result['losses']
  lines = ['| step | Attend loss | PyTorch loss | difference |', '|---|---|---|---|']
  for i, (a, b) in enumerate(zip(losses['attend'], losses['torch'])):
    lines.append(f'| {i + 1} | {a:.7f} | {b:.7f} | {abs(a - b):.2e} |')
  for key, scale, per_tensor in _parts(result):
    lines += ['', f'Largest {key} differences (of the {scale}):']
    ranked = sorted(per_tensor.items(), key=lambda item: -_relative(item[1]))[:count]
    lines += [f'  {name}: {d["max_abs"]:.3g} of {d["scale"]:.3g}' for name, d in ranked]
  return '\n'.join(lines)


def summary(result: dict[str, Any]) -> dict[str, float]:
  """The largest differences of a comparison (`compare`): absolute, and relative to the scale."""
  out = dict(max_loss_difference=max(result['loss_differences']))
  for key, _, per_tensor in _parts(result):
    out[f'max_{key}_difference'] = max(d['max_abs'] for d in per_tensor.values())
    out[f'max_relative_{key}_difference'] = max(_relative(d) for d in per_tensor.values())
  return out


def timed(setup: Setup, args: argparse.Namespace) -> dict[str, Any]:
  """`--time`: both sides' step time, tokens/s and fraction of the matmul peak in this process,
  then each side's peak memory in a process of its own."""
  calls = 1 + args.repeats * args.calls  # the warm-up call, then the rounds
  batches = setup.batches(min(calls, args.steps))
  attend = attend_trainer(setup, make_optimizer(setup.config))
  trainer = finetune_torch.Trainer(
    finetune_torch.load(setup.source, 'float32', args.attention), setup.settings(calls)
  )
  times = finetune_speed.time_steps(
    attend, trainer, batches, repeats=args.repeats, calls=args.calls
  )
  del attend, trainer  # their memory, before the memory processes start
  flops = finetune_speed.train_flops(setup.config.model, setup.vocab_size, args.batch, args.tokens)
  scored = int(batches[0]['weights'].sum())
  row = finetune_speed.speed_row(times, flops, matmul_peak_gflops('float32'), scored)
  flags = [f'--{key}={getattr(args, key)}' for key in ('checkpoint', 'text', 'batch', 'tokens')]
  flags += [f'--{key}={value}' for key, value in _overrides(args).items()]
  row.update(
    finetune_speed.memories(
      flags, setup.source, setup.batches(MEMORY_STEPS), setup.settings(MEMORY_STEPS)
    )
  )
  print(finetune_speed.speed_text(row))
  return row


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
  """The config fields the flags set."""
  return {key: getattr(args, key) for key in OPTIMIZER_FIELDS if getattr(args, key) is not None}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--checkpoint', default='SmolLM2-135M-Instruct')
  parser.add_argument('--text', default='', help="a UTF-8 file ('': configs/pretrained_lm.py's)")
  parser.add_argument('--steps', type=int, default=20)
  parser.add_argument('--batch', type=int, default=8)
  parser.add_argument('--tokens', type=int, default=128, help='tokens a row (seq_length)')
  parser.add_argument('--dtype', default='float32', choices=('float32', 'float64'))
  parser.add_argument('--attention', default='sdpa', help="transformers' attn_implementation")
  for field, kind in OPTIMIZER_FIELDS.items():
    parser.add_argument(f'--{field}', type=kind, default=None, help='the config value if unset')
  parser.add_argument('--time', action='store_true', help='time the steps instead of comparing')
  parser.add_argument('--repeats', type=int, default=3, help='--time: turns of each side')
  # A turn's first step follows the other side's: Attend's SmolLM2 step then took 10 s, not 6 s.
  parser.add_argument('--calls', type=int, default=3, help='--time: steps back to back a turn')
  parser.add_argument('--memory', action='store_true', help="(--time's) Attend's memory alone")
  parser.add_argument('--json', default='')
  return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
  args = parse_args(argv)
  with tempfile.TemporaryDirectory() as workdir:
    setup = Setup(args.checkpoint, args.text, args.batch, args.tokens, workdir, **_overrides(args))
    if args.memory:  # a process of its own, started by --time: JAX and Attend only
      state, step = attend_trainer(setup, make_optimizer(setup.config))
      out = finetune_speed.attend_memory(state, step, setup.batches(MEMORY_STEPS))
      print(json.dumps(out))
      return out
    machine.torch_on_every_core()
    row = dict(
      checkpoint=args.checkpoint,
      text=setup.config.dataset.text_path,
      **{key: getattr(args, key) for key in ('batch', 'tokens', 'steps', 'attention')},
      settings=dataclasses.asdict(setup.settings(args.steps)),
      **machine.facts(args.dtype),
      load_average_before=os.getloadavg(),  # a shared machine's other work slows either side
    )
    if args.time:
      row.update(timed(setup, args))
    else:
      batches = setup.batches(args.steps)
      attend = attend_run(setup, batches, args.dtype)
      result = compare(setup, attend, torch_run(setup, batches, args.dtype, args.attention))
      print(report(result))
      row.update(summary(result), comparison=result)
      print('\n'.join(f'{key}: {value:.3g}' for key, value in summary(result).items()))
    row['load_average_after'] = os.getloadavg()
  if args.json:
    with open(args.json, 'w', encoding='utf-8') as f:
      json.dump(row, f, indent=1)
  return row


if __name__ == '__main__':
  main()
