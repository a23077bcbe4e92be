"""Image classification and captioning tasks: tiny runs train, evaluate and draw; the alignment
rate's geometry is checked by hand."""

import json
import os

import numpy as np
from test_training import get_config

import models
from reports.run_eval import Request, evaluate
from tasks.captioning import Captioning, aligned, region_centres
import training

PNG = b'\x89PNG\r\n\x1a\n'


def test_region_centres_by_hand():
  # A 2 x 4 grid over a 4 x 8 image: regions of 2 x 2 pixels, centres at 1, 3 (rows), 1..7 (cols).
  centres = region_centres((2, 4), (4, 8))
  np.testing.assert_allclose(centres[:5], [[1, 1], [1, 3], [1, 5], [1, 7], [3, 1]])
  assert centres.shape == (8, 2)


def test_aligned_checks_the_strongest_region_against_the_box():
  centres = region_centres((2, 4), (4, 8))
  weights = np.zeros(8)
  weights[6] = 1.0  # row 1, column 2: centre (3, 5)
  assert aligned(weights, (2, 4, 4, 6), centres)  # rows 2-3, columns 4-5
  assert not aligned(weights, (0, 4, 2, 6), centres)  # the region above
  assert aligned(weights, (2, 5, 4, 8), centres)  # column 5 is the box's first column
  assert not aligned(weights, (2, 6, 4, 8), centres)  # the box starts right of the centre


def test_alignment_counts_only_words_that_match_the_reference():
  attention = np.zeros((3, 1, 2))  # 3 words over a 1 x 2 grid
  attention[0, 0, 0] = attention[1, 0, 0] = attention[2, 0, 1] = 1.0
  sample = dict(
    boxes=[(0, 0, 4, 4), (0, 4, 4, 8)],
    reference='one two',
    words=['one', 'nine', '</s>'],
    attention=attention,
    pixels=np.zeros((4, 8, 1), np.uint8),
  )
  # 'one' looks left, inside its box: a hit; 'nine' is wrong, not counted; EOS has no box.
  assert Captioning._alignment(None, sample) == [True]


def _tiny(name, data_dir, model, **dataset):
  config = get_config(name)
  config.model = models.default_config(config.model.name, **model)
  config.dataset.update(data_dir=str(data_dir), batch_size=8, eval_batch_size=16, **dataset)
  config.update(
    num_train_steps=3,
    log_every_steps=50,
    checkpoint_every_steps=100,
    eval_every_steps=0,
    num_eval_decode=0,
    warmup_steps=1,
  )
  return config


def _pngs(out_dir):
  names = sorted(f for f in os.listdir(out_dir) if f.endswith('.png'))
  for name in names:
    with open(os.path.join(out_dir, name), 'rb') as f:
      assert f.read(8) == PNG, name
  return names


def test_vit_on_digits_trains_evaluates_and_draws_rollout(tmp_path, tfds_dir):
  config = _tiny(
    'vit_digits',
    tfds_dir,
    dict(patch_size=2, num_layers=2, d_model=16, num_heads=2, d_ff=32),
  )
  workdir = str(tmp_path / 'run')
  training.train_and_evaluate(config, workdir)
  metrics = evaluate(Request(workdir, max_examples=20, num_heatmaps=2))
  assert metrics['examples'] == 20 and 0 <= metrics['accuracy'] <= 1 and 'macro_f1' in metrics
  out = os.path.join(workdir, 'eval')
  lines = open(os.path.join(out, 'predictions.txt'), encoding='utf-8').read().splitlines()
  assert lines[0] == 'index | label | prediction | confidence' and len(lines) == 21
  assert np.sum(json.load(open(os.path.join(out, 'confusion_matrix.json')))['matrix']) == 20
  assert _pngs(out) == ['attention_0000.png', 'attention_0001.png', 'confusion_matrix.png']


def test_captioner_on_digit_captions_trains_evaluates_and_draws(tmp_path, tfds_dir):
  # The Transformer decoder takes the same path (tests/test_tasks.py trains it for a step).
  model = dict(encoder='cnn', decoder='gru', d_model=16, cnn_channels=(8, 8), embed_dim=8)
  config = _tiny('caption_digits', tfds_dir, model, builder_config='small')
  config.attention_penalty = 1.0
  workdir = str(tmp_path / 'run')
  training.train_and_evaluate(config, workdir)
  metrics = evaluate(Request(workdir, max_examples=16, num_heatmaps=1))
  assert metrics['examples'] == 16 and 0 <= metrics['exact_match'] <= 1
  assert 0 <= metrics['bleu'] <= 100 and metrics['perplexity'] > 1
  out = os.path.join(workdir, 'eval')
  lines = open(os.path.join(out, 'samples.txt'), encoding='utf-8').read().splitlines()
  assert lines[0] == 'reference | caption' and len(lines) == 17
  assert _pngs(out) == ['attention_0000.png']
