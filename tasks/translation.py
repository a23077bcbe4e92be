"""Translation: text pairs in, text out; teacher-forced training, decoded evaluation.

Reads any text-pair dataset of `data/` (number_words, dates, a TSV file, TFDS translation corpora),
trains an encoder-decoder (`models.EncoderDecoder`: the Transformer or the RNN Seq2Seq) with
label-smoothed per-token cross-entropy, and evaluates with greedy or beam decoding: exact match,
sacreBLEU, and a cross-attention heatmap per example (output tokens down, source tokens across).
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
from data import translation
from models import generation, interventions
from models.interfaces import EncoderDecoder
from tasks import picture_weights, pictures
from tasks.base import VOCAB_DIR, Batch, EvalOptions, Task, one_row
from tasks.copy_metric import copy_accuracy
from tasks.teacher_forcing import (
  loss_sum,
  mean_loss,
  shift_right,
  teacher_forced_metrics,
  token_counts,
  until_eos,
)

Array = jax.Array


def scorers(tokenize: str = '13a') -> dict[str, Any]:
  """sacreBLEU's BLEU and chrF as translations are scored here. The task counts character n-grams
  for BLEU when the targets are character-level (single compound words such as German number
  words would otherwise score 0), and 13a word n-grams otherwise."""
  return dict(bleu=sacrebleu.metrics.BLEU(tokenize=tokenize), chrf=sacrebleu.metrics.CHRF())


def text_scores(
  hypotheses: list[str], references: list[str], scoring: dict[str, Any] | None = None
) -> dict[str, float]:
  """Exact match, corpus BLEU and chrF (`scoring`, default `scorers()`) of outputs against their
  references, and, where some reference holds placeholders or identifiers, copy accuracy
  (`tasks.copy_metric`: carried over intact) with the number of references that hold them."""
  scoring = scorers() if scoring is None else scoring
  metrics = dict(
    exact_match=float(np.mean([h == r for h, r in zip(hypotheses, references, strict=True)])),
    **{name: s.corpus_score(hypotheses, [references]).score for name, s in scoring.items()},
  )
  copied, with_items = copy_accuracy(hypotheses, references)
  if with_items:  # generated tasks (number words, dates) have nothing to copy
    metrics.update(copy_accuracy=copied, copy_examples=float(with_items))
  return metrics


def teacher_forced_loss(
  model, batch: Batch, rng: Array, *, bos_id: int, pad_id: int, label_smoothing: float = 0.0
) -> tuple[Array, dict[str, Array]]:
  """An encoder-decoder's `teacher_forcing.mean_loss` over the target tokens (dropout on) and
  their `teacher_forcing.token_counts`.

  Args:
    model: an `EncoderDecoder`.
    batch: `{'inputs': int32 [B, S], 'targets': int32 [B, T]}`, `pad_id` = padding.
    rng: PRNG key for dropout.
    bos_id: the first decoder input.
    pad_id: padding, which the loss and counts skip.
    label_smoothing: see `tasks.losses.cross_entropy`.
  """
  targets = batch['targets']
  logits = model(
    batch['inputs'], shift_right(targets, bos_id), deterministic=False, rngs=nnx.Rngs(dropout=rng)
  )
  real = targets != pad_id  # [B, T]
  return mean_loss(logits, targets, real, label_smoothing), token_counts(logits, targets, real)


def teacher_forced_counts(model, batch: Batch, *, bos_id: int, pad_id: int) -> dict[str, Array]:
  """An encoder-decoder's `teacher_forcing.loss_sum`, `token_counts` and cross-attention entropy
  of a batch, without dropout.

  The entropy (nats, averaged over layers and heads, summed over target tokens) measures how
  sharply the decoder attends: 0 = one source token, log S = uniform over S.
  """
  targets = batch['targets']
  real = targets != pad_id  # [B, T]
  decoder_inputs = shift_right(targets, bos_id)
  if 'cross' not in model.attention_names:  # a decoder without attention (Seq2Seq 'none')
    logits = model(batch['inputs'], decoder_inputs, deterministic=True)
    return dict(loss_sum=loss_sum(logits, targets, real), **token_counts(logits, targets, real))
  logits, cross = read_attention(model, 'cross', batch['inputs'], decoder_inputs)
  entropy = attention.attention_entropy(cross).mean(axis=(1, 2))  # [B, T]
  return dict(
    loss_sum=loss_sum(logits, targets, real),
    entropy_sum=jnp.sum(entropy, where=real),
    **token_counts(logits, targets, real),
  )


class Translation(Task):
  """Text pairs through an encoder-decoder; see the module docstring.

  Batches: `{'inputs': int32 [B, S], 'targets': int32 [B, T], 'index': int32 [B]}`, ids then EOS,
  padded with the tokenizer's padding id.
  """

  interface = EncoderDecoder
  unit = 'tokens'
  # Label smoothing lets the loss rise while the outputs still improve (configs/default.py: loss
  # lowest at step 500, exact match 95.6% there against 99.6% at 1500), so the outputs select.
  selection_metric = 'teacher_forced_exact_match'
  decoded_metrics = ('exact_match', 'bleu', 'chrf', 'copy_accuracy', 'copy_examples')
  samples_header = 'source | reference | hypothesis'

  @staticmethod
  def dataset_config():
    return translation.default_config()

  def __init__(self, config, workdir: str):
    self.data = translation.build(config.dataset, os.path.join(workdir, VOCAB_DIR))
    self.source_tokenizer = self.data.source_tokenizer
    self.target_tokenizer = self.data.target_tokenizer
    self.target_vocab = config.dataset.target_vocab
    self.label_smoothing = config.label_smoothing
    self.max_decode_length = config.max_decode_length or config.dataset.max_target_length + 1
    self.pad_id = self.target_tokenizer.pad_id

  def model_args(self) -> dict[str, Any]:
    return dict(
      input_vocab_size=self.source_tokenizer.vocab_size,
      output_vocab_size=self.target_tokenizer.vocab_size,
      pad_id=self.source_tokenizer.pad_id,
    )

  def loss(self, model, batch, rng):
    return teacher_forced_loss(
      model,
      batch,
      rng,
      bos_id=self.target_tokenizer.bos_id,
      pad_id=self.pad_id,
      label_smoothing=self.label_smoothing,
    )

  def eval_counts(self, model, batch):
    return teacher_forced_counts(
      model, batch, bos_id=self.target_tokenizer.bos_id, pad_id=self.pad_id
    )

  def summarize(self, counts):
    return teacher_forced_metrics(counts)

  def predict(self, model, batch, options: EvalOptions):
    tokenizer = self.target_tokenizer
    ids = generation.generate(
      model,
      batch['inputs'],
      max_length=self.max_decode_length,
      bos_id=tokenizer.bos_id,
      eos_id=tokenizer.eos_id,
      pad_id=tokenizer.pad_id,
      beam_size=options.beam_size,
      alpha=options.alpha,
    )
    return dict(output_ids=ids)

  def sample(self, split, row):
    # The text as the corpus holds it: outputs are scored against the raw reference, whatever
    # preprocessing the model was trained on.
    source, reference = self.data.raw_examples(split)[row['index']]
    return self._record(row, source, reference)

  def text_sample(self, model, text, options):
    inputs = np.asarray([self.data.source_ids(text)], np.int32)
    return self._record(one_row(self, model, dict(inputs=inputs), options), text, None)

  def _record(self, row: dict[str, Any], source: str, reference: str | None) -> dict[str, Any]:
    output = until_eos(row['output_ids'], self.target_tokenizer)
    hypothesis = self.data.output_text(self.target_tokenizer.decode(output), source)
    return dict(
      index=row['index'],
      source=source,
      reference=reference,
      hypothesis=hypothesis,
      inputs=until_eos(row['inputs'], self.source_tokenizer),
      output_ids=output,
      line=f'{source} | {reference or ""} | {hypothesis}',
    )

  def _scorers(self) -> dict[str, Any]:
    return scorers('char' if self.target_vocab == 'char' else '13a')

  def prediction_metrics(self, samples):
    """`text_scores` of the decoded samples against the raw references."""
    if not samples:
      return {}
    hypotheses = [sample['hypothesis'] for sample in samples]
    return text_scores(hypotheses, [sample['reference'] for sample in samples], self._scorers())

  def metric_signatures(self):
    scorers = self._scorers()
    # sacreBLEU gives a signature only after a score (it records the number of references): one
    # trivial score with one reference each, as every score here has.
    for scorer in scorers.values():
      scorer.corpus_score(['a'], [['a']])
    return {name: str(scorer.get_signature()) for name, scorer in scorers.items()}

  def draw(self, model, samples, out_dir, options):
    """One PNG per sample: decoder cross-attention while producing its own hypothesis (none for
    a decoder without attention)."""
    if 'cross' not in model.attention_names:
      return []
    drawn = [sample for sample in samples[: options.num_pictures] if sample['output_ids']]
    paths = []
    for sample, weights in zip(drawn, self.attention(model, drawn, ('cross',))):
      cross = weights['cross']  # [L, N, T, S]
      # A one-layer, one-head map (a Seq2Seq's) has no layer or head to name.
      which = (
        ''
        if cross.shape[:2] == (1, 1)
        else f' (layer {options.layer}, '
        f'{"mean over heads" if options.head < 0 else f"head {options.head}"})'
      )
      path = os.path.join(out_dir, f'attention_{sample["index"]:04d}.png')
      pictures.save_heatmap(
        path,
        pictures.select_heads(cross, options.layer, options.head),
        self._labels(self.source_tokenizer, sample['inputs'], sample),
        self._labels(self.target_tokenizer, sample['output_ids'], sample),
        f'{sample["source"]} -> {sample["hypothesis"]}{which}',
      )
      paths.append(path)
    return paths

  def explore(self, model, samples, options):
    """Per sample, the encoder self-, decoder self- and cross-attention (whichever the model
    has) while producing its own hypothesis."""
    del options
    if not model.attention_names:
      return []  # nothing to explore
    drawn = [sample for sample in samples if sample['output_ids']]
    names = {
      'cross': 'cross-attention',
      'encoder_self': 'encoder self-attention',
      'decoder_self': 'decoder self-attention',
    }
    records = []
    for sample, weights in zip(drawn, self.attention(model, drawn, tuple(names))):
      source = self._labels(self.source_tokenizer, sample['inputs'], sample)
      output = self._labels(self.target_tokenizer, sample['output_ids'], sample)
      inputs = self._labels(
        self.target_tokenizer, [self.target_tokenizer.bos_id, *sample['output_ids'][:-1]], sample
      )
      axes = {
        'cross': (output, source),
        'encoder_self': (source, source),
        'decoder_self': (output, inputs),
      }
      maps = [
        dict(name=names[key], rows=axes[key][0], cols=axes[key][1], weights=w)
        for key, w in weights.items()
      ]
      records.append(
        dict(
          index=sample['index'],
          reference=sample['reference'] or '',
          prediction=sample['hypothesis'],
          correct=None
          if sample['reference'] is None
          else sample['hypothesis'] == sample['reference'],
          views=[dict(kind='attention', maps=maps)],
        )
      )
    return records

  def _labels(self, tokenizer, ids, sample) -> list[str]:
    """The tokens of `ids` as a picture's axis shows them (a tag with the item it stands for)."""
    return self.data.token_labels(tokenizer.tokens(ids), sample['source'])

  def attention(self, model, samples, keys) -> list[dict[str, np.ndarray]]:
    """Per sample, the model's attention weights `[L, N, T', S']` named by `keys` (those it
    has of 'cross', 'encoder_self', 'decoder_self') while producing its own hypothesis."""
    # Each sample's decoder inputs as `shift_right` makes them: BOS, then all but its last id.
    examples = [
      (sample['inputs'], [self.target_tokenizer.bos_id, *sample['output_ids'][:-1]])
      for sample in samples
    ]
    pads = (self.source_tokenizer.pad_id, self.target_tokenizer.pad_id)
    found = {
      key: list(
        picture_weights.batched_weights(
          _FORWARDS[key], model, examples, crop=_CROPS[key], pad_ids=pads
        )
      )
      for key in keys
      if key in model.attention_names  # e.g. a Seq2Seq has cross-attention only
    }
    return [{key: weights[i] for key, weights in found.items()} for i in range(len(samples))]


def read_attention(model, role: str, inputs: Array, decoder_inputs: Array) -> tuple[Array, Array]:
  """Logits `[B, T, V_out]` of a teacher-forced pass without dropout, and the attention the model
  lists under `role` as heads `[B, L, N, T', S']` (T' the queries, S' the keys).

  Call it inside the jitted function (see `interventions.capture`).

  Raises:
    KeyError: the model lists no such role.
  """
  pattern = model.attention_names[role]
  logits, captured = interventions.capture(model, inputs, decoder_inputs, deterministic=True)
  queries = (inputs, decoder_inputs)[_CROPS[role][0]].shape[1]
  return logits, picture_weights.as_heads(interventions.stack(captured, pattern), queries)


def _weights(role: str, model, inputs: Array, decoder_inputs: Array) -> Array:
  """`read_attention`'s weights `[B, L, N, T', S']` of source `[B, S]` and decoder inputs
  `[B, T]`; KeyError where the model has no such attention."""
  return read_attention(model, role, inputs, decoder_inputs)[1]


# One function per key, made once, so that each compiles once (`picture_weights` jits by it).
_FORWARDS = {
  key: functools.partial(_weights, key) for key in ('cross', 'encoder_self', 'decoder_self')
}
# The fields (0: source, 1: decoder inputs) whose lengths the weights' last two axes have.
_CROPS = {'cross': (1, 0), 'encoder_self': (0, 0), 'decoder_self': (1, 1)}
