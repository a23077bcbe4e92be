"""studies/ioi.py on a tiny random Llama whose vocabulary stands in for the names, places and
objects: the prompts and their corrupted twins line up, the classes follow their criteria, the
circuit and random ablations are the ablated metric, and the files are written."""

import json

import numpy as np
import pytest
from tiny_decoders import write_checkpoint

from data.pretrained_tokenizer import PretrainedTokenizer
from models import pretrained
from studies import ioi


@pytest.fixture
def tiny_words(monkeypatch):
  monkeypatch.setattr(ioi, 'NAMES', tuple(f'w{i}' for i in range(20, 40)))
  monkeypatch.setattr(ioi, 'PLACES', ['w41', 'w42'])
  monkeypatch.setattr(ioi, 'OBJECTS', ['w43', 'w44'])
  monkeypatch.setattr(ioi, 'TEMPLATE', 'w1 {0} w2 {1} w3 w4 w5 {place} w6 {2} w7 w8 {thing} w9')


def test_prompts_put_io_and_s_where_the_templates_do(tmp_path, tiny_words):
  folder = write_checkpoint('llama', str(tmp_path / 'llama'))
  tokenizer = PretrainedTokenizer(pretrained.read(folder).tokenizer_json)
  data = ioi.prompts(tokenizer, 6, seed=0)
  assert data['ids'].shape == data['corrupted'].shape == (6, 14)
  io, s1, s2 = data['positions'].T
  rows = np.arange(6)
  assert np.all(data['ids'][rows, io] == data['io']) and np.all(data['ids'][rows, s2] == data['s'])
  assert np.all(data['ids'][rows, s1] == data['s']) and np.all(s2 == 9)
  assert list(io[:2]) == [1, 3]  # ABBA then BABA
  # The corrupted twins share no name with their prompt, and keep place and object.
  names = {tokenizer.encode_pieces(' ' + n)[0] for n in ioi.NAMES}
  for clean, other in zip(data['ids'], data['corrupted']):
    assert not ({*clean} & {*other} & names)
    assert clean[7] == other[7] and clean[12] == other[12]


def test_the_study_writes_its_numbers_and_figure(tmp_path, tiny_words, capsys):
  folder = write_checkpoint('llama', str(tmp_path / 'llama'))
  out = tmp_path / 'out'
  args = ['--checkpoint', folder, '--out', str(out), '--prompts=4', '--top=2', '--draws=2']
  result = ioi.main(args)
  saved = json.loads((out / 'ioi.json').read_text())
  assert saved['top_heads'] == result['top_heads'] and len(saved['top_heads']) == 2
  patched = np.asarray(saved['patched_fraction'])
  # The top heads are those whose patching takes the most of the logit difference.
  worst = sorted(patched.ravel())[:2]
  assert sorted(patched[l, h] for l, h in saved['top_heads']) == worst
  assert len(saved['random_ablated']['values']) == 2
  dla, scores = np.asarray(saved['direct_logit_attribution']), saved['attention']
  for layer, head in saved['classes']['name mover']:
    assert dla[layer, head] / saved['clean_logit_diff'] >= 0.1
    assert scores['end_to_io'][layer][head] > scores['end_to_s2'][layer][head]
  for layer, head in saved['classes']['duplicate token']:
    assert scores['s2_to_s1'][layer][head] >= ioi.ATTENDS
  assert (out / 'ioi.png').read_bytes()[:4] == b'\x89PNG'
  assert 'Clean logit difference IO - S' in capsys.readouterr().out
