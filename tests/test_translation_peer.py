"""benchmarks/translation_peer.py and joey_config.py: what the benchmark gives Joey NMT (the
split, the pieces, the settings of Attend's configs) and how it stops a run at the budget. Joey
NMT itself lives in its own environment (`make joeynmt`) and is run by the benchmark, measured
in docs/translation.md."""

import json
import os
from pathlib import Path
import sys
import time

import pytest

from benchmarks import joey_config, translation_peer
from data.placeholders import restore
from data.readers import tsv_parallel
from data.tokenizers import SPECIAL_TOKENS, SentencePieceTokenizer


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  """A small TSV and a SentencePiece model trained as Attend trains one."""
  root = tmp_path_factory.mktemp('peer')
  words = ['file', 'disk', 'read', 'open', 'write', 'close', 'user', 'name', 'path', 'error']
  lines = [
    f'{a} {b} %s {i}\t{b} {a} « %s » {i}' for i in range(30) for a, b in zip(words, words[1:])
  ]
  (root / 'pairs.tsv').write_text('\n'.join(lines) + '\n', encoding='utf-8')
  texts = [part for line in lines for part in line.split('\t')]
  (root / 'shared.spm.model').write_bytes(SentencePieceTokenizer.build(texts, 60).model_proto)
  return root


def test_joey_gets_attends_split_and_pieces(corpus):
  references, items = translation_peer.write_joey_inputs(
    str(corpus / 'pairs.tsv'), corpus / 'shared.spm.model', corpus / 'data', dev_sentences=5
  )
  assert items == [[]] * len(references)
  splits = tsv_parallel.corpus_splits(str(corpus / 'pairs.tsv'))
  assert references == [target for _, _, target in splits['test']]
  read = lambda name: (corpus / 'data' / name).read_text(encoding='utf-8').splitlines()  # noqa: E731
  assert read('test.trg') == references
  assert read('test.src') == [source for _, source, _ in splits['test']]
  assert read('train.src') == [source for _, source, _ in splits['train']]
  dev = splits['validation'][:5]
  assert read('dev.trg') == [target for _, _, target in dev]
  vocab = read('vocab.txt')
  pieces = SentencePieceTokenizer((corpus / 'shared.spm.model').read_bytes())
  # Every piece once, Attend's specials left out (Joey adds its own in front).
  assert len(set(vocab)) == len(vocab) == pieces.vocab_size - len(SPECIAL_TOKENS)
  assert not set(vocab) & set(SPECIAL_TOKENS) and '%' in ''.join(vocab)


def test_joey_gets_the_tags_attend_trains_on_with_protect_items(corpus, tmp_path):
  """With `protect_items`, both sides' placeholders are the tags Attend's data holds, and the
  items returned turn an output's tags back into its source's placeholders."""
  references, items = translation_peer.write_joey_inputs(
    str(corpus / 'pairs.tsv'),
    corpus / 'shared.spm.model',
    tmp_path,
    dev_sentences=5,
    protect_items=True,
  )
  splits = tsv_parallel.corpus_splits(str(corpus / 'pairs.tsv'))
  read = lambda name: (tmp_path / name).read_text(encoding='utf-8').splitlines()  # noqa: E731
  assert read('train.src') == [s.replace('%s', '⟪0⟫') for _, s, _ in splits['train']]
  assert read('test.trg') == [t.replace('%s', '⟪0⟫') for _, _, t in splits['test']]
  assert references == [t for _, _, t in splits['test']] and items == [['%s']] * len(references)
  assert restore(read('test.trg')[0], items[0]) == references[0]


@pytest.mark.parametrize('name', sorted(translation_peer.ATTEND_CONFIGS))
def test_joey_config_takes_attends_settings(name, tmp_path):
  from configs import tsv, tsv_gru

  attend = {'transformer': tsv, 'gru': tsv_gru}[name].get_config().to_dict()
  config = joey_config.joey_config(name, attend, tmp_path, tmp_path / 'm.model', tmp_path)
  json.loads(json.dumps(config))  # written as JSON, which is YAML
  training = config['training']
  assert training['batch_size'] == attend['dataset']['batch_size'] == 64
  assert training['learning_rate'] == attend['learning_rate']
  assert training['label_smoothing'] == attend['label_smoothing']
  assert training['clip_grad_norm'] == attend['grad_clip']
  assert training['validation_freq'] == attend['eval_every_steps']
  assert training['early_stopping_metric'] == attend['selection_metric'] == 'chrf'
  assert config['data']['src']['max_length'] == attend['dataset']['max_input_length']
  assert config['testing']['max_output_length'] == attend['dataset']['max_target_length']
  assert training['eval_batch_size'] == attend['num_eval_decode']  # one batch: the whole subset
  assert config['testing']['beam_size'] == 1  # greedy, as Attend's eval.py decodes
  encoder = config['model']['encoder']
  if name == 'transformer':
    model = attend['model']
    assert (encoder['num_layers'], encoder['hidden_size']) == (
      model['num_layers'],
      model['d_model'],
    )
    assert (encoder['num_heads'], encoder['ff_size']) == (model['num_heads'], model['d_ff'])
    assert encoder['layer_norm'] == model['norm'] == 'post'
    assert training['learning_rate_warmup'] == attend['warmup_steps']
  else:
    assert encoder['rnn_type'] == 'gru' and encoder['bidirectional']
    assert encoder['hidden_size'] == attend['model']['hidden_dim']
    assert config['model']['decoder']['attention'] == attend['model']['attention'] == 'bahdanau'
    assert training['decrease_factor'] == 1.0  # a constant rate, as Attend's schedule


def test_an_unknown_model_or_schedule_is_refused():
  with pytest.raises(SystemExit, match='--models'):
    translation_peer.main(['--tsv=x.tsv', '--models=transformer,lstm', '--joey_python=/bin/sh'])
  from configs import tsv

  attend = tsv.get_config().to_dict()
  with pytest.raises(ValueError, match='config.schedule'):
    joey_config.joey_training(dict(attend, schedule='cosine'))


def test_a_run_is_stopped_at_its_budget_and_a_failure_named(tmp_path):
  start = time.perf_counter()
  wall = translation_peer.timed(
    [sys.executable, '-c', 'import time; time.sleep(60)'], tmp_path / 'a.log', 1.0
  )
  assert 1.0 <= wall < 30 and time.perf_counter() - start < 30
  with pytest.raises(RuntimeError, match='failed'):
    translation_peer.timed([sys.executable, '-c', 'raise SystemExit(3)'], tmp_path / 'b.log')


def test_a_missing_joey_environment_is_one_sentence(tmp_path, capsys):
  with pytest.raises(SystemExit, match='make joeynmt'):
    translation_peer.main(['--tsv=x.tsv', f'--joey_python={tmp_path / "none"}'])


def test_a_run_it_did_not_finish_timing_is_refused_not_resumed(tmp_path):
  (tmp_path / 'attend_transformer').mkdir()
  with pytest.raises(SystemExit, match='did not finish timing'):
    translation_peer.attend_run('transformer', 'x.tsv', tmp_path / 'attend_transformer')
  assert os.listdir(tmp_path / 'attend_transformer') == []  # left as it was


def test_joey_set_changes_joeys_own_fields_and_refuses_others(tmp_path):
  from configs import tsv_gru

  attend = tsv_gru.get_config().to_dict()
  changes = joey_config.parse_changes('normalization=tokens,clip_grad_norm=null,updates=2000')
  assert changes == {'normalization': 'tokens', 'clip_grad_norm': None, 'updates': 2000}
  training = joey_config.joey_config(
    'gru', attend, tmp_path, tmp_path / 'm.model', tmp_path, changes
  )['training']
  assert training['normalization'] == 'tokens' and training['updates'] == 2000
  assert 'clip_grad_norm' not in training  # null: Joey's default (no clipping)
  assert training['learning_rate'] == attend['learning_rate']  # the rest stays matched
  with pytest.raises(ValueError, match='not FIELD=VALUE'):
    joey_config.parse_changes('normalization')
  with pytest.raises(SystemExit, match=r"\['normalisation'\] are not training fields"):
    translation_peer.main(
      ['--tsv=x.tsv', '--models=gru', '--joey_set=normalisation=tokens', '--joey_python=/bin/sh']
      + [f'--workdir={tmp_path / "peer"}']
    )
  assert not (tmp_path / 'peer').exists()  # refused before anything was written


def test_a_resumed_run_is_refused_where_its_wall_time_is_the_budget(tmp_path):
  workdir = tmp_path / 'attend_gru'
  workdir.mkdir()
  (workdir / 'peer_timing.json').write_text(json.dumps({'train_wall_s': None}))
  with pytest.raises(SystemExit, match='give Joey updates=N'):
    translation_peer.attend_run('gru', 'x.tsv', workdir)


@pytest.mark.parametrize('name', ['gru', 'transformer'])
def test_joeys_recipe_replaces_the_matched_optimiser_settings(name):
  from configs import tsv, tsv_gru

  attend = (tsv_gru if name == 'gru' else tsv).get_config().to_dict()
  changes = {**joey_config.JOEY_RECIPES[name], 'updates': 2000}
  training = joey_config.joey_training(attend, changes)
  expected = {'gru': (2e-4, 'adam', 0.0), 'transformer': (3e-4, 'adamw', 0.1)}[name]
  assert training['learning_rate'] == expected[0] and training['optimizer'] == expected[1]
  assert training.get('label_smoothing', 0.0) == expected[2]  # left out: Joey's default, 0
  assert training['normalization'] == 'tokens' and training['decrease_factor'] == 1.0
  for left_out in ('adam_betas', 'clip_grad_norm', 'learning_rate_warmup'):
    assert left_out not in training  # Joey's defaults: betas 0.9/0.999, no clipping, no warm-up
  assert training['batch_size'] == attend['dataset']['batch_size']  # the data per step matched


def test_a_recipe_run_refuses_a_field_joey_lacks_before_writing(tmp_path):
  with pytest.raises(SystemExit, match=r"\['normalisation'\] are not training fields"):
    translation_peer.main(
      ['--tsv=x.tsv', '--models=gru', '--joey_recipe', '--joey_set=normalisation=tokens']
      + ['--joey_python=/bin/sh', f'--workdir={tmp_path / "peer"}']
    )
  assert not (tmp_path / 'peer').exists()


def test_joeys_validation_curve_is_read_from_its_log():
  head = '2026-11-28 07:52:31,177 - INFO - joeynmt.'  # Joey's log lines, as it writes them
  log = '\n'.join(
    [
      f'{head}training - Epoch   1, Step:      400, Batch Loss:     5.307814',
      f'{head}training - Epoch   1, Step:      500, Batch Loss:     4.821342',
      f'{head}prediction - Evaluation result (greedy): bleu:   0.07, chrf:   0.02, loss:   4.89',
      f'{head}training - Epoch   1, Step:     1000, Batch Loss:     3.100000',
      f'{head}prediction - Evaluation result (greedy): bleu:   4.51, chrf:   0.14, loss:   3.40',
    ]
  )
  assert translation_peer.joey_validation_chrf(log) == {500: 2.0, 1000: 14.0}


def test_joey_set_changes_how_joeys_weights_start_and_refuses_other_model_fields():
  from configs import tsv_gru

  attend = tsv_gru.get_config().to_dict()
  config = joey_config.joey_config(
    'gru', attend, Path(), Path(), Path(), {'model.init_rnn_orthogonal': True, 'updates': 500}
  )
  assert config['model']['init_rnn_orthogonal'] is True and config['training']['updates'] == 500
  assert 'model.init_rnn_orthogonal' not in config['training']
  with pytest.raises(ValueError, match='model.hidden_size is not among'):
    joey_config.joey_config('gru', attend, Path(), Path(), Path(), {'model.hidden_size': 8})
