"""studies/ioi.py on a tiny random Llama whose word-level vocabulary stands in for the names,
places and objects (`w20`, ...; every other word is the unknown `w0`, one token a word): the
prompts of every template put IO, S1 and S2 where its words are, the ABC twins share no name
with theirs, the class rules apply their thresholds, heads are chosen on one half of the prompts
and tested on the other, and the study writes its numbers, tables and figure."""

import contextlib
from io import StringIO
import json

import numpy as np
import pytest
from tiny_decoders import write_checkpoint

from data.pretrained_tokenizer import PretrainedTokenizer
from interpret import effects
from models import pretrained
import sources
from studies import ioi, ioi_prompts, ioi_report

TINY_WORDS = dict(
  NAMES=[f'w{i}' for i in range(20, 40)], PLACES=['w41', 'w42'], OBJECTS=['w43', 'w44']
)


@pytest.fixture(scope='module')
def llama(tmp_path_factory):
  return write_checkpoint('llama', str(tmp_path_factory.mktemp('llama')))


def test_every_template_puts_io_s1_and_s2_where_its_words_are(llama, monkeypatch):
  for name, words in TINY_WORDS.items():
    monkeypatch.setattr(ioi_prompts, name, words)
  tokenizer = PretrainedTokenizer(pretrained.read(llama).tokenizer_json)
  data = ioi_prompts.prompts(tokenizer, draws=2, seed=0, abc=3)
  items = data['items']
  assert len(items) == 2 * 2 * len(ioi_prompts.TEMPLATES) and len(ioi_prompts.TEMPLATES) >= 10
  for item in items:
    form = ioi_prompts.TEMPLATES[item['template']].split()  # BABA: {B} and {A} ... {B}
    first, second = form.index('{B}'), form.index('{A}')
    s2 = len(form) - 1 - form[::-1].index('{B}')
    io, s1 = (first, second) if item['order'] == 'ABBA' else (second, first)
    assert item['positions'] == (io, s1, s2)
    ids, words = item['ids'], item['text'].split()
    assert len(ids) == len(words) and ids[io] == item['io'] and ids[s1] == ids[s2] == item['s']
    assert words[s1] == words[s2] != words[io] and words[io] in ioi_prompts.NAMES
    # The ABC twin: the same sentence, its three names other ones, none of the prompt's.
    names = [first, second, s2]
    assert len(item['abc']) == len(ids)
    assert np.array_equal(np.delete(item['abc'], names), np.delete(ids, names))
    assert len({*item['abc'][names]}) == 3 and not {*item['abc'][names]} & {item['io'], item['s']}
  orders = {(item['template'], item['order']) for item in items}
  assert len(orders) == 2 * len(ioi_prompts.TEMPLATES)
  for template, rows in data['reference'].items():
    assert rows.shape[0] == 3 and rows.shape[1] == len(items[2 * template]['ids'])
  # A batch is the prompts of one length, each prompt in one batch.
  groups = ioi.batches(items)
  assert sorted(sum(groups, [])) == list(range(len(items)))
  assert all(len({len(items[i]['ids']) for i in rows}) == 1 for rows in groups)


def test_the_class_rules_apply_their_thresholds():
  names = ['patching', 'direct', 'END->IO', 'END->S1', 'END->S2', 'S2->S1', 'S2->S1+1']
  maps = {name: np.zeros((2, 6)) for name in [*names, 'via queries', 'via values']}
  under = lambda v: v - 1e-6  # just under a threshold

  def head(layer, index, values):
    for name, value in values.items():
      maps[name][layer, index] = value

  to_io = {'END->IO': ioi.ATTENDS, 'END->S1': under(ioi.ATTENDS), 'END->S2': 0.1}
  head(0, 0, {**to_io, 'direct': ioi.DIRECT})  # a name mover, just
  head(0, 1, {**to_io, 'direct': under(ioi.DIRECT)})
  head(0, 2, {'direct': 0.5, 'END->IO': under(ioi.ATTENDS)})
  head(0, 3, {'direct': 0.5, 'END->IO': 0.5, 'END->S2': 0.5})  # as much to S2 as to IO
  head(0, 4, {**to_io, 'direct': -ioi.DIRECT})  # a negative name mover
  small = ioi.INDIRECT * ioi.COST  # the most direct effect an S-inhibition head may have
  inhibits = {'patching': -ioi.COST, 'direct': under(small), 'END->S2': ioi.ATTENDS}
  head(1, 0, {**inhibits, 'via queries': -ioi.PATH})  # S-inhibition, just
  head(1, 1, {**inhibits, 'via queries': -under(ioi.PATH)})
  head(1, 2, {**inhibits, 'via queries': np.nan})  # not path patched: not classed
  head(1, 3, {**inhibits, 'via queries': -1.0, 'direct': -small})
  attends = {'S2->S1': ioi.ATTENDS, 'S2->S1+1': ioi.ATTENDS}
  head(1, 4, {**attends, 'via values': -ioi.PATH})  # duplicate token and induction
  head(1, 5, {**attends, 'via values': np.nan})
  head(0, 5, {'S2->S1': under(ioi.ATTENDS), 'S2->S1+1': under(ioi.ATTENDS), 'via values': -1.0})
  assert ioi.classes(maps) == {
    'name mover': [(0, 0)],
    'negative name mover': [(0, 4)],
    'S-inhibition': [(1, 0)],
    'duplicate token': [(1, 4)],
    'induction': [(1, 4)],
  }


@pytest.fixture(scope='module')
def study(llama, tmp_path_factory):
  """The study on two templates of one length (one batch), with the classes fixed so that every
  step runs on a 2-layer model: a name mover in layer 1, an S-inhibition head in layer 0."""

  def fixed(maps):
    return {name: [] for name in ioi_report.CLASS_MARKS} | {
      'name mover': [(1, 0)],
      'S-inhibition': [(0, 2)],
    }

  out = tmp_path_factory.mktemp('ioi')
  with pytest.MonkeyPatch.context() as patch:
    for name, words in TINY_WORDS.items():
      patch.setattr(ioi_prompts, name, words)
    patch.setattr(
      ioi_prompts, 'TEMPLATES', ioi_prompts.TEMPLATES[9:11]
    )  # "While ... working / commuting ..."
    patch.setattr(ioi, 'classes', fixed)
    args = ['--checkpoint', llama, '--out', str(out), '--top=2', '--random=2', '--abc=4']
    with contextlib.redirect_stdout(StringIO()) as printed:
      result = ioi.main(args)
    tokenizer = PretrainedTokenizer(pretrained.read(llama).tokenizer_json)
    data = ioi_prompts.prompts(tokenizer, draws=2, seed=0, abc=4)
  return out, result, data, printed.getvalue()


def test_heads_are_chosen_on_one_half_and_tested_on_the_other(llama, study):
  _, result, data, _ = study
  items, part = data['items'], ioi.split(data['items'])
  assert not set(part['selection']) & set(part['held-out'])
  assert sorted(part['selection'] + part['held-out']) == list(range(len(items)))
  assert {items[i]['draw'] for i in part['held-out']} == {1}
  # The patching map and the top heads are those of the selection half, not of the other.
  model = sources.load_decoder(llama).model
  sweep = lambda b: effects.head_effects(
    model, b['ids'], b['metric'], ablation='patch', other=b['abc']
  )
  patched = lambda rows: np.divide(*ioi.pooled([items[i] for i in rows], sweep, print, '')[::-1])
  patching = np.asarray(result['selection']['maps']['patching'])
  np.testing.assert_allclose(patching, patched(part['selection']), rtol=1e-5)
  assert not np.allclose(patching, patched(part['held-out']), rtol=1e-2)
  top = np.argsort(patching, axis=None)[:2]
  expected = [tuple(int(i) for i in np.unravel_index(k, patching.shape)) for k in top]
  assert [tuple(head) for head in result['selection']['top']] == expected
  # The ablations run on the held-out half: no head mean-ablated gives its clean IO - S.
  held_out = [p['logit_diff'] for p in result['prompts'] if p['draw'] == 1]
  assert np.isclose(result['ablation']['none']['held_out'][0], np.mean(held_out), rtol=1e-5)


def test_the_study_prints_and_writes_its_numbers_tables_and_figure(study):
  out, result, _, printed = study
  saved = json.loads((out / 'ioi.json').read_text())
  assert saved['tables'] == result['tables'] and len(saved['prompts']) == 8
  assert saved['selection']['classes']['name mover'] == [[1, 0]]
  maps = {name: np.asarray(values, float) for name, values in saved['selection']['maps'].items()}
  # Path patched into the name mover's queries: the layer-0 heads that cost at least COST.
  senders = np.isfinite(maps['via queries'])
  assert not senders[1].any() and np.array_equal(senders[0], -maps['patching'][0] >= ioi.COST)
  assert np.all(np.isnan(maps['via values']))  # no sender before the S-inhibition head's layer
  circuit = saved['ablation']['circuit (every classed head)']
  assert circuit['heads'] == [[0, 2], [1, 0]] and len(circuit['random']) == 2
  top = {'%d.%d' % tuple(head) for head in saved['selection']['top']}
  assert set(saved['alone']) == {'0.2', '1.0', *top}
  assert (out / 'ioi.png').read_bytes()[:4] == b'\x89PNG'
  for table in saved['tables'].values():  # printed as written, for the docs to copy
    assert table.startswith('| ') and table in printed
  assert '| 1.0 | name mover |' in saved['tables']['heads']
