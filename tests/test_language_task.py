"""The language-modelling task: BERT masking statistics, the attention hit rate, and tiny real
runs of both objectives through train.py's and eval.py's code (metrics, samples, pictures)."""

import json
import os

from fine_tunes import matching_params, train
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_training import get_config

from data.tokenizers import SPECIAL_TOKENS
import models
from reports.run_eval import Request, evaluate
import tasks
from tasks.language import _continuation_length, bert_mask
from tasks.language_attention import attention_hits
from training import restore
from training.setup import build_state

TINY = dict(num_layers=1, d_model=16, num_heads=2, d_ff=32, max_length=64)


def test_bert_mask_picks_15_percent_of_regular_tokens_then_80_10_10():
  vocab, mask_id = 50, 49
  ids = np.random.default_rng(0).integers(0, vocab - 1, (400, 256)).astype(np.int32)
  ids[:, -20:] = 0  # padding
  corrupted, picked = bert_mask(
    jax.random.key(1), jnp.asarray(ids), mask_id=mask_id, vocab_size=vocab
  )
  corrupted, picked = np.asarray(corrupted), np.asarray(picked)
  special = ids < len(SPECIAL_TOKENS)
  assert not picked[special].any() and (corrupted[special] == ids[special]).all()
  assert (corrupted[~picked] == ids[~picked]).all()  # only picked ones change
  assert abs(picked[~special].mean() - 0.15) < 0.005
  chosen_ids, chosen = ids[picked], corrupted[picked]
  masked = chosen == mask_id
  kept = chosen == chosen_ids
  randomised = ~masked & ~kept
  assert abs(masked.mean() - 0.8) < 0.01
  # A random replacement equals the original 1 time in 45 (45 regular ids), and then reads kept.
  assert abs(kept.mean() - (0.1 + 0.1 / 45)) < 0.01
  assert abs(randomised.mean() - 0.1 * 44 / 45) < 0.01
  replacements = chosen[randomised]
  assert replacements.min() >= len(SPECIAL_TOKENS) and (replacements != mask_id).all()
  assert len(np.unique(replacements)) == vocab - len(SPECIAL_TOKENS) - 1  # every regular id


def test_attention_hits_count_the_support_position_or_the_one_after_it():
  weights = np.zeros((1, 2, 4, 6), np.float32)  # [B, N, T, S]
  weights[0, 0, 1, 2] = 1.0  # head 0, query 1 -> key 2 (its support): hit
  weights[0, 0, 3, 5] = 1.0  # head 0, query 3 -> 5 = support + 1: hit
  weights[0, 1, 1, 0] = 1.0  # head 1, query 1 -> 0: miss
  weights[0, 1, 3, 4] = 1.0  # head 1, query 3 -> 4 (its support): hit
  support = np.array([[-1, 2, -1, 4]], np.int32)
  weights[0, :, 0, 3] = weights[0, :, 2, 3] = 1.0  # queries without support never count
  np.testing.assert_array_equal(
    attention_hits(jnp.asarray(weights), jnp.asarray(support)), [[2, 1]]
  )


def _tiny_lm(config_name, data_dir, **dataset):
  config = get_config(config_name)
  config.model = models.default_config(config.model.name, **TINY)
  config.dataset.update(data_dir=str(data_dir), batch_size=8, eval_batch_size=8, **dataset)
  config.update(
    num_train_steps=3,
    log_every_steps=50,
    checkpoint_every_steps=100,
    eval_every_steps=0,
    num_eval_decode=8,
    warmup_steps=1,
    max_decode_length=6,
    temperatures=(0.0, 1.0),
  )
  return config


def test_gpt_on_mqar_trains_evaluates_and_draws(tmp_path, tfds_dir, capsys):
  config = _tiny_lm('gpt_mqar', tfds_dir)
  workdir = str(tmp_path / 'run')
  train(config, workdir)
  metrics = evaluate(Request(workdir, max_examples=16, num_heatmaps=1))
  assert 'samples.txt, 1 attention picture and explorer.html.' in capsys.readouterr().out
  assert metrics['examples'] == 16 and 0 <= metrics['accuracy'] <= 1
  assert 0 <= metrics['attention_hit_rate'] <= 1 and 'attention_hit_rate/head1' in metrics
  assert 'bits_per_char' not in metrics  # a word vocabulary: bits per token
  assert metrics['bits_per_token'] == pytest.approx(metrics['loss'] / np.log(2))
  lines = open(os.path.join(workdir, 'eval', 'samples.txt'), encoding='utf-8').read().splitlines()
  assert len(lines) == 17 and lines[1].endswith('/8 right')  # 8 answers per example
  assert os.path.getsize(os.path.join(workdir, 'eval', 'attention_heads_0000.png')) > 1000


def test_gpt_on_a_text_file_reports_bits_per_char_and_samples_each_temperature(tmp_path, tfds_dir):
  text = tmp_path / 'book.txt'
  text.write_text('It was the best of times, it was the worst of times.\n' * 40)
  config = _tiny_lm('gpt_text', tfds_dir, text_path=str(text), seq_length=32, eval_lengths=(16,))
  workdir = str(tmp_path / 'run')
  validation = train(config, workdir)
  assert validation['bits_per_char@16'] == pytest.approx(validation['loss@16'] / np.log(2))
  # eval.py --eval_length: rows of other lengths; at the trained length, the same rows as usual.
  metrics = evaluate(Request(workdir, num_heatmaps=1, eval_lengths=['32', '64']))
  assert metrics['bits_per_char'] == pytest.approx(metrics['loss'] / np.log(2))
  assert metrics['loss@32'] == pytest.approx(metrics['loss'], rel=1e-6)
  assert metrics['loss@64'] > 0 and 'loss@16' not in metrics
  lines = open(os.path.join(workdir, 'eval', 'samples.txt'), encoding='utf-8').read().splitlines()
  assert all('-> [T=0] ' in line and ' || [T=1] ' in line for line in lines[1:])


def test_bert_pretraining_scores_the_masked_tokens(tmp_path, tfds_dir, capsys):
  config = _tiny_lm('bert_pretrain', tfds_dir, builder_config='default', seq_length=32)
  workdir = str(tmp_path / 'run')
  train(config, workdir)
  with open(os.path.join(workdir, 'vocab', 'vocab.json'), encoding='utf-8') as f:
    assert json.load(f)['shared']['vocab'][-1] == '<mask>'
  metrics = evaluate(Request(workdir, max_examples=8, num_heatmaps=0))
  assert 'samples.txt, explorer.html.' in capsys.readouterr().out  # no picture, none named
  assert 0 <= metrics['accuracy'] <= 1 and metrics['perplexity'] > 1
  lines = open(os.path.join(workdir, 'eval', 'samples.txt'), encoding='utf-8').read().splitlines()
  assert '<mask>' in lines[1] and lines[1].endswith('right')


def test_a_window_longer_than_the_held_out_text_fails_when_the_task_is_built(tmp_path, tfds_dir):
  text = tmp_path / 'short.txt'
  text.write_text('abcdefghij' * 100)  # held out: 50 + 50 chars
  config = _tiny_lm('gpt_text', tfds_dir, text_path=str(text), seq_length=64)
  with pytest.raises(ValueError, match=r"seq_length=64 .* split 'validation'"):
    tasks.build(config, str(tmp_path / 'run'))


def test_eval_lengths_are_refused_past_a_learned_table_and_for_other_tasks(tmp_path, tfds_dir):
  text = tmp_path / 'book.txt'
  text.write_text('It was the best of times, it was the worst of times.\n' * 40)
  config = _tiny_lm(
    'gpt_text', tfds_dir, text_path=str(text), seq_length=32, eval_lengths=(64, 128)
  )
  config.model.positions = 'learned'
  with pytest.raises(
    ValueError,
    match=r'eval_lengths=\(64, 128\) reaches past the learned '
    r'position table of config.model.max_length=64',
  ):
    tasks.build(config, str(tmp_path / 'run'))
  with pytest.raises(
    ValueError, match="--eval_length applies to language models; this run's task is 'translation'"
  ):
    restore.eval_config(get_config('default'), ['64'])


@pytest.mark.parametrize(
  'positions, window, wanted, expected',
  [
    ('rope', 0, 0, 64),  # the default: the rest of the row
    ('rope', 0, 64, 64),
    ('rope', 0, 128, 64),  # past the 128 trained positions: capped
    ('rope', 128, 128, 128),  # a sliding window within them: relative distances stay trained
    ('alibi', 64, 200, 200),
    ('sinusoidal', 128, 128, 64),  # absolute positions leave the trained range all the same
    ('none', 128, 128, 64),
  ],
)
def test_continuations_stay_within_the_trained_positions(
  positions, window, wanted, expected, caplog
):
  config = get_config('gpt_text')
  config.model.update(positions=positions, window=window)
  config.max_decode_length = wanted
  assert _continuation_length(config) == expected
  assert ('past the 128 the model was trained on' in caplog.text) == (expected < (wanted or 64))


def test_global_layers_among_windowed_ones_keep_continuations_within_the_trained_positions():
  config = get_config('gpt_text')
  config.model.update(positions='rope', window=128, global_every=2)
  config.max_decode_length = 128
  assert _continuation_length(config) == 64  # the global layers would read unseen distances


@pytest.mark.slow
def test_bert_finetune_starts_from_the_pretrained_encoder_and_vocabulary(tmp_path, tfds_dir):
  pretrain = _tiny_lm('bert_pretrain', tfds_dir, builder_config='default', seq_length=32)
  pretrained = str(tmp_path / 'pretrained')
  train(pretrain, pretrained)
  config = get_config('bert_finetune')
  config.model = pretrain.model
  # bucket_step = max_length: one padded shape, so each step compiles once.
  config.dataset.update(
    data_dir=str(tfds_dir), batch_size=8, eval_batch_size=8, max_length=64, bucket_step=64
  )
  config.update(init_from=pretrained, num_train_steps=2, eval_every_steps=0, num_eval_decode=0)
  workdir = str(tmp_path / 'tuned')
  train(config, workdir)
  # The classification data adopted the pretraining vocabulary (with its <mask>) and its labels.
  with open(os.path.join(workdir, 'vocab', 'vocab.json'), encoding='utf-8') as f:
    saved = json.load(f)
  assert saved['shared']['vocab'][-1] == '<mask>' and saved['labels'][0] == 'sports'
  task = tasks.build(config, workdir)
  _, loaded, initialised = matching_params(build_state(config, task), config)
  assert initialised == [
    'params.classifier.bias',
    'params.classifier.kernel',
    'params.pooler.bias',
    'params.pooler.kernel',
  ]
  assert 'params.embed.embed.embedding' in loaded and 'params.mlm_bias' in loaded


def test_a_deep_models_explorer_page_holds_eight_layers_each_named():
  """12 layers: the page's maps are layers 0, 2, 3, 5, 6, 8, 9, 11, one map each, by name."""
  import types

  from tasks.language import LanguageModeling

  weights = np.random.default_rng(0).random((12, 2, 3, 3))
  fake = types.SimpleNamespace(
    attention=lambda model, samples: [weights],
    tokenizer=types.SimpleNamespace(tokens=lambda ids: ['a', 'b', 'c']),
  )
  sample = dict(index=0, reference='r', prediction='p', correct=None, inputs=[1, 2, 3])
  (record,) = LanguageModeling.explore(fake, None, [sample], None)
  maps = record['views'][0]['maps']
  assert [m['name'] for m in maps] == [
    f'self-attention, layer {l}' for l in (0, 2, 3, 5, 6, 8, 9, 11)
  ]
  np.testing.assert_array_equal(maps[1]['weights'], weights[2:3])
