"""studies/attention_distance.py: the distances of hand-built weights, and on a tiny random
Gemma 3 (a global layer between two local ones of window 6) against transformers' weights, end
to end as a user runs it."""

import json
import os

import numpy as np
import pytest
from tiny_decoders import VOCAB, write_checkpoint

from studies import attention_distance

pytest.importorskip('transformers', reason='builds the tiny checkpoint (test extra)')


def test_distances_of_hand_built_weights():
  """4 positions, queries 2 and 3. Head 0: all on key 0; head 1: half on the previous key, half
  on the query itself; head 2: a third each on keys 0, 1 and the query."""
  weights = np.zeros((3, 4, 4))
  weights[0, :, 0] = 1
  for i in range(4):
    weights[1, i, max(i - 1, 0)] += 0.5
    weights[1, i, i] += 0.5
  weights[2, 2, :3] = weights[2, 3, [0, 1, 3]] = 1 / 3
  got = attention_distance.distances(weights[None], 2)  # one row
  # Head 0: 2 and 3 back; head 1: 0.5 each; head 2: (2 + 1) / 3 and (3 + 2) / 3.
  np.testing.assert_allclose(got['distance'], [2.5, 0.5, (1 + 5 / 3) / 2], rtol=1e-6)
  np.testing.assert_allclose(got['first-token weight'], [1.0, 0.0, 1 / 3], rtol=1e-6)
  # Without key 0, head 2's queries have half each on keys 1, 2 (0.5 back) and on 1, 3 (1 back).
  np.testing.assert_allclose(
    got['distance without the first token'][1:], [0.5, (0.5 + 1.0) / 2], rtol=1e-6
  )


@pytest.fixture(scope='module')
def gemma(tmp_path_factory):
  folder = write_checkpoint('gemma3_text', str(tmp_path_factory.mktemp('gemma')))
  words = np.random.default_rng(1).integers(3, VOCAB, 40)
  text = os.path.join(folder, 'words.txt')
  with open(text, 'w', encoding='utf-8') as f:
    f.write(' '.join(f'w{i}' for i in words))
  return folder, text


def test_the_study_equals_transformers_weights_and_writes_its_table_and_figure(gemma, tmp_path):
  import torch
  import transformers

  folder, text = gemma
  out = str(tmp_path / 'distance')
  result = attention_distance.main(
    ['--checkpoint', folder, '--text', text, '--out', out, '--tokens', '30', '--first_query', '12']
  )
  with open(os.path.join(out, 'distance.json'), encoding='utf-8') as f:
    assert json.load(f) == json.loads(json.dumps(result))
  assert os.path.getsize(os.path.join(out, 'distance.png')) > 10_000
  assert result['windows'] == [6, 0, 6]
  reference = transformers.AutoModelForCausalLM.from_pretrained(
    folder, attn_implementation='eager', dtype=torch.float32
  ).eval()
  with open(text, encoding='utf-8') as f:
    ids = [int(word[1:]) for word in f.read().split()][:30]
  with torch.no_grad():
    attentions = reference(torch.tensor([ids]), output_attentions=True).attentions
  weights = np.stack([w[0].numpy() for w in attentions])[:, :, 12:]  # [L, N, 18, 30]
  back = np.arange(12, 30)[:, None] - np.arange(30)[None, :]
  expected = (weights * np.maximum(back, 0)).sum(-1).mean(-1)  # [L, N]
  np.testing.assert_allclose(result['distance'], expected, rtol=1e-4)
  np.testing.assert_allclose(result['first-token weight'], weights[..., 0].mean(-1), atol=1e-6)
  kept = weights[..., 1:] / weights[..., 1:].sum(-1, keepdims=True)
  np.testing.assert_allclose(
    result['distance without the first token'],
    (kept * back[:, 1:]).sum(-1).mean(-1),
    rtol=1e-4,
  )
  grid = np.asarray(result['distance'])
  assert grid[[0, 2]].max() < 5 < grid[1].min()  # within the window of 6, and far beyond it
  with pytest.raises(ValueError, match='--first_query must be in 1 .. --tokens - 1 = 29'):
    attention_distance.main(
      [
        '--checkpoint',
        folder,
        '--text',
        text,
        '--out',
        out,
        '--tokens',
        '30',
        '--first_query',
        '30',
      ]
    )
