"""studies/attention_swaps.py on a tiny random Llama checkpoint: every variant starts from the
checkpoint's weights, the unchanged model's step 0 is the checkpoint's own score, and a finished
run is read back rather than trained again."""

import json

import numpy as np
import pytest
from tiny_decoders import VOCAB, write_checkpoint

from studies import attention_swaps


@pytest.fixture(scope='module')
def study(tmp_path_factory):
  base = tmp_path_factory.mktemp('swaps')
  folder = write_checkpoint('llama', str(base / 'llama'))
  text = base / 'text.txt'
  words = np.random.default_rng(0).integers(1, VOCAB, (400, 9))
  text.write_text('\n'.join(' '.join(f'w{i}' for i in row) for row in words))
  args = ['--checkpoint', folder, '--text', str(text), '--out', str(base / 'out')]
  args += ['--steps=2', '--eval_every=1', '--batch=4', '--seq_length=16', '--window=4']
  args.append('--variants=unchanged,linear')  # the others' conversions: test_init_from_checkpoint
  return base, args, attention_swaps.main(args)


def test_every_variant_has_a_curve_from_the_trained_weights(study):
  base, _, result = study
  names = [row['name'] for row in result['variants']]
  assert names == ['unchanged', 'linear']
  rows = {row['name']: row for row in result['variants']}
  for row in rows.values():
    assert [step for step, _ in row['curve']] == [0, 1, 2]
    assert np.isfinite(row['test_after'])
  # Only the attention changed at step 0: the linear map computes something else.
  assert rows['linear']['before'] != rows['unchanged']['before']
  assert json.loads((base / 'out' / 'swaps.json').read_text())['steps'] == 2
  assert (base / 'out' / 'swaps.png').stat().st_size > 10_000


def test_a_finished_variant_is_read_not_trained_again(study, capsys):
  _, args, result = study
  again = attention_swaps.main(args[:-1] + ['--variants=unchanged'])
  assert 'training' not in capsys.readouterr().out
  assert again['variants'][0]['curve'] == result['variants'][0]['curve']


def test_a_window_that_would_not_bind_is_one_sentence(study):
  _, args, _ = study
  with pytest.raises(ValueError, match='--window=16 must be in 1 .. --seq_length - 1 = 15'):
    attention_swaps.main(args + ['--window=16'])
