"""The peer of Attend's Transformer in PyTorch: `torch.nn.Transformer`, eager, AdamW.

Post-norm (`norm_first=False`), ReLU, LayerNorm epsilon 1e-6, token embeddings of standard
deviation `1/sqrt(D)` scaled by `sqrt(D)`, interleaved sin/cos positions, dropout on the embedding
sums, source-padding masks on the encoder self-attention and the cross-attention, a causal decoder
self-attention, and a tied output projection, as in `models.transformer.Transformer`.

Two differences from Attend stay, both from `nn.Transformer` itself:
- it always adds a final LayerNorm to each stack (also when `norm_first=False`): `4 * d_model`
  more parameters and two LayerNorms more per step;
- `nn.CrossEntropyLoss(label_smoothing=a)` spreads `a` over all V tokens and does not subtract
  the entropy floor, so its loss values differ from Attend's; the cost is the same.
Its extra dropouts (on the attention weights, and after the feed-forward ReLU) are removed, since
Attend has neither with configs/default.py.
"""

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch import nn

from benchmarks.peers import peer_model_config
from data.tokenizers import BOS_ID, PAD_ID  # the special ids of Attend's tokenizers
from training.optim import learning_rate_schedule


def sinusoidal_table(length: int, features: int) -> torch.Tensor:
  """`[length, features]`: sin on even features, cos on odd ones (Attend's layout)."""
  inv_freq = 10000.0 ** (-np.arange(0, features, 2, dtype=np.float64) / features)
  angles = np.arange(length)[:, None] * inv_freq  # [L, F/2]
  table = np.stack([np.sin(angles), np.cos(angles)], -1).reshape(length, features)
  return torch.from_numpy(table.astype(np.float32))


class TorchTransformer(nn.Module):
  """Embeddings + positions around `nn.Transformer`, with a (tied) output projection."""

  def __init__(
    self,
    *,
    input_vocab_size: int,
    output_vocab_size: int,
    d_model: int,
    num_heads: int,
    d_ff: int,
    num_encoder_layers: int,
    num_decoder_layers: int,
    dropout_rate: float,
    share_embeddings: bool,
    tie_output: bool,
    max_length: int = 512,
  ):
    super().__init__()
    self.d_model = d_model
    self.target_embed = nn.Embedding(output_vocab_size, d_model)
    self.source_embed = (
      self.target_embed if share_embeddings else nn.Embedding(input_vocab_size, d_model)
    )
    for table in (self.target_embed, self.source_embed):
      nn.init.normal_(table.weight, std=d_model**-0.5)
    self.transformer = nn.Transformer(
      d_model,
      num_heads,
      num_encoder_layers,
      num_decoder_layers,
      d_ff,
      dropout_rate,
      activation='relu',
      layer_norm_eps=1e-6,
      batch_first=True,
      norm_first=False,
    )
    for layer in (*self.transformer.encoder.layers, *self.transformer.decoder.layers):
      layer.dropout = nn.Identity()  # after the FFN ReLU
      for attn in (layer.self_attn, getattr(layer, 'multihead_attn', None)):
        if attn is not None:
          attn.dropout = 0.0  # on attention weights
    self.dropout = nn.Dropout(dropout_rate)
    self.output_proj = None if tie_output else nn.Linear(d_model, output_vocab_size)
    self.register_buffer('positions', sinusoidal_table(max_length, d_model), persistent=False)

  def _embed(self, table: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
    x = table(ids) * math.sqrt(self.d_model) + self.positions[: ids.shape[1]]  # [B, L, D]
    return self.dropout(x)

  def forward(self, inputs: torch.Tensor, decoder_inputs: torch.Tensor) -> torch.Tensor:
    """Logits `[B, T, V_out]` for source `[B, S]` and decoder inputs `[B, T]` (0 = padding)."""
    source_pad = inputs == PAD_ID  # [B, S], True = ignore
    length = decoder_inputs.shape[1]
    causal = torch.triu(
      torch.ones(length, length, dtype=torch.bool, device=inputs.device), diagonal=1
    )  # [T, T], True = blocked
    # No target padding mask, as in Attend: with right padding causality already hides it.
    y = self.transformer(
      self._embed(self.source_embed, inputs),
      self._embed(self.target_embed, decoder_inputs),
      tgt_mask=causal,
      tgt_is_causal=True,
      src_key_padding_mask=source_pad,
      memory_key_padding_mask=source_pad,
    )
    if self.output_proj is None:
      return nn.functional.linear(y, self.target_embed.weight)  # [B, T, V_out]
    return self.output_proj(y)


def param_count(model: nn.Module) -> int:
  """Trainable parameters; a tied table counts once (`parameters()` deduplicates)."""
  return sum(p.numel() for p in model.parameters() if p.requires_grad)


def shift_right(targets: torch.Tensor) -> torch.Tensor:
  """`[BOS, y_1, ..., y_{T-1}]` from `targets [B, T]`."""
  return nn.functional.pad(targets, (1, 0), value=BOS_ID)[:, :-1]


def make_trainer(
  model: TorchTransformer,
  batch: dict[str, np.ndarray],
  *,
  learning_rate: Callable[[int], float],
  b1: float,
  b2: float,
  eps: float,
  weight_decay: float,
  grad_clip: float,
  label_smoothing: float,
  compile_model: bool = False,
) -> Callable[[int], None]:
  """Returns `run(n)`, which trains `model` for `n` steps on `batch` and waits for the device.

  Args:
    model: the model, already on its device.
    batch: `{'inputs': [B, S], 'targets': [B, T]}` int arrays, 0 = padding.
    learning_rate: the learning rate of update `count` (0-based).
    b1: AdamW beta1.
    b2: AdamW beta2.
    eps: AdamW epsilon.
    weight_decay: AdamW decoupled weight decay (torch's default, 0.01, is not Attend's).
    grad_clip: global gradient-norm clip; 0 = off.
    label_smoothing: `nn.CrossEntropyLoss`'s smoothing.
    compile_model: wrap the model's forward in `torch.compile`.
  """
  device = next(model.parameters()).device
  inputs, targets = (
    torch.as_tensor(batch[k], dtype=torch.long, device=device) for k in ('inputs', 'targets')
  )
  decoder_inputs = shift_right(targets)
  optimizer = torch.optim.AdamW(
    model.parameters(), lr=1.0, betas=(b1, b2), eps=eps, weight_decay=weight_decay
  )
  # LambdaLR scales the base rate 1.0, so the lambda gives the rate itself.
  scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, learning_rate)
  loss_fn = nn.CrossEntropyLoss(ignore_index=PAD_ID, label_smoothing=label_smoothing)
  forward = torch.compile(model) if compile_model else model
  model.train()

  def step():
    optimizer.zero_grad(set_to_none=True)
    logits = forward(inputs, decoder_inputs)  # [B, T, V]
    loss = loss_fn(logits.flatten(0, 1), targets.flatten())
    loss.backward()
    if grad_clip > 0:
      nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    scheduler.step()

  def run(n: int) -> None:
    for _ in range(n):
      step()
    if device.type == 'cuda':
      torch.cuda.synchronize()

  return run


def from_config(config, size: dict, batch: dict, total_steps: int, compile_model: bool = False):
  """`(parameter count, run)`: the peer of `config`'s Transformer at `size`'s vocabularies and
  `make_trainer`'s `run` with `config`'s optimizer, schedule and label smoothing.

  Args:
    config: an Attend experiment config (`config.model` a post-norm Transformer).
    size: the vocabulary sizes, `{'input_vocab': ..., 'output_vocab': ...}`.
    batch: the batch every step trains on.
    total_steps: the updates the run will make, for which Attend's schedule is evaluated.
    compile_model: wrap the model's forward in `torch.compile`.
  """
  torch.manual_seed(config.seed)
  peer_config = peer_model_config(config.model, size)
  peer_config.pop('attention_dropout_rate')  # this peer always removes attention dropout
  device = 'cuda' if torch.cuda.is_available() else 'cpu'
  model = TorchTransformer(**peer_config).to(device)
  # Attend's schedule evaluated once for every update the run makes (update k uses step k + 1).
  rates = np.asarray(jax.vmap(learning_rate_schedule(config))(jnp.arange(1, total_steps + 2)))
  run = make_trainer(
    model,
    batch,
    learning_rate=lambda count: float(rates[min(count, len(rates) - 1)]),
    b1=config.beta1,
    b2=config.beta2,
    eps=config.eps,
    weight_decay=config.weight_decay,
    grad_clip=config.grad_clip,
    label_smoothing=config.label_smoothing,
    compile_model=compile_model,
  )
  return param_count(model), run
