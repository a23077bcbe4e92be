"""Attend's fine-tuning step equals PyTorch's (transformers' model, torch.optim.AdamW) on tiny
random Llama and Gemma 3 checkpoints (tests/tiny_decoders.py), through benchmarks/finetune_peer.py:
the first step's gradients tensor by tensor, the loss at each of 20 steps, and every parameter
after them; and the same comparisons catch a setting changed on one side.

Both sides run in float64 (Attend under jax.enable_x64 with float64 parameters, transformers'
model `.double()`), except where each computes in float32 anyway: transformers' RMSNorm, rotary
angles (tests/test_pretrained_decoders.py) and eager attention's softmax, and both losses'
log-softmax on the PyTorch side (transformers' `ForCausalLMLoss` upcasts the logits with
`.float()`; Attend's `tasks.losses.cross_entropy` keeps float64). Those roundings, u = 2^-24 =
6e-8 relative, set the tolerances below.

The config is configs/pretrained_lm.py's with every optimizer and loss setting stated here:
the rsqrt schedule to a peak rate of 1e-3 after 5 warm-up steps, betas 0.9 and 0.98, global-norm
clipping at 1 (exercised: the first gradients' norm is about 3.4), label smoothing 0.1 (torch's
spread differently, finetune_torch.loss), weight decay 0.1 (decoupled, every parameter, as
optax.adamw without a mask: exercised, so that a side without it shows), and Adam's epsilon 1e-3
(see `parameter_atol`).
"""

import contextlib
import dataclasses

import numpy as np
import pytest
from tiny_decoders import VOCAB, write_checkpoint

pytest.importorskip('transformers', reason='the reference implementation (test extra)')

from benchmarks import finetune_peer, finetune_torch  # noqa: E402

# Equality with transformers: `make test` runs it again with XLA:CPU limited to SSE4.2.
pytestmark = pytest.mark.portable

STEPS, BATCH, TOKENS = 20, 4, 16
SETTINGS = dict(
  schedule='rsqrt',
  learning_rate=1e-3,
  warmup_steps=5,
  beta1=0.9,
  beta2=0.98,
  eps=1e-3,
  weight_decay=0.1,
  grad_clip=1.0,
  label_smoothing=0.1,
)
# Gradients of the first step, up to 0.33 in size. Each entry of a weight's gradient is a sum over
# the batch's 64 positions of terms carrying the float32 roundings above (a few u relative each):
# at worst 64 x 6e-8 x 0.33 = 1.3e-6 apart. Measured: 1.9e-7 at most. A real difference is of
# the gradient's own size (label smoothing off: 1e-2; a misplaced norm or head: everything).
GRADIENT_ATOL = 2e-6
# The losses (about 4.4) are means of 64 per-token losses, float32 on the PyTorch side: at worst
# 64 x 6e-8 x 4.4 = 1.7e-5 apart. Measured: 7e-7 at most.
LOSS_ATOL = 2e-5


@contextlib.contextmanager
def _one_torch_thread():
  """torch on one thread: for models this tiny a second thread only waits at every operation's
  barrier, and on a busy 2-core machine waits for a descheduled thread: 0.9 s a step instead of
  5 ms, measured at a load average of 3."""
  import torch

  threads = torch.get_num_threads()
  torch.set_num_threads(1)
  try:
    yield
  finally:
    torch.set_num_threads(threads)


def parameter_atol(settings: finetune_torch.Settings) -> float:
  """How far apart the parameters may end. Adam moves a parameter by rate x m/(sqrt(v) + eps),
  m and v running means of its gradient and its square: a change dg of the gradients changes that
  direction by at most about 2 dg / eps (numerator and denominator). With the configs' eps (1e-8,
  1e-9), a gradient entry near 0 whose sign float32 rounding flips would move the two sides a
  whole rate apart; with eps = 1e-3, gradients GRADIENT_ATOL apart move them at most
  2 x 2e-6 / 1e-3 = 4e-3 of a rate apart per step, summed over the steps' rates (1.3e-2 in all):
  5e-5. Measured: 1.4e-8 at most. Weight decay 0.1 left out on one side moves them
  1.3e-2 x 0.1 x |w| apart: 1.7e-3 and 4e-4 for the largest weights of the tiny Llama (0.7 and
  more) and Gemma 3 (0.3)."""
  return 2 * GRADIENT_ATOL / settings.eps * sum(settings.learning_rates)


@pytest.fixture(scope='module', params=['llama', 'gemma3_text'])
def runs(request, tmp_path_factory):
  """Per architecture: the setup, its batches, and both sides' float64 runs of 20 steps."""
  base = tmp_path_factory.mktemp(request.param)
  text = base / 'text.txt'
  words = np.random.default_rng(0).integers(1, VOCAB, (300, 9))
  text.write_text('\n'.join(' '.join(f'w{i}' for i in row) for row in words))
  folder = write_checkpoint(request.param, str(base / 'checkpoint'))
  setup = finetune_peer.Setup(folder, str(text), BATCH, TOKENS, str(base / 'workdir'), **SETTINGS)
  batches = setup.batches(STEPS)
  attend = finetune_peer.attend_run(setup, batches, 'float64')
  with _one_torch_thread():
    reference = finetune_peer.torch_run(setup, batches, 'float64', 'eager')
  return setup, batches, attend, reference, finetune_peer.compare(setup, attend, reference)


def _worst(per_tensor: dict) -> tuple[str, float]:
  name = max(per_tensor, key=lambda n: per_tensor[n]['max_abs'])
  return name, per_tensor[name]['max_abs']


def test_first_step_gradients_agree_tensor_by_tensor(runs):
  setup, _, _, reference, result = runs
  # The checkpoint's table names every parameter transformers trains: none goes unchecked.
  assert {name for _, name, _ in setup.rows} == set(reference['gradients'])
  assert all(d['scale'] > 100 * GRADIENT_ATOL for d in result['gradients'].values())
  assert _worst(result['gradients'])[1] <= GRADIENT_ATOL, _worst(result['gradients'])
  # Clipping is exercised: the gradients' global norm (about 3.4) is above config.grad_clip.
  norm = np.sqrt(sum(np.sum(g**2) for g in reference['gradients'].values()))
  assert norm > setup.config.grad_clip


def test_the_loss_agrees_at_every_step(runs):
  _, _, attend, _, result = runs
  assert len(attend['losses']) == STEPS
  assert max(result['loss_differences']) <= LOSS_ATOL, result['loss_differences']


def test_parameters_agree_after_twenty_steps(runs):
  setup, _, _, _, result = runs
  assert _worst(result['initial'])[1] == 0  # the same float32 weights on both sides
  atol = parameter_atol(setup.settings(STEPS))
  assert _worst(result['params'])[1] <= atol, (_worst(result['params']), atol)
  assert min(result['moved'].values()) > 20 * atol  # every tensor moved well past the tolerance


def test_the_reference_loss_is_transformers_own_with_labels_shifted(runs):
  """finetune_torch.loss reads Attend's targets as transformers' labels shifted left by one: on
  the row of inputs and last target, transformers' own loss (`labels=`) is the same, also where
  targets are left out (weight 0)."""
  import torch

  setup, batches, _, _, _ = runs
  model = finetune_torch.load(setup.source, 'float64', 'eager')
  inputs, targets = batches[0]['inputs'], batches[0]['targets']
  weights = batches[0]['weights'].copy()
  weights[:, -3:] = weights[0, :2] = 0
  row = np.concatenate([inputs, targets[:, -1:]], axis=1).astype(np.int64)  # [B, T + 1]
  row_labels = row.copy()
  row_labels[:, 1:][weights == 0] = finetune_torch.IGNORED
  with torch.no_grad():
    theirs = model(input_ids=torch.from_numpy(row), labels=torch.from_numpy(row_labels)).loss
    ours = finetune_torch.loss(
      model, torch.from_numpy(inputs), finetune_torch.labels(targets, weights), 0.0
    )
  assert abs(ours.item() - theirs.item()) <= LOSS_ATOL


def test_a_setting_changed_on_one_side_is_caught(runs):
  """The same comparisons flag PyTorch trained without weight decay, with the rates one step
  late (optax's update count read as the step: a first update at rate 0), or without label
  smoothing."""
  setup, batches, attend, _, _ = runs
  settings = setup.settings(STEPS)
  atol = parameter_atol(settings)
  changed = (
    dataclasses.replace(settings, weight_decay=0.0),
    dataclasses.replace(settings, learning_rates=(0.0, *settings.learning_rates[:-1])),
  )
  unsmoothed = dataclasses.replace(settings, label_smoothing=0.0)
  with _one_torch_thread():
    others = [finetune_peer.torch_run(setup, batches, 'float64', 'eager', c) for c in changed]
    other = finetune_peer.torch_run(setup, batches[:1], 'float64', 'eager', unsmoothed)
  for run in others:
    assert _worst(finetune_peer.compare(setup, attend, run)['params'])[1] > 2 * atol
  gradients = finetune_peer.differences(setup, attend['gradients'], other['gradients'])
  assert _worst(gradients)[1] > 100 * GRADIENT_ATOL
  assert abs(other['losses'][0] - attend['losses'][0]) > 100 * LOSS_ATOL
