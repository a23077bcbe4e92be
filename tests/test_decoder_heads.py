"""studies/decoder_heads.py: the head scores by hand, and the study end to end on a tiny
random GPT-2 checkpoint as a user runs it."""

import json
import os

import numpy as np
import pytest
from tiny_decoders import write_checkpoint

from studies import decoder_heads

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


def test_chosen_heads_are_the_top_of_each_score_and_distinct_random_draws():
  scores = {
    'previous-token': np.array([[0.1, 0.9], [0.5, 0.2]]),
    'induction': np.array([[0.3, 0.0], [0.8, 0.6]]),
    'first-token': np.array([[0.7, 0.1], [0.2, 0.4]]),
  }
  chosen = decoder_heads.chosen_heads(scores, [1, 2], draws=3, seed=0)
  tops = {(kind, k): list(flat) for kind, k, flat in chosen if kind != decoder_heads.RANDOM}
  # Flat indices of the [2, 2] grid: (0, 1) -> 1, (1, 0) -> 2, (1, 1) -> 3.
  assert tops[('top previous-token', 2)] == [1, 2]
  assert tops[('top induction', 2)] == [2, 3]
  assert tops[('top first-token', 1)] == [0]
  draws = [flat for kind, k, flat in chosen if kind == decoder_heads.RANDOM]
  assert [len(flat) for flat in draws] == [1, 1, 1, 2, 2, 2]
  assert all(len(set(flat)) == len(flat) and set(flat) <= {0, 1, 2, 3} for flat in draws)


def test_random_summary_of_hand_written_rows():
  rows = [dict(kind=decoder_heads.RANDOM, k=2, repeat_loss=loss) for loss in (1.0, 2.0, 4.0)] + [
    dict(kind='top induction', k=2, repeat_loss=9.0)
  ]
  summary = decoder_heads.random_summary(rows)['2']
  assert summary == pytest.approx(
    dict(mean=7 / 3, std=np.std([1, 2, 4], ddof=1), min=1.0, max=4.0, draws=3)
  )


def test_the_study_runs_on_a_converted_checkpoint_and_writes_its_table_and_figure(tmp_path):
  folder = write_checkpoint('gpt2', str(tmp_path / 'gpt2'))
  out = str(tmp_path / 'heads')
  args = ['--checkpoint', folder, '--out', out, '--sequences', '4', '--length', '12']
  result = decoder_heads.main([*args, '--ablate', '1,3', '--draws', '2'])
  with open(os.path.join(out, 'heads.json'), encoding='utf-8') as f:
    assert json.load(f) == json.loads(json.dumps(result))
  assert os.path.getsize(os.path.join(out, 'heads.png')) > 10_000
  assert list(result['scores']) == list(decoder_heads.SCORES)
  for kind in decoder_heads.SCORES:
    grid = np.asarray(result['scores'][kind])
    assert grid.shape == (2, 4) and np.all((grid >= 0) & (grid <= 1))
  rows = result['ablations']
  assert [(row['kind'], row['k']) for row in rows] == [
    (kind, k)
    for k in (1, 3)
    for kind in [f'top {s}' for s in decoder_heads.SCORES] + 2 * ['random (control)']
  ]
  top = next(row for row in rows if row['kind'] == 'top induction' and row['k'] == 3)
  best = np.unravel_index(np.argmax(result['scores']['induction']), (2, 4))
  assert top['heads'][0] == [int(i) for i in best] and len(top['heads']) == 3
  assert top['repeat_loss'] != pytest.approx(result['losses']['repeat'], abs=1e-7)
  assert set(result['random_summary']) == {'1', '3'}
  with pytest.raises(ValueError, match='--ablate must be positive integers'):
    decoder_heads.main([*args, '--ablate', '0,2'])
