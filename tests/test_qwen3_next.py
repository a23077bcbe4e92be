"""Qwen3-Next converted into Attend's hybrid DecoderLM (models/pretrained/qwen3_next.py) equals
transformers on a tiny random checkpoint built locally: three Gated DeltaNet layers and one gated
softmax layer with partial rotary positions and qk-norm, every MLP dense. Logits, greedy
continuation and cached decoding; a mixture of experts is refused in one sentence."""

import json
import os

import float64
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_decoders import VOCAB

from models import generation, pretrained
from models.pretrained.decoders import decoder_args

pytest.importorskip('transformers', reason='the reference implementation (test extra)')
IDS = np.random.default_rng(0).integers(0, VOCAB, (2, 20))
# Every size apart from the others, so a transposed or mis-cut block cannot fit: 2 key heads of
# 8 serving 4 value heads of 6, softmax heads of 8 (4 query, 2 key/value) rotated on half their
# features, a convolution of width 4.
CONFIG = dict(
  vocab_size=VOCAB,
  hidden_size=32,
  num_hidden_layers=4,
  full_attention_interval=4,
  mlp_only_layers=[0, 1, 2, 3],
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=8,
  partial_rotary_factor=0.5,
  linear_num_key_heads=2,
  linear_num_value_heads=4,
  linear_key_head_dim=8,
  linear_value_head_dim=6,
  linear_conv_kernel_dim=4,
  intermediate_size=64,
  max_position_embeddings=128,
  initializer_range=0.2,  # ten times the default, so greedy text is not one repeated token
)
# transformers runs Qwen3-Next's RMSNorms, its delta rule (chunked and recurrent), the gated norm
# and rotary angles in float32 even in a float64 model, so its float64 logits carry float32
# rounding: 1.5e-5 measured on logits of magnitude 4 (with those casts patched to float64 the two
# agree to 3e-7, the float32 rotary frequencies' share); 1e-4 allowed, against differences of
# 1e-2 and more from a real mistake (a gate's rows swapped with the query's, a decay applied after
# the write).
TOLERANCE = 1e-4


def _model(folder: str):
  import torch
  import transformers

  model = transformers.AutoModelForCausalLM.from_pretrained(
    folder, attn_implementation='eager', dtype=torch.float64
  )
  return model.eval()


@pytest.fixture(scope='module')
def folder(tmp_path_factory):
  """A seeded random checkpoint, its norms moved off their initial 0 and 1 (so that dropping
  one cannot agree by accident), and a word-level tokenizer."""
  import tokenizers
  import torch
  import transformers

  folder = str(tmp_path_factory.mktemp('qwen3_next'))
  torch.manual_seed(0)
  config = transformers.AutoConfig.for_model('qwen3_next', **CONFIG)
  model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation='eager')
  with torch.no_grad():
    for name, parameter in model.named_parameters():
      if 'norm' in name:
        parameter.add_(0.1 * torch.randn_like(parameter))
  model.save_pretrained(folder)
  words = tokenizers.models.WordLevel({f'w{i}': i for i in range(VOCAB)}, unk_token='w0')
  tokenizer = tokenizers.Tokenizer(words)
  tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
  tokenizer.save(os.path.join(folder, 'tokenizer.json'))
  return folder


def test_logits_greedy_text_and_cached_decoding_equal_transformers(folder):
  import torch

  model, report = pretrained.load_decoder(pretrained.read(folder))
  assert report['unused'] == []
  stack = model.layers[0].self_attn.config
  assert [type(layer.self_attn).__name__ for layer in model.layers] == [
    'DeltaNet',
    'DeltaNet',
    'DeltaNet',
    'MultiHeadAttention',
  ]
  assert model.layers[3].self_attn.config.rope_dims == 4 and stack.delta_heads == 4
  reference = _model(folder)
  prompt = IDS[:, :5]
  with torch.no_grad():
    logits = reference(torch.tensor(IDS)).logits.numpy()
    greedy = reference.generate(
      torch.tensor(prompt),
      attention_mask=torch.ones(prompt.shape, dtype=torch.long),
      do_sample=False,
      max_new_tokens=12,
      min_new_tokens=12,
      eos_token_id=None,
      pad_token_id=0,
    )[:, 5:]
  with float64.model_in_float64(model) as model64:
    ours = jax.jit(model64.token_logits)(jnp.asarray(IDS))
    text = generation.continue_prompt(
      model64, jnp.asarray(prompt), max_length=12, rng=jax.random.key(0), temperature=0.0
    )
    # Cached decoding (a chunked prefill of 4 positions, then token by token: the convolution's
    # window and the delta state carried over) gives the full pass's logits. The caches are
    # float32, whose rounding makes the difference: 1.4e-5 measured (with float64 delta-rule
    # caches 3e-8); 1e-4 allowed.
    cache = jax.jit(lambda prompt: model64.init_decode_cache(prompt, max_length=8))(IDS[:, :5])
    step = jax.jit(model64.decode_step)
    decoded = []
    for i in range(6):
      out, cache = step(jnp.asarray(IDS[:, 4 + i]), jnp.int32(i), cache)
      decoded.append(out)
  assert ours.dtype == np.float64
  np.testing.assert_allclose(ours, logits, atol=TOLERANCE, rtol=0)
  np.testing.assert_array_equal(np.asarray(text), greedy.numpy())
  assert len(np.unique(np.asarray(text))) > 3  # a text, not one token repeated
  np.testing.assert_allclose(np.stack(decoded, axis=1), ours[:, 4:10], atol=1e-4)


def test_the_config_written_back_reads_as_the_same_model_and_experts_are_refused(folder):
  with open(os.path.join(folder, 'config.json'), encoding='utf-8') as f:
    config = json.load(f)
  args, _ = decoder_args(config)
  stack = args['stack']
  assert stack.layer_pattern == 'gated_deltanet,gated_deltanet,gated_deltanet,softmax'
  assert (stack.output_gate, stack.qk_norm, stack.norm_plus_one) == (True, True, True)
  back, _ = decoder_args(pretrained.decoders.ARCHITECTURES['qwen3_next'].config(args))
  assert back == args
  interval = {key: value for key, value in config.items() if key != 'layer_types'}
  assert decoder_args(interval)[0] == args  # layer kinds from full_attention_interval's default 4
  with pytest.raises(ValueError, match=r'gives layer 0 a mixture of experts, which the converter'):
    decoder_args({**config, 'mlp_only_layers': [1, 2, 3]})
  with pytest.raises(ValueError, match=r'gives layer 1 a mixture of experts'):
    decoder_args({**config, 'mlp_only_layers': [], 'decoder_sparse_step': 2})
  assert decoder_args({**config, 'mlp_only_layers': [], 'num_experts': 0})[0] == args
  with pytest.raises(ValueError, match='layer_types=.*converts 4 layers of linear_attention'):
    decoder_args({**config, 'layer_types': ['sliding_attention'] * 4})
