"""The way back of decoders.py's `args`: DecoderLM's arguments -> a config.json per model_type.

Each function takes what `decoders.decoder_args` gives (`stack`, the output options and
`vocab_size`) and writes the keys transformers' class of that model_type reads, only those: a
key the class would ignore (a bias Mistral has no place for) is left out, so that reading the
config back (`decoders.decoder_args`) gives the arguments the class really computes with, and
the writer (writer.py) can tell an exact fit from a near one by comparing the two.
"""

from typing import Any

from models.stack_config import StackConfig

# Attend's activation -> config.json's, per family (the inverse of decoders.ACTIVATIONS, with
# each family's own spelling of the tanh GELU).
_LLAMA_ACTIVATIONS = {'silu': 'silu', 'gelu': 'gelu_pytorch_tanh', 'gelu_exact': 'gelu'}
_GPT2_ACTIVATIONS = {'gelu': 'gelu_new', 'gelu_exact': 'gelu', 'silu': 'silu'}


def _activation(stack: StackConfig, names: dict[str, str]) -> str:
  """config.json's name of the stack's activation; one it has no name for stays Attend's, which
  the reader then refuses (so the writer names the field)."""
  return names.get(stack.activation, stack.activation)


def common_keys(args: dict[str, Any], architecture: str) -> dict[str, Any]:
  """The keys every Llama-layout config shares (Llama, Mistral, Qwen2, Gemma 3, Qwen3-Next)."""
  stack: StackConfig = args['stack']
  return {
    'architectures': [architecture],
    'vocab_size': args['vocab_size'],
    'hidden_size': stack.d_model,
    'intermediate_size': stack.d_ff,
    'num_hidden_layers': stack.num_layers,
    'num_attention_heads': stack.num_heads,
    'num_key_value_heads': stack.kv_heads(stack.num_heads),
    'head_dim': stack.head_size,
    'rms_norm_eps': stack.norm_eps,
    'max_position_embeddings': stack.max_length,
    'attention_dropout': stack.attention_dropout_rate,
    'tie_word_embeddings': args['tie_output'],
  }


def _rope(base: float) -> dict[str, Any]:
  return {'rope_type': 'default', 'rope_theta': base}


def _llama_family(args: dict[str, Any], model_type: str, architecture: str) -> dict[str, Any]:
  """What Llama, Mistral and Qwen2 write alike: the common fields, the activation, rotary."""
  stack = args['stack']
  return {
    'model_type': model_type,
    **common_keys(args, architecture),
    'hidden_act': _activation(stack, _LLAMA_ACTIVATIONS),
    'rope_theta': stack.rope_base,
    'rope_parameters': _rope(stack.rope_base),
  }


def llama(args: dict[str, Any]) -> dict[str, Any]:
  """LlamaForCausalLM: biases on all four attention projections or none (`attention_bias`)."""
  stack = args['stack']
  return {
    **_llama_family(args, 'llama', 'LlamaForCausalLM'),
    'attention_bias': stack.qkv_bias,
    'mlp_bias': stack.mlp_bias,
  }


def mistral(args: dict[str, Any]) -> dict[str, Any]:
  """MistralForCausalLM: Llama's without biases, with a window over every layer."""
  return {
    **_llama_family(args, 'mistral', 'MistralForCausalLM'),
    'sliding_window': args['stack'].window or None,
  }


def qwen2(args: dict[str, Any]) -> dict[str, Any]:
  """Qwen2ForCausalLM: biases on the queries, keys and values only; no window (the reader
  refuses Qwen2's `use_sliding_window`)."""
  return {**_llama_family(args, 'qwen2', 'Qwen2ForCausalLM'), 'use_sliding_window': False}


def _scalar(query_scale: float | None, head_size: int) -> float | int:
  """Gemma's `query_pre_attn_scalar` of a query scale (None: 1/sqrt(head size)): an integer
  where it is one, so that its -1/2 power gives the scale back exactly."""
  scalar = head_size if query_scale is None else query_scale**-2
  return round(scalar) if abs(scalar - round(scalar)) < 1e-9 * scalar else scalar


def gemma3_text(args: dict[str, Any]) -> dict[str, Any]:
  """Gemma3ForCausalLM: the window's layers with every `global_every`-th one global, each kind
  with its rotary base, the query scale, soft-capping."""
  stack: StackConfig = args['stack']
  every = stack.global_every
  kinds = [
    'full_attention'
    if not stack.window or (every and (i + 1) % every == 0)
    else 'sliding_attention'
    for i in range(stack.num_layers)
  ]
  local = stack.rope_base
  full = stack.rope_base_global if every and stack.rope_base_global is not None else local
  return {
    'model_type': 'gemma3_text',
    **common_keys(args, 'Gemma3ForCausalLM'),
    'hidden_activation': _activation(stack, _LLAMA_ACTIVATIONS),
    'attention_bias': stack.qkv_bias,
    'query_pre_attn_scalar': _scalar(stack.query_scale, stack.head_size),
    'attn_logit_softcapping': stack.softcap or None,
    'final_logit_softcapping': None,
    'sliding_window': stack.window or None,
    'layer_types': kinds,
    'rope_parameters': {'sliding_attention': _rope(local), 'full_attention': _rope(full)},
  }


def gpt2(args: dict[str, Any]) -> dict[str, Any]:
  """GPT2LMHeadModel: learned positions, biased LayerNorms and projections, a tied head."""
  stack: StackConfig = args['stack']
  return {
    'model_type': 'gpt2',
    'architectures': ['GPT2LMHeadModel'],
    'vocab_size': args['vocab_size'],
    'n_embd': stack.d_model,
    'n_layer': stack.num_layers,
    'n_head': stack.num_heads,
    'n_inner': stack.d_ff,
    'n_positions': stack.max_length,
    'layer_norm_epsilon': stack.norm_eps,
    'activation_function': _activation(stack, _GPT2_ACTIVATIONS),
    'resid_pdrop': stack.dropout_rate,
    'embd_pdrop': stack.dropout_rate,
    'attn_pdrop': stack.attention_dropout_rate,
    'tie_word_embeddings': args['tie_output'],
  }
