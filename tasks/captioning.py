"""Image captioning: an image in, a sentence out, each word generated from attention over regions.

Reads a captioning dataset of `data/captioning.py` (the generated digit captions, built from the
real handwritten digits with every digit's box recorded, or a TFDS captioning dataset), trains a
`models.ImageCaptioner` (CNN or ViT regions; GRU decoder with additive attention as in "Show,
Attend and Tell", or a Transformer decoder) with label-smoothed cross-entropy plus, with
`config.attention_penalty` > 0, the paper's doubly stochastic attention regulariser, and
evaluates decoded captions: exact match, sacreBLEU and, where boxes are known, the alignment
rate: how often the region a word attends to most lies inside the box of the object it names.
Each drawn example is the paper's figure: the image, then one panel per generated word with that
word's attention laid over the image.
"""

import functools
import os
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import sacrebleu

import attention
from data import captioning
from models import generation, interventions
from models.interfaces import ImageCaptioner
from tasks import picture_weights, pictures, teacher_forcing
from tasks.base import VOCAB_DIR, Batch, EvalOptions, Task

Array = jax.Array


def caption_attention(cross: Array) -> Array:
  """The attention one generated word pays to the regions, `[B, T, R]`: the last decoder layer's
  cross-attention `[B, L, N, T, R]`, averaged over heads (the GRU decoder has one layer and one
  head)."""
  return cross[:, -1].mean(axis=1)


def read_caption_attention(
  model, pixels: Array, decoder_inputs: Array, **kwargs
) -> tuple[Array, Array]:
  """Logits `[B, T, V]` of `model.caption_logits(pixels, decoder_inputs, **kwargs)` and the
  `caption_attention` `[B, T, R]` of that same pass, read by capture.

  Call it inside the jitted function (see `interventions.capture`).
  """
  logits, captured = interventions.capture(
    model, pixels, decoder_inputs, method='caption_logits', **kwargs
  )
  cross = interventions.stack(captured, model.attention_names['cross'])
  return logits, caption_attention(picture_weights.as_heads(cross, decoder_inputs.shape[1]))


@functools.partial(jax.jit, static_argnums=0)
def _word_attention(
  graphdef: nnx.GraphDef, state: nnx.State, pixels: Array, decoder_inputs: Array
) -> Array:
  """`caption_attention` `[B, T, R]` while the model reads `decoder_inputs` (no dropout)."""
  return read_caption_attention(nnx.merge(graphdef, state), pixels, decoder_inputs)[1]


def region_centres(grid: tuple[int, int], image_size: tuple[int, int]) -> np.ndarray:
  """`[gh * gw, 2]` (row, column) centres of the regions of a `grid` over the image, in the
  row-major order of the model's regions; pixel i spans [i, i + 1)."""
  (gh, gw), (height, width) = grid, image_size
  rows, cols = np.meshgrid(
    (np.arange(gh) + 0.5) * height / gh, (np.arange(gw) + 0.5) * width / gw, indexing='ij'
  )
  return np.stack([rows.ravel(), cols.ravel()], axis=-1)


def aligned(weights: np.ndarray, box: tuple[int, int, int, int], centres: np.ndarray) -> bool:
  """Whether the region with the largest of `weights` `[R]` has its centre inside `box`
  (top, left, bottom, right; bottom and right exclusive, in pixels)."""
  row, col = centres[int(np.argmax(weights))]
  top, left, bottom, right = box
  return top <= row < bottom and left <= col < right


class Captioning(Task):
  """Images and their captions through an image captioner; see the module docstring.

  Batches: `{'images': float32 [B, H, W, C] (normalised), 'targets': int32 [B, T] (word ids then
  EOS, padded), 'index': int32 [B]}`.
  """

  interface = ImageCaptioner
  unit = 'tokens'
  selection_metric = 'teacher_forced_exact_match'  # as translation: the outputs, not the loss
  samples_header = 'reference | caption'

  @staticmethod
  def dataset_config():
    return captioning.default_config()

  def __init__(self, config, workdir: str):
    self.data = captioning.build(config.dataset, os.path.join(workdir, VOCAB_DIR))
    self.tokenizer = self.data.tokenizer
    self.label_smoothing = config.label_smoothing
    self.attention_penalty = config.attention_penalty
    self.max_decode_length = config.max_decode_length or config.dataset.max_length + 1

  def model_args(self) -> dict[str, Any]:
    return dict(
      image_shape=tuple(self.data.image_shape),
      vocab_size=self.tokenizer.vocab_size,
      pad_id=self.tokenizer.pad_id,
    )

  def _decoder_inputs(self, batch: Batch) -> Array:
    return teacher_forcing.shift_right(batch['targets'], self.tokenizer.bos_id)

  def loss(self, model, batch, rng):
    targets, pad_id = batch['targets'], self.tokenizer.pad_id
    run = dict(deterministic=False, rngs=nnx.Rngs(dropout=rng))
    if self.attention_penalty:  # the penalty reads this pass's cross-attention (within the jit)
      logits, words = read_caption_attention(
        model, batch['images'], self._decoder_inputs(batch), **run
      )  # words [B, T, R]
    else:
      logits = model.caption_logits(batch['images'], self._decoder_inputs(batch), **run)
    real = targets != pad_id  # [B, T]
    loss = teacher_forcing.mean_loss(logits, targets, real, self.label_smoothing)
    counts = teacher_forcing.token_counts(logits, targets, real)
    if self.attention_penalty:
      # Per image, so the regulariser's weight does not depend on caption length.
      penalty = attention.doubly_stochastic_penalty(words, real)  # [B]
      rows = real.any(-1)
      loss += self.attention_penalty * (penalty * rows).sum() / jnp.maximum(rows.sum(), 1)
    return loss, counts

  def eval_counts(self, model, batch):
    targets = batch['targets']
    real = targets != self.tokenizer.pad_id  # [B, T]
    logits = model.caption_logits(batch['images'], self._decoder_inputs(batch), deterministic=True)
    return dict(
      loss_sum=teacher_forcing.loss_sum(logits, targets, real),
      **teacher_forcing.token_counts(logits, targets, real),
    )

  def summarize(self, counts):
    return teacher_forcing.teacher_forced_metrics(counts)

  def predict(self, model, batch, options: EvalOptions):
    tokenizer = self.tokenizer
    ids = generation.generate(
      model,
      batch['images'],
      max_length=self.max_decode_length,
      bos_id=tokenizer.bos_id,
      eos_id=tokenizer.eos_id,
      pad_id=tokenizer.pad_id,
      beam_size=options.beam_size,
      alpha=options.alpha,
    )
    # Where each generated word looked: the model reads its own caption once more.
    weights = _word_attention(
      *nnx.split(model), batch['images'], teacher_forcing.shift_right(ids, tokenizer.bos_id)
    )  # [B, T, R]
    grid = tuple(model.grid)
    return dict(output_ids=ids, word_attention=weights.reshape(*weights.shape[:2], *grid))

  def sample(self, split, row):
    example = self.data.examples(split)[row['index']]
    ids = teacher_forcing.until_eos(row['output_ids'], self.tokenizer)
    hypothesis = self.tokenizer.decode(ids)
    return dict(
      index=row['index'],
      reference=example.caption,
      references=list(example.references),
      hypothesis=hypothesis,
      words=self.tokenizer.tokens(ids),
      boxes=list(example.boxes),
      attention=np.asarray(row['word_attention'])[: len(ids)],  # [T, gh, gw]
      pixels=self.data.pixels(split)[row['index']],
      line=f'{example.caption} | {hypothesis}',
    )

  def prediction_metrics(self, samples):
    """Exact match and corpus sacreBLEU of the decoded captions and, where boxes are known, the
    alignment rate over the words that name the right object in the right place."""
    if not samples:
      return {}
    hypotheses = [s['hypothesis'] for s in samples]
    depth = max(len(s['references']) for s in samples)
    # sacreBLEU wants one stream per reference position; a missing one repeats the first.
    streams = [
      [s['references'][min(k, len(s['references']) - 1)] for s in samples] for k in range(depth)
    ]
    metrics = dict(
      exact_match=float(np.mean([s['hypothesis'] == s['reference'] for s in samples])),
      bleu=sacrebleu.corpus_bleu(hypotheses, streams).score,
    )
    hits = [hit for s in samples for hit in self._alignment(s)]
    if hits:
      metrics['alignment_rate'] = float(np.mean(hits))
    return metrics

  def _alignment(self, sample: dict[str, Any]) -> list[bool]:
    """Per generated word that equals the reference's word at its position and has a box:
    whether its strongest region lies inside that box."""
    if not sample['boxes']:
      return []
    grid = sample['attention'].shape[1:]
    centres = region_centres(grid, sample['pixels'].shape[:2])
    reference = sample['reference'].split()
    return [
      aligned(sample['attention'][t].ravel(), sample['boxes'][t], centres)
      for t, word in enumerate(sample['words'])
      if t < min(len(reference), len(sample['boxes'])) and word == reference[t]
    ]

  def draw(self, model, samples, out_dir, options):
    """One PNG per drawn example: the image, then each generated word's attention over it, the
    named object's box outlined where the dataset records it."""
    del model  # the weights were computed with the predictions
    paths = []
    for sample in samples[: options.num_pictures]:
      words = sample['words']
      boxes = [sample['boxes'][t] if t < len(sample['boxes']) else None for t in range(len(words))]
      path = os.path.join(out_dir, f'attention_{sample["index"]:04d}.png')
      pictures.save_image_attention(
        path,
        sample['pixels'],
        list(zip(words, sample['attention'])),
        boxes=boxes,
        title=f'{sample["hypothesis"]!r} (reference {sample["reference"]!r})',
      )
      paths.append(path)
    return paths

  def explore(self, model, samples, options):
    """Per sample, the image with each generated word's attention over its regions."""
    del model, options  # the weights were computed with the predictions
    return [
      dict(
        index=s['index'],
        reference=s['reference'],
        prediction=s['hypothesis'],
        correct=s['hypothesis'] == s['reference'],
        views=[dict(kind='image', pixels=s['pixels'], maps=list(zip(s['words'], s['attention'])))],
      )
      for s in samples
    ]
