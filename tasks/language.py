"""Language modelling: predict the next token (GPT-style) or the masked tokens (BERT-style).

Reads token rows of `data/language.py` (MQAR, a local text file, the key-sentence documents or a
TFDS text dataset) and trains a `models.LanguageModel`. The objective follows the model: a causal
one (`DecoderLM`) predicts every next token, or only the answers where the data marks them
(MQAR); a bidirectional one (`EncoderMLM`) predicts the tokens hidden by BERT masking.

Metrics: loss, perplexity, accuracy of the predicted tokens (MQAR: answer accuracy; MLM: masked-
token accuracy), bits per character for character vocabularies and, where the data says which
position the model should look at (MQAR: the matching key), the attention hit rate of each head
of the last layer. Evaluation writes continuations sampled at several temperatures (causal models
on free text), the predicted answers (MQAR) or the filled-in masks (MLM), and a picture of every
layer's and head's attention over one sequence.
"""

import math
import os
from typing import Any

from absl import logging
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from data import language
from data.tokenizers import SpecialIds
import models
from models import generation
from models.embeddings import ATTENTION_POSITIONS
from models.interfaces import LanguageModel
from tasks import picture_weights
from tasks.base import VOCAB_DIR, Batch, EvalOptions, Task
from tasks.language_attention import (
  attention_hits,
  explorer_records,
  logits_and_last_weights,
  mechanism_readings,
  save_head_grids,
  self_attention,
)
from tasks.losses import summed_cross_entropy
from tasks.teacher_forcing import hit_counts, loss_metrics, token_scores

Array = jax.Array
MASK_RATE = 0.15  # BERT: the share of tokens the model must predict


def bert_mask(
  rng: Array,
  ids: Array,
  *,
  mask_id: int,
  vocab_size: int,
  rate: float = MASK_RATE,
  special_ids: tuple[int, ...] = SpecialIds.special_ids,
) -> tuple[Array, Array]:
  """BERT's masking (Devlin et al. 2019): picks `rate` of the regular tokens to predict; of those
  80% become `mask_id`, 10% a random regular token and 10% stay as they are.

  Special tokens (`special_ids`, padding included) and `mask_id` itself are never picked; random
  replacements are regular tokens, never specials or the mask.

  Args:
    rng: a PRNG key.
    ids: int `[...]` token ids.
    mask_id: the `<mask>` id.
    vocab_size: V; regular tokens are the ids in `[0, V)` other than `special_ids` and `mask_id`.
    rate: the share of regular tokens picked.
    special_ids: the tokenizer's `special_ids` (Attend's vocabularies: the ids of
      `SPECIAL_TOKENS`; BERT's: [PAD], [UNK], [CLS], [SEP], [MASK] at 0 and 100-103).

  Returns:
    `(corrupted ids [...], picked bool [...])`: the model reads the first and is scored where
    the second is True, against the original ids.
  """
  pick_rng, kind_rng, token_rng = jax.random.split(rng, 3)
  excluded = sorted({*(int(i) for i in special_ids), int(mask_id)})
  regular = ~jnp.isin(ids, jnp.asarray(excluded, ids.dtype))
  picked = regular & jax.random.bernoulli(pick_rng, rate, ids.shape)
  kind = jax.random.uniform(kind_rng, ids.shape)
  # Random regular ids: the r-th regular id is r stepped over each excluded id at or below it
  # (ascending, so a step can reach the next excluded id and be counted by it too).
  random_ids = jax.random.randint(token_rng, ids.shape, 0, vocab_size - len(excluded))
  for skipped in excluded:
    random_ids = random_ids + (random_ids >= skipped)
  corrupted = jnp.where(kind < 0.8, mask_id, jnp.where(kind < 0.9, random_ids, ids))
  return jnp.where(picked, corrupted, ids), picked


class LanguageModeling(Task):
  """Token rows through a language model; see the module docstring.

  Batches: `{'inputs', 'targets': int32 [B, T], 'weights': float32 [B, T] (1 = the target counts),
  'support': int32 [B, T] (-1 = none), 'index': int32 [B]}`.
  """

  interface = LanguageModel
  unit = 'tokens'
  samples_header = 'text | model output (per temperature for sampled continuations)'

  @staticmethod
  def dataset_config():
    return language.default_config()

  def __init__(self, config, workdir: str):
    lengths = _readable(config)  # before the data writes a vocabulary into the workdir
    self.causal = models.model_class(config.model.name).causal
    self.data = language.build(
      config.dataset, os.path.join(workdir, VOCAB_DIR), mask_token=not self.causal
    )
    self.tokenizer = self.data.tokenizer
    self.label_smoothing = config.label_smoothing
    self.continuation_length = _continuation_length(config)
    self.at_length = {n: self.data.at_length(n) for n in lengths}
    # Cut the rows the run will read now, so a window longer than a split fails before anything
    # compiles (rows are cached for the batches).
    for split in (config.dataset.train_split, config.dataset.eval_split):
      self.data.rows(split)
    for data in self.at_length.values():
      data.rows(config.dataset.eval_split)

  def model_args(self) -> dict[str, Any]:
    return dict(vocab_size=self.tokenizer.vocab_size, pad_id=self.tokenizer.pad_id)

  def split_views(self, split):
    """The split cut into rows of each of `config.dataset.eval_lengths`: '@256'."""
    return {f'@{n}': f'{split}@{n}' for n in self.at_length}

  def batches(self, split, *, batch_size, shuffle, seed, num_epochs=None):
    name, _, length = split.partition('@')  # a view: 'validation@256'
    data = self.at_length[int(length)] if length else self.data
    return data.batches(
      name, batch_size=batch_size, shuffle=shuffle, seed=seed, num_epochs=num_epochs
    )

  def _objective(self, batch: Batch, rng: Array) -> tuple[Array, Array, Array]:
    """`(model inputs, targets, weights)`: the batch's as they are, or BERT-masked inputs."""
    if self.causal:
      return batch['inputs'], batch['targets'], batch['weights']
    ids = batch['inputs']
    corrupted, picked = bert_mask(
      rng,
      ids,
      mask_id=self.data.mask_id,
      vocab_size=self.tokenizer.vocab_size,
      special_ids=self.tokenizer.special_ids,
    )
    return corrupted, ids, picked.astype(jnp.float32)

  def loss(self, model, batch, rng):
    mask_rng, dropout_rng = jax.random.split(rng)
    inputs, targets, weights = self._objective(batch, mask_rng)
    states = model.token_states(inputs, deterministic=False, rngs=nnx.Rngs(dropout=dropout_rng))
    # The mean loss (`mean_loss`) and the hits, a chunk of logits at a time: the logits of a
    # large vocabulary are the largest activation by far.
    loss_sum, hits = summed_cross_entropy(
      model.logits_of, states, targets, weights, self.label_smoothing
    )
    loss = loss_sum / jnp.maximum(weights.sum(), 1)
    return loss, hit_counts(hits.reshape(targets.shape), weights)

  def _eval_rng(self, batch: Batch) -> Array:
    """A masking key fixed per batch, so every evaluation of a split masks the same tokens."""
    return jax.random.fold_in(jax.random.key(0), batch['index'][0])

  def eval_counts(self, model, batch):
    inputs, targets, weights = self._objective(batch, self._eval_rng(batch))
    states = model.token_states(inputs, deterministic=True)
    loss_sum, hits = summed_cross_entropy(model.logits_of, states, targets, weights)
    return dict(loss_sum=loss_sum, **hit_counts(hits.reshape(targets.shape), weights))

  def summarize(self, counts):
    accuracy, exact = token_scores(counts)
    metrics = dict(accuracy=accuracy, exact_match=exact, **loss_metrics(counts))
    if 'loss' in metrics:  # evaluation: the unsmoothed loss, in nats per token
      # Bits per unit of the vocabulary: a character, or a token (word, piece).
      unit = 'char' if self.tokenizer.kind == 'char' else 'token'
      metrics[f'bits_per_{unit}'] = metrics['loss'] / math.log(2)
    return metrics

  def predict(self, model, batch, options: EvalOptions):
    inputs, targets, weights = self._objective(batch, self._eval_rng(batch))
    logits, last = logits_and_last_weights(*nnx.split(model), inputs)
    out = dict(
      model_inputs=inputs,
      model_targets=targets,
      scored=weights > 0,
      predicted=jnp.argmax(logits, -1),
      hits=attention_hits(last, batch['support']),
    )
    if self.causal and not bool(jnp.any(batch['support'] >= 0)) and options.temperatures:
      # Free text: continue the first half of each row, once per temperature.
      prompt = inputs[:, : max(1, inputs.shape[1] // 2)]
      out['continuations'] = jnp.stack(
        [
          generation.continue_prompt(
            model,
            prompt,
            max_length=self.continuation_length,
            rng=jax.random.key(options.seed),
            temperature=float(t),
            top_k=options.top_k,
            top_p=options.top_p,
            # A tokenizer without an end token: -1, which never occurs, never ends a row.
            eos_id=-1 if self.tokenizer.eos_id is None else self.tokenizer.eos_id,
            pad_id=self.tokenizer.pad_id,
            press=options.press,
          )
          for t in options.temperatures
        ],
        axis=1,
      )  # [B, K, length]
      out['prompt_length'] = jnp.full(inputs.shape[:1], prompt.shape[1], jnp.int32)
      out['temperatures'] = jnp.broadcast_to(
        jnp.asarray(options.temperatures, jnp.float32), (inputs.shape[0], len(options.temperatures))
      )
    return out

  def sample(self, split, row):
    decode = lambda ids: _one_line(self.tokenizer.decode(ids))
    scored = np.asarray(row['scored'])
    inputs, support = np.asarray(row['model_inputs']), np.asarray(row['support'])
    record = dict(
      index=row['index'],
      inputs=inputs.tolist(),
      support=support.tolist(),
      hits=np.asarray(row['hits']).tolist(),
      queries=int((support >= 0).sum()),
    )
    if 'continuations' in row:
      prompt = inputs[: int(row['prompt_length'])]
      record['continuations'] = [decode(ids) for ids in np.asarray(row['continuations'])]
      record.update(
        reference=decode(inputs[len(prompt) :]), prediction=record['continuations'][0], correct=None
      )  # free text: the row's own continuation, the first sample's
      record['line'] = f'{decode(prompt)} -> ' + ' || '.join(
        f'[T={t:g}] {text}'
        for t, text in zip(np.asarray(row['temperatures']), record['continuations'])
      )
      return record
    # Teacher-forced predictions at the scored positions: MQAR answers, or masked tokens.
    tokens = self.tokenizer.tokens
    predicted = np.asarray(row['predicted'])[scored]
    expected = np.asarray(row['model_targets'])[scored]
    record.update(
      reference=' '.join(tokens(expected)),
      prediction=' '.join(tokens(predicted)),
      correct=bool(np.array_equal(predicted, expected)),
    )
    pairs = ' '.join(
      f'{p}{"" if p == e else f"(not {e})"}' for p, e in zip(tokens(predicted), tokens(expected))
    )
    record['line'] = (
      f'{" ".join(tokens(inputs[inputs != self.tokenizer.pad_id]))} | {pairs} | '
      f'{int((predicted == expected).sum())}/{len(expected)} right'
    )
    return record

  def prediction_metrics(self, samples):
    """The attention hit rate of each head of the last layer, and the best head's."""
    queries = sum(s['queries'] for s in samples)
    if not queries:
      return {}
    rates = np.sum([s['hits'] for s in samples], axis=0) / queries  # [N]
    metrics = {f'attention_hit_rate/head{n}': float(r) for n, r in enumerate(rates)}
    metrics['attention_hit_rate'] = float(rates.max())
    return metrics

  def draw(self, model, samples, out_dir, options):
    """Every head's attention over each drawn sample's sequence, one PNG each: every layer, or
    for a deep model `pictures.spread_layers` of them (prompt.py attention draws any layers)."""
    drawn = samples[: options.num_pictures]
    return save_head_grids(drawn, self.attention(model, drawn), self.tokenizer.tokens, out_dir)

  def explore(self, model, samples, options):
    """Per sample, its self-attention of every head over its model inputs: of every layer, or
    for a deep model of `language_attention.EXPLORED_LAYERS` evenly spaced, one map each."""
    del options
    readings = mechanism_readings(model, samples, self.tokenizer)
    return explorer_records(
      samples, self.attention(model, samples), self.tokenizer.tokens, readings
    )

  def attention(self, model, samples):
    """Per sample, in order, its self-attention weights `[L, N, T, T]` (one jitted forward)."""
    return picture_weights.batched_weights(
      self_attention,
      model,
      [(sample['inputs'],) for sample in samples],
      pad_ids=(self.tokenizer.pad_id,),
      crop=(0, 0),
    )


def _readable(config) -> tuple[int, ...]:
  """`config.dataset.eval_lengths`, checked against what the model can read.

  Raises:
    ValueError: a length past a learned position table, which has no embedding beyond
      `config.model.max_length`.
  """
  lengths, model = tuple(config.dataset.get('eval_lengths', ())), config.model
  if model.get('positions') == 'learned' and max(lengths, default=0) > model.max_length:
    raise ValueError(
      f'config.dataset.eval_lengths={lengths} reaches past the learned position '
      f'table of config.model.max_length={model.max_length}: a learned '
      'table has no embedding for later positions.'
    )
  return lengths


def _continuation_length(config) -> int:
  """Tokens sampled after a prompt of half a row: `config.max_decode_length` (default: the other
  half), capped, with a logged message, where the sample would run past the positions the
  model was trained on (`dataset.seq_length`) and nothing keeps it within them.

  A sliding window no longer than the training rows keeps every query within trained relative
  distances when positions are relative (rope, alibi, t5); absolute positions (sinusoidal,
  learned) and the causal count of 'none' leave the trained range whatever the window
  (configs/study_length.py measures what happens past it; configs/study_sinks.py, that a
  trained rotary model read with such a window stays as good as within its rows).
  """
  trained = config.dataset.seq_length
  prompt = max(1, trained // 2)
  wanted = config.max_decode_length or trained - prompt
  # Global layers (`global_every`) see every key, however far.
  window = 0 if config.model.get('global_every') else config.model.get('window', 0)
  relative = config.model.get('positions') in ATTENTION_POSITIONS  # offsets, not places
  if prompt + wanted <= trained or (relative and 0 < window <= trained):
    return wanted
  logging.warning(
    'Sampling %d tokens after a %d-token prompt would run %d positions past the %d '
    'the model was trained on (config.dataset.seq_length); sampling %d. With '
    'positions rope, alibi or t5, config.model.window <= %d samples further.',
    wanted,
    prompt,
    prompt + wanted - trained,
    trained,
    trained - prompt,
    trained,
  )
  return trained - prompt


def _one_line(text: str) -> str:
  """Text on one line of the samples file (newlines and tabs shown as escapes)."""
  return text.replace('\n', '\\n').replace('\t', '\\t')
