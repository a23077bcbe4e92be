"""benchmarks/decoder_heads.py: the head scores by hand, and the study end to end on a tiny
random GPT-2 checkpoint as a user runs it."""

import json
import os

import numpy as np
import pytest
from tiny_decoders import write_checkpoint

from benchmarks import decoder_heads

pytest.importorskip('transformers', reason='builds the tiny checkpoint (test extra)')


def test_scores_of_hand_built_attention():
  """Rows of n = 4 tokens repeated (T = 8). Head 0 attends to the previous token (query 0 to
  itself), head 1 to the token after the earlier occurrence in the repeat and to position 0
  before it."""
  n, t = 4, 8
  previous, induction = np.zeros((t, t)), np.zeros((t, t))
  previous[0, 0] = 1
  previous[np.arange(1, t), np.arange(t - 1)] = 1
  for q in range(t):
    induction[q, q - n + 1 if n <= q < t - 1 else 0] = 1
  weights = np.stack([previous, induction])[None, None]  # [B=1, L=1, N=2, T, T]
  scores = decoder_heads.head_scores(weights, n)
  # Head 1's query 1 reads position 0, which is also its previous token.
  np.testing.assert_allclose(scores['previous-token'], [[1.0, 1 / 7]])
  np.testing.assert_allclose(scores['induction'], [[0.0, 1.0]])
  # Queries 1..7: head 0 gives position 0 weight only at query 1; head 1 at queries 1..3 and 7.
  np.testing.assert_allclose(scores['first-token'], [[1 / 7, 4 / 7]])


def test_the_study_runs_on_a_converted_checkpoint_and_writes_its_table_and_figure(tmp_path):
  folder = write_checkpoint('gpt2', str(tmp_path / 'gpt2'))
  out = str(tmp_path / 'heads')
  args = ['--checkpoint', folder, '--out', out, '--sequences', '4', '--length', '12']
  result = decoder_heads.main(args)
  with open(os.path.join(out, 'heads.json'), encoding='utf-8') as f:
    assert json.load(f) == json.loads(json.dumps(result))
  assert os.path.getsize(os.path.join(out, 'heads.png')) > 10_000
  for kind in decoder_heads.SCORES:
    grid = np.asarray(result['scores'][kind])
    assert grid.shape == (2, 4) and np.all((grid >= 0) & (grid <= 1))
  assert set(result['ablations']) == {
    'top previous-token',
    'top induction',
    'top first-token',
    'random (control)',
  }
  top = result['ablations']['top induction']
  best = np.unravel_index(np.argmax(result['scores']['induction']), (2, 4))
  assert top['heads'][0] == [int(i) for i in best]
  assert top['repeat_loss'] != pytest.approx(result['losses']['repeat'], abs=1e-7)
