"""Each row of benchmarks/train_bench.py made ready to time: `(parameter count, run)`, where
`run(n)` takes `n` train steps of Attend, the flax.linen peer or `torch.nn.Transformer` on the
same synthetic batch and waits for the device."""

import functools
import types

import jax

from benchmarks import linen_peer_train
from data.tokenizers import BOS_ID, PAD_ID
import models
from tasks.translation import teacher_forced_loss
from training import sharding
from training.loop import jit_train_step
from training.setup import build_state
from training.steps import parameter_count


def _jax_runner(step_fn, state, batch, dropout_key):
  """`run(n)`: n steps of `step_fn` threading the (donated) state, then waits for the device.

  Every call gets the same key, as in training/loop.py: both steps fold in their state's step.
  """
  carry = {'state': state}

  def run(n: int) -> None:
    state = carry['state']
    for _ in range(n):
      state, metrics = step_fn(state, batch, dropout_key)
    jax.block_until_ready((state, metrics))
    carry.update(state=state)

  return run


def attend_runner(config, size: dict, batch: dict):
  """(parameter count, run) for Attend's train step, set up as training/loop.py does."""
  data_args = dict(
    input_vocab_size=size['input_vocab'], output_vocab_size=size['output_vocab'], pad_id=PAD_ID
  )
  # The parts of the translation task that the train state and step read; the data is synthetic.
  task = types.SimpleNamespace(
    build_model=lambda model_config, rngs: models.build(model_config, rngs=rngs, **data_args),
    loss=functools.partial(
      teacher_forced_loss, bos_id=BOS_ID, pad_id=PAD_ID, label_smoothing=config.label_smoothing
    ),
  )
  mesh = sharding.make_mesh(config.mesh)
  state = build_state(config, task, mesh)
  params = parameter_count(state.params)
  step_fn = jit_train_step(config, task, state, mesh)
  return params, _jax_runner(
    step_fn,
    state,
    sharding.shard_batch(batch, mesh),
    jax.random.key(config.seed + 1),
  )


def linen_runner(config, size: dict, batch: dict):
  """(parameter count, run) for the flax.linen peer, placed on the devices as Attend is."""
  state, step_fn, mesh = linen_peer_train.from_config(config, size, batch)
  return parameter_count(state.params), _jax_runner(
    step_fn,
    state,
    sharding.shard_batch(batch, mesh),
    jax.random.key(config.seed + 1),
  )


def torch_runner(config, size: dict, batch: dict, total_steps: int, compile_model: bool):
  """(parameter count, run) for `torch.nn.Transformer`, or None when torch is not installed."""
  try:
    from benchmarks import torch_peer  # pylint: disable=import-outside-toplevel
  except ImportError:
    return None
  return torch_peer.from_config(config, size, batch, total_steps, compile_model)
