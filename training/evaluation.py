"""Evaluation on a split: teacher-forced loss and accuracy, decoded exact match and sacreBLEU."""

import math

import jax
import numpy as np
import sacrebleu
from jax.experimental import multihost_utils

from data import EOS_ID
from models import decoding
from training import sharding
from training.steps import TrainState, eval_step, merge_model

_eval_step = jax.jit(eval_step)


def _gather(array) -> np.ndarray:
  """A global array as one NumPy array on every host."""
  return np.asarray(multihost_utils.process_allgather(array, tiled=True))


def teacher_forced_metrics(state: TrainState, task, split: str, *, batch_size: int, mesh) -> dict:
  """Loss, perplexity, token accuracy and teacher-forced exact match over the whole split."""
  totals = dict(loss_sum=0.0, tokens=0, correct=0, rows=0, exact=0)
  for batch in task.batches(split, batch_size=batch_size, shuffle=False, seed=0, num_epochs=1):
    batch = sharding.shard_batch({k: batch[k] for k in ('inputs', 'targets')}, mesh)
    for key, value in jax.device_get(_eval_step(state, batch)).items():
      totals[key] += value
  tokens = max(totals['tokens'], 1)
  loss = totals['loss_sum'] / tokens
  return dict(loss=loss, perplexity=math.exp(min(loss, 50.0)),
              token_accuracy=totals['correct'] / tokens,
              teacher_forced_exact_match=totals['exact'] / max(totals['rows'], 1))


def decode_split(state: TrainState, task, split: str, *, batch_size: int, mesh, max_examples: int,
                 max_length: int, beam_size: int = 1, alpha: float = 0.6) -> list[dict]:
  """Decodes the first `max_examples` examples of `split` that pass its length limits (all if 0).

  Returns:
    One dict per example, in split order: index, source, reference, hypothesis (text) and
    inputs / output_ids (lists of token ids, EOS included) for plotting.
  """
  examples = task.examples(split)
  # Batches come sorted by length; choosing by index keeps the sample unbiased by length.
  batches = list(task.batches(split, batch_size=batch_size, shuffle=False, seed=0, num_epochs=1))
  kept = sorted(int(i) for batch in batches for i in batch['index'] if i >= 0)
  wanted = set(kept[:max_examples] if max_examples > 0 else kept)
  model, results = merge_model(state), []
  for batch in batches:
    if wanted.isdisjoint(batch['index'].tolist()):
      continue
    inputs = sharding.shard_batch({'inputs': batch['inputs']}, mesh)['inputs']
    ids = _gather(decoding.generate(model, inputs, max_length=max_length, beam_size=beam_size,
                                    alpha=alpha))
    # This host's rows of the global batch (multi-host: each host reports on its own rows).
    rows = len(batch['index'])
    ids = ids[jax.process_index() * rows:(jax.process_index() + 1) * rows]
    for row, index in enumerate(batch['index'].tolist()):
      if index in wanted:
        source, reference = examples[index]
        output = _until_eos(ids[row])
        results.append(dict(index=index, source=source, reference=reference,
                            hypothesis=task.target_tokenizer.decode(output),
                            inputs=_until_eos(batch['inputs'][row]), output_ids=output))
  return sorted(results, key=lambda result: result['index'])


def _until_eos(ids) -> list[int]:
  """Token ids up to and including the first EOS (padding dropped)."""
  ids = [int(i) for i in ids if i != 0]
  return ids[:ids.index(EOS_ID) + 1] if EOS_ID in ids else ids


def decoded_metrics(samples: list[dict], target_vocab: str) -> dict:
  """Exact match (hypothesis == reference) and corpus sacreBLEU of decoded samples.

  BLEU counts character n-grams when the targets are character-level (single compound words such
  as German number words would otherwise score 0), and 13a word n-grams otherwise.
  """
  if not samples:
    return {}
  hypotheses = [sample['hypothesis'] for sample in samples]
  references = [sample['reference'] for sample in samples]
  tokenize = 'char' if target_vocab == 'char' else '13a'
  exact = np.mean([h == r for h, r in zip(hypotheses, references)])
  return dict(exact_match=float(exact),
              bleu=sacrebleu.corpus_bleu(hypotheses, [references], tokenize=tokenize).score)
