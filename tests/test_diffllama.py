"""DiffLlama converted into a DecoderLM with differential attention equals transformers on a tiny
random checkpoint built locally: logits, greedy continuation, cached decoding; its config.json
written back reads as the same model.

Float64 on both sides (tests/float64.py). transformers computes the Llama family's RMSNorm,
rotary angles and DiffLlama's λ dot products in float32 even in a float64 model, so 1e-5 is
allowed (tests/test_pretrained_decoders.py's HALF_FLOAT32), against differences of order 0.1
from a wrong head pairing or λ.
"""

import float64
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_decoders import VOCAB, greedy, reference

from models import generation, pretrained
from models.pretrained import diffllama
from models.pretrained.decoders import decoder_args
from models.pretrained.fitting import differences

pytest.importorskip('transformers', reason='the reference implementation (test extra)')
ATOL = 1e-5
IDS = np.random.default_rng(0).integers(0, VOCAB, (2, 12))
# Two layers (λ_init 0.2 and 0.8 - 0.6 e^-0.3), 4 query heads over 2 key/value heads (pairs
# (0, 2) and (1, 3) read different key heads), biased attention projections, an RMS epsilon
# other than Attend's default.
CONFIG = dict(
  vocab_size=VOCAB,
  hidden_size=32,
  intermediate_size=48,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  max_position_embeddings=64,
  rms_norm_eps=1e-5,
  attention_bias=True,
  tie_word_embeddings=False,
  initializer_range=0.2,
)


@pytest.fixture(scope='module')
def folder(tmp_path_factory):
  import tokenizers
  import torch
  import transformers

  torch.manual_seed(0)
  config = transformers.DiffLlamaConfig(**CONFIG)
  model = transformers.DiffLlamaForCausalLM(config)
  with torch.no_grad():
    for name, parameter in model.named_parameters():
      if 'norm' in name or name.endswith('.bias'):  # away from 1 and 0
        parameter.add_(0.1 * torch.randn_like(parameter))
      if 'lambda' in name:  # λ well away from λ_init: dot products of order 1, not 0.01
        parameter.mul_(5.0)
  path = str(tmp_path_factory.mktemp('diffllama'))
  model.save_pretrained(path)
  words = tokenizers.models.WordLevel({f'w{i}': i for i in range(VOCAB)}, unk_token='w0')
  tokenizers.Tokenizer(words).save(f'{path}/tokenizer.json')
  return path


@pytest.fixture(scope='module')
def converted(folder):
  return pretrained.load_decoder(pretrained.read(folder))


def test_logits_equal_transformers(folder, converted):
  model, report = converted
  assert report['unused'] == []
  assert model.layers[1].self_attn.config.layer_index == 1
  logits, _ = reference(folder, IDS)
  with float64.model_in_float64(model) as model64:
    ours = jax.jit(model64.token_logits)(jnp.asarray(IDS))
  assert ours.dtype == np.float64
  np.testing.assert_allclose(ours, logits, atol=ATOL, rtol=0)


def test_greedy_continuation_and_cached_decoding_equal(folder, converted):
  model, _ = converted
  prompt = IDS[:, :4]
  with float64.model_in_float64(model) as model64:  # no float32 near-tie can flip a token
    ours = generation.continue_prompt(
      model64, jnp.asarray(prompt), max_length=8, rng=jax.random.key(0), temperature=0.0
    )
    ours = np.asarray(ours, np.int32)
  np.testing.assert_array_equal(ours, greedy(folder, prompt, 8))
  assert len(np.unique(ours)) > 3  # a text, not one token repeated
  # Cached decoding of the generated text gives the full pass's logits. Both are Attend's float32
  # sums of the same terms in two orders: logits of magnitude about 1 agree to a few units in the
  # last place (1e-7); 1e-5 allows a hundred.
  text = jnp.asarray(np.concatenate([prompt, ours], axis=1))
  full = jax.jit(model.token_logits)(text)
  cache = jax.jit(model.init_decode_cache, static_argnums=1)(text[:, :4], 8)
  step = jax.jit(model.decode_step)
  steps = []
  for t in range(8):
    logits, cache = step(text[:, 3 + t], jnp.int32(t), cache)
    steps.append(logits)
  np.testing.assert_allclose(jnp.stack(steps, axis=1), full[:, 3:11], atol=1e-5, rtol=0)


def test_config_written_back_reads_as_the_same_model(folder):
  args, _ = decoder_args(pretrained.read(folder).config)
  written = diffllama.config(args)
  assert written['model_type'] == 'diffllama' and written['attention_bias'] is True
  back, _ = decoder_args(written)
  assert differences(args, back) == []
