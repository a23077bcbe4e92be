"""benchmarks/press_agreement.py's comparison of kept sets and answers (kept_agreement.py), on
hand-made pairs (no kvpress: its side runs in .venv-kvpress, minutes of work, outside the suite),
and the peer script's promise to import nothing of Attend's."""

import ast
import os
import sys

import numpy as np
import pytest

from benchmarks import kept_agreement, press_agreement

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_compare_kept_counts_agreeing_flags_per_layer_and_names_differing_heads():
  ours = [['1100', '0011'], ['1010', '1010']]
  theirs = [['1100', '0011'], ['1001', '1010']]  # layer 1, head 0: positions 2 and 3 swapped
  compared = kept_agreement.compare_kept(ours, theirs)
  assert compared['shares'] == [1.0, 6 / 8]
  assert compared['differ'] == {1: {0: ([2], [3])}}  # only Attend keeps 2, only kvpress 3


def test_bits_writes_the_peer_format():
  assert kept_agreement.bits(np.array([[True, False, True], [False, False, True]])) == [
    '101',
    '001',
  ]


def test_answers_compare_up_to_the_first_eos():
  eos = [2]
  assert kept_agreement.same_answer([5, 7, 2, 0, 0], [5, 7, 2], eos)  # Attend pads after EOS
  assert not kept_agreement.same_answer([5, 7, 2], [5, 8, 2], eos)
  assert not kept_agreement.same_answer([5, 7, 9], [5, 7], eos)  # no EOS: every token counts


def test_boundary_ties_finds_equal_scores_at_the_cut():
  scores = np.array([[3.0, 1.0, 1.0, 0.0], [3.0, 2.0, 1.0, 0.0]])
  # Keeping 2: head 0's 2nd and 3rd best are equal (1.0), head 1's are not.
  assert kept_agreement.boundary_ties(scores, [2, 2]) == 1
  assert kept_agreement.boundary_ties(scores, [4, 4]) == 0  # all kept: no cut


def test_summarise_takes_means_minima_and_answers_over_samples():
  row = dict(press='knorm', ratio=0.5, boundary_ties=1)
  results = [
    {
      **row,
      'sample': 0,
      'ours': [['10'], ['01']],
      'theirs': [['10'], ['10']],
      'answer': [4, 2],
      'peer_answer': [4, 2],
    },
    {
      **row,
      'sample': 1,
      'ours': [['11'], ['01']],
      'theirs': [['11'], ['01']],
      'answer': [4, 2],
      'peer_answer': [3, 2],
    },
  ]
  (entry,) = kept_agreement.summarise(results, [2]).values()
  assert entry['equal_share_mean'] == 0.75 and entry['equal_share_min'] == 0.0
  assert entry['layers_identical'] == 0.75 and entry['differing_heads'] == 1
  assert entry['differ'] == ['sample 0 layer 1 head 0: only Attend keeps [1], only kvpress [0]']
  assert entry['answers_identical'] == 0.5 and entry['boundary_ties'] == 2


def test_the_kvpress_side_imports_neither_jax_nor_attend():
  with open(os.path.join(ROOT, 'benchmarks', 'kvpress_peer.py'), encoding='utf-8') as f:
    tree = ast.parse(f.read())
  names = {
    alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
  }
  names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
  outside = {name.split('.')[0] for name in names} - set(sys.stdlib_module_names)
  assert outside == {'torch', 'transformers', 'kvpress'}


def test_kvzip_block_is_kvpress_repeat_block_or_a_refusal_for_several_chunks():
  runs = [
    dict(press='knorm', repeat={}),
    dict(press='kvzip', repeat=dict(ids=[[4, 5, 6]], prefix=2)),
  ]
  block = press_agreement.kvzip_block(runs)
  assert block['prefix'] == 2 and np.asarray(block['repeat']).tolist() == [[4, 5, 6]]
  runs[1]['repeat']['ids'].append([7, 8])
  with pytest.raises(SystemExit, match='in 2 chunks'):
    press_agreement.kvzip_block(runs)
