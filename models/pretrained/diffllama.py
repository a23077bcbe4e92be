"""DiffLlama (transformers' `DiffLlamaForCausalLM`): Llama with differential attention (Ye et al.
2025), `attention='differential'` in Attend (`attention.differential`).

Its checkpoint is Llama's plus four vectors `lambda_q1`, `lambda_k1`, `lambda_q2`, `lambda_k2`
`[head_dim]` per layer, which make each layer's λ; λ_init follows the layer's 0-based depth, as
DiffLlama's `layer_idx`, and the pairs' RMS norm takes `rms_norm_eps`, the stack's `norm_eps`.
decoders.py registers the architecture from these three pieces and Llama's arguments.
"""

import dataclasses
from typing import Any

from models.pretrained import decoder_configs, decoder_tables
from models.pretrained.tables import SAME, Row

LAMBDAS = ('lambda_q1', 'lambda_k1', 'lambda_q2', 'lambda_k2')
# Llama's refusals, and the attention dropout DiffLlama itself refuses; `lambda_std_dev` only
# initialises.
REFUSED = {'rope_scaling': None, 'pretraining_tp': 1, 'attention_dropout': 0.0}


def args(llama_args: dict[str, Any]) -> dict[str, Any]:
  """DecoderLM's arguments of a DiffLlama config from Llama's arguments of the same config."""
  stack = dataclasses.replace(llama_args['stack'], attention='differential')
  return dict(llama_args, stack=stack)


def rows(num_layers: int, config: dict[str, Any]) -> list[Row]:
  """Llama's table (biases on the four attention projections with `attention_bias`, none in the
  MLP) and each layer's λ vectors."""
  lambdas = [
    (f'layers.{i}.self_attn.{name}', f'model.layers.{i}.self_attn.{name}', SAME)
    for i in range(num_layers)
    for name in LAMBDAS
  ]
  return [*decoder_tables.llama_rows(num_layers, {**config, 'mlp_bias': False}), *lambdas]


def config(decoder_args: dict[str, Any]) -> dict[str, Any]:
  """DiffLlamaForCausalLM's config.json of DecoderLM's arguments: Llama's, with no MLP bias."""
  written = decoder_configs.llama(decoder_args)
  del written['mlp_bias']  # DiffLlama's MLP has none
  return {**written, 'model_type': 'diffllama', 'architectures': ['DiffLlamaForCausalLM']}
