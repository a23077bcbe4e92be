"""reports/reordering.py and data/word_alignment.py: the stated rule that picks the docs'
alignment sentence, on hand-made sentences; reordering.py, the command (tests/test_training.py
runs the rule on a trained run)."""

import os
import subprocess
import sys

from data.word_alignment import aligned_positions, crossings
from reports import reordering

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TABLE = {'red': 'rouge', 'file': 'fichier', 'the': 'le', 'open': 'ouvrir', 'a': 'un'}


def test_links_are_the_words_the_table_is_sure_of():
  # 'the' occurs twice in the source: no link; 'open' has no table word in the reference.
  links = aligned_positions('the red file the open', 'le fichier rouge', TABLE)
  assert links == [(1, 2), (2, 1)]
  assert crossings(links) == 1  # red file -> fichier rouge
  assert crossings([(0, 0), (1, 1), (2, 2)]) == 0
  assert crossings([(0, 2), (1, 1), (2, 0)]) == 3  # every pair reversed


def test_the_rule_takes_most_crossings_then_most_links_then_the_first():
  samples = [
    {'source': 'open a file now', 'reference': 'ouvrir un fichier'},  # 0 crossings
    {'source': 'the red file here', 'reference': 'le fichier rouge'},  # 1 crossing, 3 links
    {'source': 'red file here now', 'reference': 'fichier rouge'},  # 1 crossing, 2 links
    {'source': 'a red file here', 'reference': 'un fichier rouge'},  # ties with the second
    {'source': 'red file', 'reference': 'fichier rouge'},  # too short
  ]
  chosen = reordering.choose(samples, TABLE, min_words=3, max_words=10)
  assert chosen['position'] == 1 and chosen['crossings'] == 1 and len(chosen['links']) == 3


def test_the_command_on_a_run_eval_py_has_not_evaluated_is_one_sentence(tmp_path):
  command = [os.path.join(ROOT, 'reordering.py'), f'--workdir={tmp_path}', '--min_words=3']
  done = subprocess.run(
    [sys.executable, *command], capture_output=True, text=True, check=False, timeout=120
  )
  assert done.returncode == 1 and done.stdout == ''
  assert done.stderr == (
    f'reordering.py: --workdir={tmp_path}: no {tmp_path}/eval/samples.jsonl; run eval.py '
    '--workdir first.\n'
  )
