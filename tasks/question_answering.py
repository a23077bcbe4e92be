"""Question answering over a story: a memory network reads the story's sentences, hop by hop.

Reads a bAbI-style dataset of `data/question_answering.py` (Attend's generated tasks 1, 2 and 16, or
the original bAbI files from a local folder), trains a `models.QuestionAnswerer` (MemN2N) with
cross-entropy on the answer word, and evaluates answer accuracy and, since every example records its
supporting sentences, the supporting-fact hit rate of each hop: how often the hop's strongest weight
lands on a supporting sentence. The picture is the notes' hop table: the story's sentences down, one
column of weights per hop, the supporting sentences marked (PNG and text).
"""

import functools
import os
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from data import question_answering
from models import interventions
from models.interfaces import QuestionAnswerer
from tasks import memory_pictures
from tasks.base import VOCAB_DIR, Batch, EvalOptions, Task, one_row
from tasks.classification import example_counts
from tasks.losses import cross_entropy

Array = jax.Array


@functools.partial(jax.jit, static_argnums=0)
def _answer(graphdef: nnx.GraphDef, state: nnx.State, story: Array, query: Array):
  """Answer probabilities `[B, V]` and hop weights `[B, K, M]` (no dropout)."""
  model = nnx.merge(graphdef, state)
  logits, captured = interventions.capture(model, story, query, method='answer')
  hops = interventions.stack(captured, model.attention_names['hops'])
  if hops.ndim == 4:  # a hop's one query, `[B, K, 1, M]`: the table wants `[B, K, M]`
    hops = hops[:, :, 0]
  return jax.nn.softmax(logits), hops


def hop_table(sentences: list[str], weights: np.ndarray, supporting: list[int]) -> str:
  """The notes' table as text: one row per sentence, `yes` for a supporting one, a weight per hop.

  Args:
    sentences: the story's sentences in memory order.
    weights: `[K, len(sentences)]` each hop's weights.
    supporting: indices of the supporting sentences.
  """
  width = max(len(s) for s in sentences)
  header = f'{"story":<{width}}  support  ' + '  '.join(f'hop {k + 1}' for k in range(len(weights)))
  rows = [
    f'{s:<{width}}  {"yes" if i in supporting else "":<7}  '
    + '  '.join(f'{w:5.2f}' for w in weights[:, i])
    for i, s in enumerate(sentences)
  ]
  return '\n'.join([header, *rows])


class QuestionAnswering(Task):
  """Stories and questions through a memory network; see the module docstring.

  Batches: `{'story': int32 [B, M, J], 'query': int32 [B, J], 'answer': int32 [B], 'support':
  int32 [B, M] (1 = a supporting sentence), 'index': int32 [B]}`.
  """

  interface = QuestionAnswerer
  unit = 'examples'
  selection_metric = 'accuracy'
  samples_header = 'question | answer | prediction | hop-1 sentence'

  @staticmethod
  def dataset_config():
    return question_answering.default_config()

  def __init__(self, config, workdir: str):
    self.data = question_answering.build(config.dataset, os.path.join(workdir, VOCAB_DIR))
    self.tokenizer = self.data.tokenizer
    self.label_smoothing = config.label_smoothing

  def model_args(self) -> dict[str, Any]:
    return dict(
      vocab_size=self.tokenizer.vocab_size,
      pad_id=self.tokenizer.pad_id,
      memory_size=self.data.memory_size,
      sentence_length=self.data.sentence_length,
    )

  def loss(self, model, batch: Batch, rng):
    # A MemN2N trains its first `linear_start_steps` steps without the hops' softmax.
    schedule = (
      {}
      if not getattr(model, 'linear_start_steps', 0)
      else dict(linear=batch['step'] < model.linear_start_steps)
    )
    logits = model.answer(
      batch['story'], batch['query'], deterministic=False, rngs=nnx.Rngs(dropout=rng), **schedule
    )
    real = batch['index'] >= 0
    losses = cross_entropy(logits, batch['answer'], self.label_smoothing, where=real)
    return losses.sum() / jnp.maximum(real.sum(), 1), example_counts(logits, batch['answer'], real)

  def eval_counts(self, model, batch: Batch):
    logits = model.answer(batch['story'], batch['query'], deterministic=True)
    real = batch['index'] >= 0
    loss_sum = cross_entropy(logits, batch['answer'], where=real).sum()
    return dict(loss_sum=loss_sum, **example_counts(logits, batch['answer'], real))

  def summarize(self, counts):
    metrics = {'accuracy': counts['correct'] / max(counts['examples'], 1)}
    if 'loss_sum' in counts:
      metrics['loss'] = counts['loss_sum'] / max(counts['examples'], 1)
    return metrics

  def predict(self, model, batch, options: EvalOptions):
    probabilities, hops = _answer(*nnx.split(model), batch['story'], batch['query'])
    return dict(probabilities=probabilities, hops=hops)

  def sample(self, split, row):
    return self._record(row, self.data.examples(split)[row['index']])

  def text_sample(self, model, text, options):
    example = self.data.typed_example(text)
    batch = {key: value[None] for key, value in self.data.encode_example(example).items()}
    return self._record(one_row(self, model, batch, options), example)

  def _record(self, row: dict[str, Any], example) -> dict[str, Any]:
    kept = list(example.story[-self.data.memory_size :])  # memory slot order
    first = len(example.story) - len(kept)
    supporting = [i - first for i in example.supporting if i >= first]
    probabilities = np.asarray(row['probabilities'])
    prediction = self.tokenizer.tokens([int(probabilities.argmax())])[0]
    hops = np.asarray(row['hops'])[:, : len(kept)]  # [K, S]
    strongest = hops.argmax(-1)
    return dict(
      index=row['index'],
      sentences=kept,
      question=example.question,
      answer=example.answer,
      prediction=prediction,
      hops=hops,
      supporting=supporting,
      hits=[int(s in supporting) for s in strongest],
      line=f'{example.question} | {example.answer} | {prediction} | '
      f'{kept[strongest[0]] if kept else ""}',
    )

  def prediction_metrics(self, samples):
    """Per hop, the supporting-fact hit rate of the predicted samples that have supports."""
    scored = [s['hits'] for s in samples if s['supporting']]
    if not scored:
      return {}
    return {
      f'support_hit_rate/hop{k + 1}': float(rate) for k, rate in enumerate(np.mean(scored, axis=0))
    }

  def draw(self, model, samples, out_dir, options):
    """The hop table of each drawn sample, as text (`hops_NNNN.txt`) and PNG (`hops_NNNN.png`)."""
    del model  # the weights were computed with the predictions
    paths = []
    for sample in samples[: options.num_pictures]:
      stem = os.path.join(out_dir, f'hops_{sample["index"]:04d}')
      answer = f' Answer: {sample["answer"]}' if sample['answer'] else ''
      title = f'{sample["question"]}{answer} Prediction: {sample["prediction"]}'
      with open(stem + '.txt', 'w', encoding='utf-8') as f:
        f.write(
          hop_table(sample['sentences'], sample['hops'], sample['supporting']) + f'\n{title}\n'
        )
      memory_pictures.save_hop_table(
        stem + '.png', sample['sentences'], sample['hops'], sample['supporting'], title=title
      )
      paths += [stem + '.txt', stem + '.png']
    return paths

  def explore(self, model, samples, options):
    """Per sample, its hop table: each hop's weights over the story's sentences."""
    del model, options  # the weights were computed with the predictions
    return [
      dict(
        index=s['index'],
        reference=f'{s["question"]} {s["answer"]}'.strip(),  # a typed question has no answer
        prediction=s['prediction'],
        correct=s['prediction'] == s['answer'] if s['answer'] else None,
        views=[
          dict(kind='hops', sentences=s['sentences'], weights=s['hops'], supporting=s['supporting'])
        ],
      )
      for s in samples
    ]
