"""The PyTorch side of benchmarks/finetune_peer.py: a Hugging Face decoder fine-tuned as a PyTorch
user does it, transformers' model and `torch.optim.AdamW`, set to Attend's optimizer and loss.

It imports neither JAX nor Attend's packages (benchmarks.resident_memory imports nothing), so
that the memory of its side is measured in a process that holds torch alone (JAX's libraries
alone are about 190 MB resident):

    python -m benchmarks.finetune_torch --source=FOLDER --batches=BATCHES.npz --settings='{...}'

(`finetune_peer --time` starts it, with the batches and settings of its own run.)
"""

import argparse
import dataclasses
import json
import math
import os
from typing import Any, Callable

import numpy as np

from benchmarks import resident_memory

IGNORED = -100  # transformers' label of a position without a target (`ignore_index`)
KEYS = ('inputs', 'targets', 'weights')  # what the PyTorch side reads of Attend's batches


@dataclasses.dataclass(frozen=True)
class Settings:
  """The settings both sides train with, as Attend's config names them (training/config.py).

  Attributes:
    learning_rates: the rate of each update in order: Attend's schedule at step k for the k-th
      (training/optim.py).
    beta1, beta2, eps, weight_decay: AdamW's.
    grad_clip: the global gradient norm clipped to (0 = no clipping).
    label_smoothing: the mass spread over the V - 1 wrong tokens.
  """

  learning_rates: tuple[float, ...]
  beta1: float
  beta2: float
  eps: float
  weight_decay: float
  grad_clip: float
  label_smoothing: float


def load(source: str, dtype: str = 'float32', attention: str = 'sdpa'):
  """transformers' model of a Hugging Face folder or `.gguf` file (dequantised), in training mode.

  Args:
    source: the folder, or the `.gguf` file (read from its folder with `gguf_file`).
    dtype: 'float32' or 'float64'.
    attention: transformers' `attn_implementation` ('sdpa', its default, or 'eager').
  """
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel

  options = {}
  if source.endswith('.gguf'):
    source, options = os.path.dirname(source) or '.', dict(gguf_file=os.path.basename(source))
  model = transformers.AutoModelForCausalLM.from_pretrained(
    source, dtype=getattr(torch, dtype), attn_implementation=attention, **options
  )
  return model.train()  # the checkpoints' dropout rates are 0: training mode changes nothing


def labels(targets: np.ndarray, weights: np.ndarray):
  """transformers' labels of Attend's `targets [B, T]`: `IGNORED` where the weight is 0."""
  import torch  # pylint: disable=import-outside-toplevel

  return torch.from_numpy(np.where(weights > 0, targets, IGNORED).astype(np.int64))


def loss(model, inputs, target_labels, label_smoothing: float):
  """The mean cross-entropy of the scored targets, as transformers' `ForCausalLMLoss` computes it
  (logits in float32, `IGNORED` positions left out, the mean over the rest), here of `inputs
  [B, T]` against their next tokens `target_labels [B, T]` (transformers' labels shifted left by
  one: the row's last target is predicted at the last input, as in Attend's batch).

  Torch's `label_smoothing=a` spreads `a` over all V tokens; Attend spreads its `s` over the V - 1
  wrong ones and subtracts the smoothed loss's minimum (tasks/losses.py). With a = s V / (V - 1)
  the two target distributions are the same, and the minimum is subtracted here.
  """
  import torch  # pylint: disable=import-outside-toplevel

  logits = model(input_ids=inputs).logits.float()  # [B, T, V]
  vocab = logits.shape[-1]
  smoothing = label_smoothing * vocab / (vocab - 1)
  value = torch.nn.functional.cross_entropy(
    logits.view(-1, vocab), target_labels.view(-1), ignore_index=IGNORED, label_smoothing=smoothing
  )
  return value - minimum_loss(label_smoothing, vocab)


def minimum_loss(label_smoothing: float, vocab: int) -> float:
  """The entropy of the smoothed target distribution: the least a smoothed loss can be."""
  if label_smoothing == 0:
    return 0.0
  on, off = 1.0 - label_smoothing, label_smoothing / (vocab - 1)
  return -(on * math.log(on) + (vocab - 1) * off * math.log(off))


class Trainer:
  """transformers' model and `torch.optim.AdamW` (one parameter group: every parameter decayed,
  as optax.adamw without a mask in training/optim.py), gradients clipped by
  `torch.nn.utils.clip_grad_norm_` when `settings.grad_clip > 0`."""

  def __init__(self, model, settings: Settings):
    import torch  # pylint: disable=import-outside-toplevel

    self.model, self.settings, self.updates = model, settings, 0
    self.parameters = dict(model.named_parameters())  # a tied head appears once
    self.optimizer = torch.optim.AdamW(
      self.parameters.values(),
      lr=settings.learning_rates[0],
      betas=(settings.beta1, settings.beta2),
      eps=settings.eps,
      weight_decay=settings.weight_decay,
    )

  def step(self, batch: dict[str, np.ndarray], *, keep_gradients: bool = False) -> dict[str, Any]:
    """One update on Attend's batch (`inputs`, `targets`, `weights`, each `[B, T]`).

    Returns:
      `{'loss': float}`, and with `keep_gradients` the unclipped gradient of every parameter
      by name under 'gradients' (NumPy).
    """
    import torch  # pylint: disable=import-outside-toplevel

    self.optimizer.zero_grad(set_to_none=True)
    inputs = torch.from_numpy(np.asarray(batch['inputs'], np.int64))
    value = loss(
      self.model, inputs, labels(batch['targets'], batch['weights']), self.settings.label_smoothing
    )
    value.backward()
    out = dict(loss=value.item())
    if keep_gradients:
      out['gradients'] = {n: p.grad.detach().numpy().copy() for n, p in self.parameters.items()}
    if self.settings.grad_clip > 0:
      torch.nn.utils.clip_grad_norm_(self.parameters.values(), self.settings.grad_clip)
    for group in self.optimizer.param_groups:
      group['lr'] = self.settings.learning_rates[self.updates]
    self.optimizer.step()
    self.updates += 1
    return out

  def values(self) -> dict[str, np.ndarray]:
    """Every parameter's value by name (NumPy copies)."""
    return {name: p.detach().numpy().copy() for name, p in self.parameters.items()}


def peak_memory_mib() -> float | None:
  """The peak resident memory (MiB) of this process since it started its program or since
  `resident_memory.reset_peak`; None without /proc."""
  peak = resident_memory.status_kib('VmHWM')
  return None if peak is None else peak / 1024


def memory(source: str, batches: dict[str, np.ndarray], settings: Settings) -> dict[str, float]:
  """This process's peak resident memory (MiB) over training on `batches` (`[N, B, T]` each): the
  whole process's (loading included), and the steps' after the first (reset after it)."""
  import torch  # pylint: disable=import-outside-toplevel

  torch.set_num_threads(os.cpu_count())  # as benchmarks.machine.torch_on_every_core
  trainer = Trainer(load(source), settings)
  first = lambda i: {key: batches[key][i] for key in KEYS}
  trainer.step(first(0))
  return measured_steps(lambda: [trainer.step(first(i)) for i in range(1, len(batches['inputs']))])


def measured_steps(run: Callable[[], Any]) -> dict[str, float | None]:
  """The peak resident memory (MiB) of the process until now, `process_peak_mib`, and over
  `run()`, `step_peak_mib` (None where it cannot be reset)."""
  process = peak_memory_mib()
  reset = resident_memory.reset_peak()
  run()
  return dict(
    process_peak_mib=max(process or 0, peak_memory_mib() or 0) or None,
    step_peak_mib=peak_memory_mib() if reset else None,
  )


def main(argv: list[str] | None = None) -> dict[str, float]:
  """Prints, as one JSON line, the peak memory of training the model on the saved batches."""
  parser = argparse.ArgumentParser(description='The peak memory of the PyTorch side.')
  parser.add_argument('--source', required=True, help='a Hugging Face folder or a .gguf file')
  parser.add_argument('--batches', required=True, help="an .npz of 'inputs', 'targets', 'weights'")
  parser.add_argument('--settings', required=True, help="Settings' fields as a JSON object")
  args = parser.parse_args(argv)
  with np.load(args.batches) as saved:
    batches = dict(saved)
  out = memory(args.source, batches, Settings(**json.loads(args.settings)))
  print(json.dumps(out))
  return out


if __name__ == '__main__':
  main()
