"""length_buckets.py and reports/length_buckets.py on hand-made evaluations: buckets,
per-bucket scores, the table and the figure."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF

from reports import length_buckets
from training.layout import SAMPLES_JSONL

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(root, name, hypotheses):
  """A workdir whose eval/samples.jsonl holds sources of 1..9 words and the given outputs."""
  (root / name / 'eval').mkdir(parents=True)
  with open(root / name / 'eval' / SAMPLES_JSONL, 'w', encoding='utf-8') as f:
    for i, hypothesis in enumerate(hypotheses):
      source = ' '.join(['word'] * (i % 9 + 1))
      record = dict(index=i, source=source, reference=f'le mot {i} est ici', hypothesis=hypothesis)
      f.write(json.dumps(record) + '\n')
  return str(root / name)


def test_bucket_edges_split_lengths_into_equal_shares():
  assert length_buckets.bucket_edges(np.arange(1, 10), 3) == [(1, 3), (4, 6), (7, 9)]
  assert length_buckets.bucket_edges(np.array([2, 2, 2, 2, 5]), 3) == [(2, 2), (3, 5)]


def test_scores_per_bucket_and_figure(tmp_path):
  """A perfect run scores 100 in every bucket; one right on short sources only, there alone."""
  references = [f'le mot {i} est ici' for i in range(18)]
  short_only = [r if i % 9 < 3 else 'rien' for i, r in enumerate(references)]
  perfect = _run(tmp_path, 'perfect', references)
  short = _run(tmp_path, 'short', short_only)
  out = tmp_path / 'lengths.png'
  rows = length_buckets.report([f'all={perfect}', short], buckets=3, out=str(out))
  assert [(r['low'], r['high'], r['size']) for r in rows] == [(1, 3, 6), (4, 6, 6), (7, 9, 6)]
  assert all(r['all']['bleu'] == pytest.approx(100) for r in rows)
  assert rows[0]['short']['bleu'] == pytest.approx(100) and rows[2]['short']['bleu'] == 0
  assert out.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def test_the_command_prints_the_table(tmp_path):
  """`python length_buckets.py RUN... --buckets=N RUN`: runs before and after the flags."""
  references = [f'le mot {i} est ici' for i in range(9)]
  hypotheses = [r if i < 3 else 'rien' for i, r in enumerate(references)]
  perfect, short = _run(tmp_path, 'perfect', references), _run(tmp_path, 'short', hypotheses)
  command = [os.path.join(ROOT, 'length_buckets.py'), f'all={perfect}', '--buckets=2', short]
  done = subprocess.run(
    [sys.executable, *command], capture_output=True, text=True, check=False, timeout=120
  )
  assert done.returncode == 0, done.stderr[-2000:]
  short_scores = [  # sacreBLEU's own corpus scores of each bucket (13a, raw references)
    '{:.1f} / {:.1f}'.format(
      *(s.corpus_score(hypotheses[part], [references[part]]).score for s in (BLEU(), CHRF()))
    )
    for part in (slice(0, 5), slice(5, 9))
  ]
  assert done.stdout.splitlines() == [
    '| source words | sentences | all BLEU / chrF | short BLEU / chrF |',
    '|---|---|---|---|',
    f'| 1-5 | 5 | 100.0 / 100.0 | {short_scores[0]} |',
    f'| 6-9 | 4 | 100.0 / 100.0 | {short_scores[1]} |',
  ]
  assert short_scores[1].startswith('0.0 / ')  # no word right


def test_runs_on_other_sentences_are_refused(tmp_path):
  a = _run(tmp_path, 'a', ['x'] * 4)
  b = _run(tmp_path, 'b', ['x'] * 5)
  with pytest.raises(ValueError, match='b evaluated other sentences than a'):
    length_buckets.report([a, b])
