"""Tiny random Hugging Face decoder checkpoints, built locally with transformers (no download),
and their reference outputs, for tests/test_pretrained_decoders.py.

Each folder holds what `save_pretrained` writes (config.json, model.safetensors, or shards with
their index) and a word-level tokenizer.json. Norm weights and every bias are moved away from
their initial 1 and 0, so a conversion that drops one cannot agree by accident.
"""

import os

import numpy as np

VOCAB = 97
# transformers computes the Llama family's RMSNorm and rotary angles in float32 even in a float64
# model (tests/test_pretrained_decoders.py), so logits compared with Attend's in float64 carry
# float32 rounding: this much is allowed in a metric read from them, against head effects of
# order 0.01-1 (tests/test_head_effects.py, tests/test_path_patching.py).
HOOKED_TOLERANCE = 1e-5
# Weights ten times the default scale: at 0.02 a tied model's greedy text repeats one token, and
# generation equal token for token would prove little.
_SIZES = dict(
  vocab_size=VOCAB, max_position_embeddings=128, tie_word_embeddings=False, initializer_range=0.2
)
_LLAMA = dict(
  _SIZES, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)
# One per architecture, each with what sets it apart: GPT-2 learned positions, biased LayerNorm,
# a fused c_attn and tied output; Llama grouped-query heads (4 query, 2 key/value) and a rope
# base of 500,000; Mistral a sliding window shorter than the test sequences; Qwen2 biases on the
# query, key and value projections and a tied output; Gemma 3 a global layer between two of a
# window of 6, each kind with its own rope base, a head size (24) other than D/N (16), scores
# scaled by 16^-1/2 (not 24^-1/2), a key/value head shared by two query heads, (1 + w) RMSNorms
# before and after both sublayers, qk-norm, GeGLU and sqrt(D)-scaled tied embeddings.
CONFIGS = {
  'gpt2': dict(
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
    bos_token_id=1,
    eos_token_id=2,
    initializer_range=0.2,
  ),
  'llama': dict(_LLAMA, intermediate_size=64, rope_theta=500000.0, rms_norm_eps=1e-5),
  'mistral': dict(_LLAMA, intermediate_size=64, sliding_window=8, rms_norm_eps=1e-5),
  'qwen2': dict(_LLAMA, intermediate_size=48, rms_norm_eps=1e-6, tie_word_embeddings=True),
  'gemma3_text': dict(
    _SIZES,
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=24,
    query_pre_attn_scalar=16,
    intermediate_size=64,
    sliding_window=6,
    layer_types=['sliding_attention', 'full_attention', 'sliding_attention'],
    rope_parameters={
      'sliding_attention': {'rope_type': 'default', 'rope_theta': 10000.0},
      'full_attention': {'rope_type': 'default', 'rope_theta': 1000000.0},
    },
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    # Its default: larger sqrt(D)-scaled embeddings outweigh the normalised sublayer outputs, and
    # the tied head then repeats the last token.
    initializer_range=0.02,
  ),
}


def write_checkpoint(
  model_type: str,
  folder: str,
  *,
  shard_size: str | None = None,
  tokenizer_json: str = '',
  **fields,
) -> str:
  """Writes a seeded random `model_type` checkpoint into `folder` (sharded when `shard_size`,
  e.g. '20KB', is given) and returns the folder. Its tokenizer is `tokenizer_json` where given
  (the vocabulary then its size), else `VOCAB` words `w0`, `w1`, ...; `fields` change its
  config."""
  import tokenizers
  import torch
  import transformers

  torch.manual_seed(0)
  fields = {**CONFIGS[model_type], **fields}
  if tokenizer_json:
    fields['vocab_size'] = tokenizers.Tokenizer.from_str(tokenizer_json).get_vocab_size()
  config = transformers.AutoConfig.for_model(model_type, **fields)
  model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation='eager')
  with torch.no_grad():
    for name, parameter in model.named_parameters():
      if 'norm' in name or 'ln_' in name or name.endswith('.bias'):
        parameter.add_(0.1 * torch.randn_like(parameter))
  options = {} if shard_size is None else dict(max_shard_size=shard_size)
  model.save_pretrained(folder, **options)
  if tokenizer_json:
    with open(os.path.join(folder, 'tokenizer.json'), 'w', encoding='utf-8') as f:
      f.write(tokenizer_json)
    return folder
  words = tokenizers.models.WordLevel({f'w{i}': i for i in range(VOCAB)}, unk_token='w0')
  tokenizer = tokenizers.Tokenizer(words)
  tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
  tokenizer.save(os.path.join(folder, 'tokenizer.json'))
  return folder


def _model(folder: str):
  """The checkpoint in transformers, in float64: compared with Attend in float64, the two agree
  to float64 rounding on any CPU (tests/float64.py)."""
  import torch
  import transformers

  model = transformers.AutoModelForCausalLM.from_pretrained(
    folder, attn_implementation='eager', dtype=torch.float64
  )
  return model.eval()


def reference(folder: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """transformers' float64 logits `[B, T, V]` and attention weights `[B, L, N, T, T]`."""
  import torch

  with torch.no_grad():
    out = _model(folder)(torch.tensor(ids), output_attentions=True)
  return out.logits.numpy(), np.stack([a.numpy() for a in out.attentions], axis=1)


def greedy(folder: str, prompt: np.ndarray, new_tokens: int) -> np.ndarray:
  """`generate(do_sample=False)`'s `new_tokens` tokens after `prompt [B, P]` (no early stop)."""
  import torch

  model = _model(folder)
  with torch.no_grad():
    out = model.generate(
      torch.tensor(prompt),
      attention_mask=torch.ones(prompt.shape, dtype=torch.long),
      do_sample=False,
      max_new_tokens=new_tokens,
      min_new_tokens=new_tokens,
      eos_token_id=None,
      pad_token_id=0,
    )
  return out[:, prompt.shape[1] :].numpy()


def written_and_converted(model_type: str, tmp_path_factory) -> tuple[str, object]:
  """A seeded random `model_type` checkpoint written in a fresh folder, and Attend's model of it
  (`models.pretrained.load_decoder`): a module fixture's value in the tests that compare the two."""
  from models import pretrained

  folder = write_checkpoint(model_type, str(tmp_path_factory.mktemp(model_type)))
  return folder, pretrained.load_decoder(pretrained.read(folder))[0]
