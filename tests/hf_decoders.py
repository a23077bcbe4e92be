"""Tiny random Hugging Face decoder language models, built locally with transformers (nothing is
downloaded), and transformers' outputs on them: the reference for converted decoders.

`write_checkpoint(model_type, folder)` saves a seeded random GPT-2, Llama, Mistral or Qwen2 (the
keys of `ARCHITECTURES`) with `save_pretrained` (config.json, generation_config.json,
model.safetensors) and a word-level tokenizer.json; `write_sharded_checkpoint` saves the same
weights in several shards with their model.safetensors.index.json. `reference` gives the float32
logits and every layer's attention weights, `greedy` the tokens `generate` chooses without
sampling, and `hf_state` the state dict's names and shapes (for debugging a converter).
"""

import os

import numpy as np

# The tokenizer's words: pad, bos, eos, then w3 ... w96 (word i has id i).
WORDS = ['<pad>', '<bos>', '<eos>'] + [f'w{i}' for i in range(3, 97)]
VOCAB = len(WORDS)  # 97
_TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
# Llama-family sizes: 4 query heads sharing 2 key/value heads (head size 8). Dropout is 0 already.
_ROPE = dict(
  _TOKENS,
  vocab_size=VOCAB,
  hidden_size=32,
  intermediate_size=64,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  max_position_embeddings=128,
  rms_norm_eps=1e-5,
  attention_dropout=0.0,
)
# Keyword arguments of `transformers.AutoConfig.for_model(model_type, ...)`, one small model per
# architecture, each with what sets it apart. GPT-2: learned positions, biased LayerNorms, a fused
# c_attn (Conv1D, weights [in, out]) and an output tied to the token embedding. Llama: grouped
# heads, a rope base of 500,000 (5.24 moves `rope_theta` into config.rope_parameters) and an
# untied output. Mistral: a sliding window shorter than the test sequences; in eager mode
# transformers 5.24 masks it (masking_utils.sliding_window_overlay, `kv_idx > q_idx - window`
# and causal), so query i sees key j iff 0 <= i - j < window: itself and the 7 keys before.
# Qwen2: biases on the q/k/v projections (none on o_proj) and a tied output, as its small
# checkpoints have; its sliding window is off (use_sliding_window=False by default).
ARCHITECTURES = {
  'gpt2': dict(
    _TOKENS,
    vocab_size=VOCAB,
    n_embd=32,
    n_layer=2,
    n_head=4,
    n_positions=128,
    activation_function='gelu_new',
    layer_norm_epsilon=1e-5,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
    summary_first_dropout=0.0,
  ),
  'llama': dict(_ROPE, rope_theta=500000.0, tie_word_embeddings=False),
  'mistral': dict(_ROPE, sliding_window=8, tie_word_embeddings=False),
  'qwen2': dict(_ROPE, tie_word_embeddings=True),
}


def _save(model_type: str, folder: str, seed: int, **options) -> str:
  import tokenizers
  import torch
  import transformers

  torch.manual_seed(seed)
  config = transformers.AutoConfig.for_model(model_type, **ARCHITECTURES[model_type])
  model = transformers.AutoModelForCausalLM.from_config(
    config, attn_implementation='eager', dtype=torch.float32
  )
  # Norm weights start at 1 and biases at 0: moved, a converter that drops one cannot agree.
  with torch.no_grad():
    for name, parameter in model.named_parameters():
      if 'norm' in name or 'ln_' in name or name.endswith('.bias'):
        parameter.add_(0.1 * torch.randn_like(parameter))
  # Always safetensors in 5.24: `safe_serialization` is gone (it would land in the hub kwargs).
  model.save_pretrained(folder, **options)
  tokenizer = tokenizers.Tokenizer(
    tokenizers.models.WordLevel({word: i for i, word in enumerate(WORDS)}, unk_token='<pad>')
  )
  tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
  tokenizer.save(os.path.join(folder, 'tokenizer.json'))
  return folder


def write_checkpoint(model_type: str, folder: str, seed: int = 0) -> str:
  """Writes a seeded random `model_type` model into `folder` and returns the folder.

  Args:
    model_type: A key of `ARCHITECTURES`.
    folder: Where config.json, generation_config.json, model.safetensors and tokenizer.json go.
    seed: torch's seed for the initial weights and the norm and bias perturbation.
  """
  return _save(model_type, folder, seed)


def write_sharded_checkpoint(model_type: str, folder: str, seed: int = 0) -> str:
  """`write_checkpoint`'s weights (same seed, same values) in shards of at most 20 kB, named
  model-0000k-of-0000n.safetensors, with model.safetensors.index.json's weight map."""
  return _save(model_type, folder, seed, max_shard_size='20KB')


def _model(folder: str):
  import torch
  import transformers

  # `dtype`: 5.24 still reads `torch_dtype` but warns that it is deprecated.
  model = transformers.AutoModelForCausalLM.from_pretrained(
    folder, attn_implementation='eager', dtype=torch.float32, local_files_only=True
  )
  return model.eval()


def reference(folder: str, ids: np.ndarray) -> dict[str, np.ndarray]:
  """transformers' outputs for int `ids [B, T]`: float32 `logits [B, T, V]` and `attentions
  [B, L, N, T, T]` (every layer's softmax weights, query by key)."""
  import torch

  with torch.no_grad():
    out = _model(folder)(torch.as_tensor(np.asarray(ids, np.int64)), output_attentions=True)
  attentions = np.stack([layer.numpy() for layer in out.attentions], axis=1)
  return {'logits': out.logits.numpy().astype(np.float32), 'attentions': attentions}


def greedy(folder: str, prompt: np.ndarray, new_tokens: int = 32) -> np.ndarray:
  """The `new_tokens [B, new_tokens]` that `generate(do_sample=False)` appends to `prompt [B, P]`
  (unpadded), each the argmax of the logits so far: no EOS stops or suppresses a token."""
  import torch

  model = _model(folder)
  # With an eos id, min_new_tokens would set EOS's logit to -inf (not the argmax) and a finished
  # row would be padded: no eos id, so neither happens and every row runs new_tokens steps.
  model.generation_config.eos_token_id = None
  prompt = torch.as_tensor(np.asarray(prompt, np.int64))
  with torch.no_grad():
    out = model.generate(
      prompt,
      attention_mask=torch.ones_like(prompt),
      do_sample=False,
      max_new_tokens=new_tokens,
      min_new_tokens=new_tokens,
      eos_token_id=None,
      pad_token_id=0,
    )
  return out[:, prompt.shape[1] :].numpy()


def hf_state(folder: str) -> dict[str, tuple[int, ...]]:
  """The loaded model's `state_dict()` names and shapes (tied weights appear under both names)."""
  return {name: tuple(value.shape) for name, value in _model(folder).state_dict().items()}
