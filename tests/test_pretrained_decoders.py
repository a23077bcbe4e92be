"""Pretrained decoders (GPT-2, Llama, Mistral, Qwen2, Gemma 3) converted into Attend's
DecoderLM equal transformers on tiny random checkpoints built locally: logits and every layer's
attention weights, greedy generation, cached decoding, padded batches, sharded weights; refusals
name what the converter cannot reproduce. The comparisons with transformers run in float64 on both
sides (tests/float64.py), so that no float32 rounding of Attend's, which varies with the CPU's
vector width, enters them."""

import json
import os
import shutil

from fine_tunes import train
import float64
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_decoders import CONFIGS, VOCAB, greedy, reference, write_checkpoint

from models import generation, interventions, pretrained
from models.pretrained import files as checkpoint_files
from models.pretrained.decoders import decoder_args

pytest.importorskip('transformers', reason='the reference implementation (test extra)')
ARCHITECTURES = sorted(CONFIGS)
IDS = np.random.default_rng(0).integers(0, VOCAB, (2, 20))  # longer than Mistral's window of 8
# Allowed difference from transformers in float64. GPT-2 is float64 throughout: float64 rounding.
# The Llama family's RMSNorm and rotary angles are computed in float32 by transformers even in a
# float64 model (LlamaRMSNorm, LlamaRotaryEmbedding), so its float64 logits carry float32
# rounding there: 1.7e-6 at most measured, against 1e-5 allowed.
TOLERANCE = {'gpt2': float64.ATOL}
HALF_FLOAT32 = 1e-5


@pytest.fixture(scope='module')
def folders(tmp_path_factory):
  base = tmp_path_factory.mktemp('decoders')
  return {name: write_checkpoint(name, str(base / name)) for name in ARCHITECTURES}


def _converted(folder: str):
  model, report = pretrained.load_decoder(pretrained.read(folder))
  return model, report


@pytest.mark.portable
@pytest.mark.parametrize('name', ARCHITECTURES)
def test_logits_and_every_layers_attention_equal_transformers(folders, name):
  model, report = _converted(folders[name])
  logits, weights = reference(folders[name], IDS)
  with float64.model_in_float64(model) as model64:
    forward = jax.jit(lambda ids: interventions.capture(model64, ids, method='token_logits'))
    ours, captured = forward(jnp.asarray(IDS))
    ours_weights = interventions.stack(captured, model.attention_names['self'])  # [B, L, N, T, T]
  assert ours.dtype == ours_weights.dtype == np.float64
  atol = TOLERANCE.get(name, HALF_FLOAT32)
  np.testing.assert_allclose(ours, logits, atol=atol, rtol=0)
  np.testing.assert_allclose(ours_weights, weights, atol=atol, rtol=0)
  assert report['unused'] == [] and 'transformers_version' in report['ignored_config']
  if name == 'mistral':  # the window is real: no query sees a key 8 or more positions back
    assert np.all(weights[..., 10, :3] == 0) and np.all(np.asarray(ours_weights)[..., 10, :3] == 0)
  if name == 'gemma3_text':  # layers 0 and 2 see 6 keys, the global layer 1 every one
    assert np.all(weights[:, 0::2, :, 10, :5] == 0) and np.all(weights[:, 1, :, 10, :5] > 0)


@pytest.mark.portable
@pytest.mark.parametrize('name', ARCHITECTURES)
def test_greedy_generation_cached_decoding_and_padding_equal_the_reference(folders, name):
  model, _ = _converted(folders[name])
  prompt = IDS[:, :5]
  with float64.model_in_float64(model) as model64:  # no float32 near-tie can flip a token
    ours = generation.continue_prompt(
      model64, jnp.asarray(prompt), max_length=32, rng=jax.random.key(0), temperature=0.0
    )
    ours = np.asarray(ours, np.int32)
  np.testing.assert_array_equal(ours, greedy(folders[name], prompt, 32))
  assert len(np.unique(ours)) > 3  # a text, not one token repeated
  # Cached decoding of the generated text gives the full pass's logits. Both are Attend's float32
  # sums of the same terms in two orders: logits of magnitude about 1 agree to a few units in the
  # last place (1e-7); 1e-5 allows a hundred.
  text = jnp.concatenate([jnp.asarray(prompt), jnp.asarray(ours)], axis=1)  # [B, 37]
  full = model.token_logits(text)
  cache = model.init_decode_cache(text[:, :5], max_length=32)
  for step in range(4):
    logits, cache = model.decode_step(text[:, 4 + step], jnp.int32(step), cache)
    np.testing.assert_allclose(logits, full[:, 4 + step], atol=1e-5)
  # A row padded on the right has its real positions' logits unchanged.
  padded = np.concatenate([IDS[:1, :12], np.zeros((1, 8), int)], axis=1)
  batch = model.token_logits(jnp.asarray(np.concatenate([padded, IDS[1:]])))
  np.testing.assert_allclose(
    batch[0, :12], model.token_logits(jnp.asarray(IDS[:1, :12]))[0], atol=1e-5
  )


def test_a_sharded_checkpoint_is_read_tensor_by_tensor_and_converts_the_same(folders, tmp_path):
  sharded = write_checkpoint('llama', str(tmp_path / 'sharded'), shard_size='20KB')
  files = os.listdir(sharded)
  assert checkpoint_files.INDEX in files and sum(f.endswith('.safetensors') for f in files) > 1
  tensors = pretrained.read(sharded).tensors
  assert isinstance(tensors, checkpoint_files.SafetensorFiles)  # lazily, by name
  a, _ = _converted(sharded)
  b, _ = _converted(folders['llama'])
  np.testing.assert_array_equal(a.token_logits(jnp.asarray(IDS)), b.token_logits(jnp.asarray(IDS)))


def _config(folder: str) -> dict:
  with open(os.path.join(folder, 'config.json'), encoding='utf-8') as f:
    return json.load(f)


def test_what_the_converter_cannot_reproduce_is_one_sentence_naming_it(folders, tmp_path):
  llama = _config(folders['llama'])
  with pytest.raises(ValueError, match="model_type='gpt_neox'; Attend reads bert, gpt2, llama"):
    pretrained.config_fields({**llama, 'model_type': 'gpt_neox'})
  with pytest.raises(ValueError, match="model_type='bert'; the decoders converted are gpt2, llama"):
    decoder_args({**llama, 'model_type': 'bert'})
  scaled = {**llama, 'rope_scaling': {'rope_type': 'linear', 'factor': 2.0}}
  with pytest.raises(ValueError, match='rope_scaling=.* changes the computation'):
    decoder_args(scaled)
  with pytest.raises(ValueError, match="has no 'num_hidden_layers'"):
    decoder_args({key: v for key, v in llama.items() if key != 'num_hidden_layers'})
  args, ignored = decoder_args({**llama, 'some_future_key': 1})
  assert 'some_future_key' in ignored and args['stack'].num_kv_heads == 2
  assert args['stack'].rope_base == 500000.0 and args['stack'].rope_layout == 'halves'
  broken = str(tmp_path / 'broken')
  shutil.copytree(folders['gpt2'], broken)
  three_layers = {**_config(broken), 'n_layer': 3}
  with open(os.path.join(broken, 'config.json'), 'w', encoding='utf-8') as f:
    json.dump(three_layers, f)
  with pytest.raises(ValueError, match="has no tensor 'transformer.h.2.ln_1.weight'"):
    _converted(broken)


def test_gemma3_layer_types_and_rope_bases_become_the_stacks_fields(folders):
  """The tiny config's layer types and rope_parameters, those of configs written before
  `layer_types` (`sliding_window_pattern`, `rope_theta`, `rope_local_base_freq`, as Gemma 3
  270M's: 18 layers, every 6th global), and what the converter refuses."""
  gemma = _config(folders['gemma3_text'])
  layers = lambda stack: (stack.window, stack.global_every, stack.rope_base, stack.rope_base_global)
  stack = decoder_args(gemma)[0]['stack']
  assert layers(stack) == (6, 2, 1e4, 1e6)
  assert stack.query_scale == 0.25 and stack.d_k == 24 and stack.num_kv_heads == 1
  older = {key: v for key, v in gemma.items() if key not in ('layer_types', 'rope_parameters')}
  older.update(num_hidden_layers=18, sliding_window=512, rope_theta=1e6, rope_local_base_freq=1e4)
  assert layers(decoder_args(older)[0]['stack']) == (512, 6, 1e4, 1e6)
  mixed = {**gemma, 'layer_types': ['full_attention', 'sliding_attention', 'sliding_attention']}
  with pytest.raises(ValueError, match='layer_types=.*every k-th one full_attention only'):
    decoder_args(mixed)
  linear = {'rope_type': 'linear', 'factor': 8.0, 'rope_theta': 1e6}
  scaled = {**gemma, 'rope_parameters': {**gemma['rope_parameters'], 'full_attention': linear}}
  with pytest.raises(ValueError, match=r"rope_parameters\['full_attention'\]=.*'default' only"):
    decoder_args(scaled)
  for key, value in (('final_logit_softcapping', 30.0), ('use_bidirectional_attention', True)):
    with pytest.raises(ValueError, match=f'{key}={value}, which changes the computation'):
      decoder_args({**gemma, key: value})


@pytest.mark.parametrize('name', ['llama', 'gpt2'])
def test_a_converted_decoder_is_evaluated_continued_and_studied_by_the_commands(
  folders, tmp_path, name
):
  """`python convert.py --checkpoint=FOLDER`, `python eval.py --ablate_heads` on the frozen
  model, `python train.py --config=configs/pretrained_lm.py:FOLDER --config.init_from=...` and
  `python -m studies.decoder_heads`, on the Llama-family checkpoint (grouped-query heads, rope
  base 500,000) and on GPT-2."""
  from configs import pretrained_lm
  from reports.run_eval import Request, evaluate
  from studies import decoder_heads
  from training import pretrained_workdir
  from training.config import read_config as load_config

  folder, converted = folders[name], str(tmp_path / 'converted')
  read = pretrained.read(folder)
  pretrained_workdir.write_workdir(converted, read, pretrained_lm.converted(read))
  report = json.loads((tmp_path / 'converted' / 'pretrained.json').read_text())
  assert report['unused'] == [] and len(report['loaded']) > 20
  text = tmp_path / 'text.txt'
  words = np.random.default_rng(0).integers(1, VOCAB, (300, 9))
  text.write_text('\n'.join(' '.join(f'w{i}' for i in row) for row in words))
  frozen = load_config(converted)
  if name == 'llama':
    assert frozen.model.num_kv_heads == 2 and frozen.model.rope_base == 500000.0
  frozen.dataset.update(text_path=str(text), seq_length=16, eval_batch_size=8)  # eval --config..
  metrics = evaluate(
    Request(converted, config=frozen, num_heatmaps=1, max_examples=2, ablate_heads=True)
  )
  assert metrics['step'] == 0 and metrics['bits_per_token'] == pytest.approx(
    metrics['loss'] / np.log(2)
  )
  assert 4 < metrics['bits_per_token'] < 9  # a random model: about log2(97) = 6.6 bits
  for name in ('metrics.json', 'explorer.html', 'head_ablation.json', 'samples.txt'):
    assert (tmp_path / 'converted' / 'eval' / name).exists(), name
  config = pretrained_lm.get_config(folder)
  config.dataset.update(text_path=str(text), seq_length=16, batch_size=4, eval_batch_size=8)
  config.update(
    init_from=converted, num_train_steps=2, eval_every_steps=0, num_eval_decode=0, warmup_steps=1
  )
  train(config, str(tmp_path / 'continued'))
  after = evaluate(Request(str(tmp_path / 'continued'), num_heatmaps=0, max_examples=1))
  assert after['step'] == 2 and np.isfinite(after['loss'])
  studied = decoder_heads.main(['--checkpoint', folder, '--out', str(tmp_path / 'heads')])
  assert (tmp_path / 'heads' / 'heads.png').exists()
  assert [row['kind'] for row in studied['ablations']].count('random (control)') == 5  # --draws
  assert len(studied['ablations']) == len(decoder_heads.SCORES) + 5


def test_the_speed_benchmark_runs_both_sides_on_the_same_weights():
  from benchmarks import decoder_bench

  args = ['--sizes=tiny', '--repeats=1', '--calls=1', '--tokens=16', '--new_tokens=4', '--prompt=4']
  args.append('--bandwidth_mib=64')  # the read of the bandwidth bound, far larger than L2
  (row,) = decoder_bench.main(args)
  assert row['same_greedy_tokens'] and row['max_abs_logit_difference'] < 1e-5
  assert row['forward_ratio'] > 0 and row['decode_ratio'] > 0
