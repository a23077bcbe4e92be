"""DeepSeek-V3 (dense layers) and DeepSeek-V3.2 checkpoints converted into Attend's DecoderLM
(models/pretrained/deepseek.py) equal transformers on tiny random checkpoints built locally:
logits and attention weights, greedy continuation, cached decoding; what the converter cannot
reproduce (mixture-of-experts layers, YaRN) is refused in one sentence.

Compared in float64 on both sides (tests/float64.py). transformers computes DeepSeek's RMSNorms
and rotary angles in float32 even in a float64 model, as the Llama family's, so logits carry
float32 rounding: 1e-5 allowed (about 1e-6 measured). Its DSA indexer scores in float32 too, so a
choice of keys could differ from Attend's where two scores sit within float32 rounding of each
other at the k-th place: the V3.2 test asserts that no such near-tie occurs in the text it
compares (seed 0: 6e-3 at least, against 1e-4 asserted).
"""

import os

import float64
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_decoders import greedy, reference

from models import generation, interventions, pretrained
from models.pretrained.decoders import ARCHITECTURES, decoder_args

pytest.importorskip('transformers', reason='the reference implementation (test extra)')
VOCAB = 97
IDS = np.random.default_rng(0).integers(0, VOCAB, (2, 12))
TOLERANCE = 1e-5
TOP_K = 4  # DSA keys per query: fewer than the sequences, so that selection really happens
_COMMON = dict(
  vocab_size=VOCAB,
  hidden_size=32,
  intermediate_size=48,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=4,
  kv_lora_rank=16,
  q_lora_rank=24,
  qk_rope_head_dim=8,
  qk_nope_head_dim=8,
  v_head_dim=12,
  max_position_embeddings=64,
  initializer_range=0.2,  # ten times the default: a text, not one token repeated
  tie_word_embeddings=False,
)
CONFIGS = {
  'deepseek_v3': dict(_COMMON, first_k_dense_replace=2),  # both layers dense
  # 16 indexer heads: an index score is exactly 0 (every head's relu 0) with odds 2^-16, so
  # ties at 0, which torch.topk and jax.lax.top_k break differently, do not occur.
  'deepseek_v32': dict(
    _COMMON,
    mlp_layer_types=['dense', 'dense'],
    index_topk=TOP_K,
    index_n_heads=16,
    index_head_dim=16,
  ),
}


def _write(model_type: str, folder: str) -> str:
  """A seeded random checkpoint with norms and biases moved off 1 and 0, and a word tokenizer."""
  import tokenizers
  import torch
  import transformers

  torch.manual_seed(0)
  config = transformers.AutoConfig.for_model(model_type, **CONFIGS[model_type])
  model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation='eager')
  with torch.no_grad():
    for name, parameter in model.named_parameters():
      if 'norm' in name or name.endswith('.bias'):
        parameter.add_(0.1 * torch.randn_like(parameter))
  model.save_pretrained(folder)
  words = tokenizers.models.WordLevel({f'w{i}': i for i in range(VOCAB)}, unk_token='w0')
  tokenizers.Tokenizer(words).save(os.path.join(folder, 'tokenizer.json'))
  return folder


@pytest.fixture(scope='module')
def converted(tmp_path_factory):
  """Per model_type: (the checkpoint's folder, Attend's model of it)."""
  out = {}
  for name in CONFIGS:
    folder = _write(name, str(tmp_path_factory.mktemp(name)))
    out[name] = folder, pretrained.load_decoder(pretrained.read(folder))
  return out


def _captured(model, ids):
  with float64.model_in_float64(model) as model64:
    forward = jax.jit(lambda ids: interventions.capture(model64, ids, method='token_logits'))
    return forward(jnp.asarray(ids))


def _no_near_ties(captured, length: int) -> None:
  """Every query that sees more than TOP_K keys has its TOP_K-th and next index scores apart
  by more than float32 rounding could move them."""
  for layer in range(2):
    scores = np.asarray(captured[f'layers/{layer}/self_attn/index_scores'])  # [B, T, S]
    for t in range(TOP_K, length):
      ranked = -np.sort(-scores[:, t, : t + 1], axis=-1)
      assert np.all(ranked[:, TOP_K - 1] - ranked[:, TOP_K] > 1e-4), (layer, t)


@pytest.mark.parametrize('name', sorted(CONFIGS))
def test_logits_and_attention_weights_equal_transformers(converted, name):
  folder, (model, report) = converted[name]
  logits, weights = reference(folder, IDS)
  ours, captured = _captured(model, IDS)
  ours_weights = interventions.stack(captured, model.attention_names['self'])  # [B, L, N, T, T]
  assert ours.dtype == np.float64
  np.testing.assert_allclose(ours, logits, atol=TOLERANCE, rtol=0)
  np.testing.assert_allclose(ours_weights, weights, atol=TOLERANCE, rtol=0)
  assert report['unused'] == [] and 'n_routed_experts' in report['ignored_config']
  if name == 'deepseek_v32':  # each later query reads its TOP_K chosen keys only
    _no_near_ties(captured, IDS.shape[1])
    assert np.all((np.asarray(ours_weights)[:, :, :, TOP_K:] > 0).sum(-1) == TOP_K)
    selected = np.asarray(captured['layers/0/self_attn/selected'])
    np.testing.assert_array_equal(selected.sum(-1)[:, -1], TOP_K)


@pytest.mark.parametrize('name', sorted(CONFIGS))
def test_greedy_continuation_and_cached_decoding_equal_the_full_pass(converted, name):
  folder, (model, _) = converted[name]
  prompt = IDS[:, :5]
  with float64.model_in_float64(model) as model64:
    ours = generation.continue_prompt(
      model64, jnp.asarray(prompt), max_length=12, rng=jax.random.key(0), temperature=0.0
    )
    ours = np.asarray(ours, np.int32)
  np.testing.assert_array_equal(ours, greedy(folder, prompt, 12))
  assert len(np.unique(ours)) > 3  # a text, not one token repeated
  text = jnp.concatenate([jnp.asarray(prompt), jnp.asarray(ours)], axis=1)  # [B, 17]
  if name == 'deepseek_v32':  # the continuation's choices of keys had no near-tie either
    _no_near_ties(_captured(model, text)[1], text.shape[1])
  # Attend's float32 cached steps (absorbed kernel) against its float32 full pass (plain path).
  full = jax.jit(model.token_logits)(text)  # jitted: eager, every small op compiles apart
  cache = jax.jit(lambda prompt: model.init_decode_cache(prompt, max_length=12))(text[:, :5])
  decode_step = jax.jit(model.decode_step)
  for step in range(4):
    logits, cache = decode_step(text[:, 4 + step], jnp.int32(step), cache)
    np.testing.assert_allclose(logits, full[:, 4 + step], atol=TOLERANCE)
  assert set(cache['layers'][0]) >= {'latent', 'rope_key'} and 'k' not in cache['layers'][0]


def test_what_the_converter_cannot_reproduce_is_one_sentence(converted):
  v3 = _config_of(converted['deepseek_v3'][0])
  v32 = _config_of(converted['deepseek_v32'][0])
  with pytest.raises(ValueError, match='layer 1 a mixture-of-experts layer'):
    decoder_args({**v3, 'first_k_dense_replace': 1})
  with pytest.raises(ValueError, match='layer 0 a mixture-of-experts layer'):
    decoder_args({**v32, 'mlp_layer_types': ['sparse', 'dense']})
  yarn = {'rope_type': 'yarn', 'factor': 40.0, 'rope_theta': 10000.0}
  with pytest.raises(ValueError, match="rope_type 'default' only"):
    decoder_args({**v3, 'rope_parameters': yarn})
  with pytest.raises(ValueError, match='rope_scaling=.* changes the computation'):
    decoder_args({**v32, 'rope_scaling': yarn})
  with pytest.raises(ValueError, match='q_lora_rank=None; .* must be > 0'):
    decoder_args({**v32, 'q_lora_rank': None})


def test_the_config_written_back_reads_as_the_same_model(converted):
  for name in CONFIGS:
    args, _ = decoder_args(_config_of(converted[name][0]))
    back, _ = decoder_args(ARCHITECTURES[name].config(args))
    assert back == args, name


def _config_of(folder: str) -> dict:
  import json

  with open(os.path.join(folder, 'config.json'), encoding='utf-8') as f:
    return json.load(f)
