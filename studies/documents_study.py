"""Is attention an explanation? HAN and the Transformer classifier on the key-sentence documents.

Run through `python -m studies.interventions_study documents WORKDIR...` (docs/interventions.md).
For each classifier (a HAN or a Transformer classifier with attention pooling) on the test split:

- How often the prediction changes when the sentence attention is (a) randomly permuted among
  the document's sentences, (b) set uniform over them, (c) put entirely on the key sentence(s)
  (Jain & Wallace 2019; Wiegreffe & Pinter 2019). The HAN's sentence pooling weights are replaced
  outright; the Transformer pools tokens, so each sentence's total weight is replaced and its
  tokens keep their shares of it.
- Gradient x input of each sentence: `|Σ_t Σ_d ∂z/∂x_td x_td|` over its words' embeddings, z the
  predicted class's logit; its Spearman and Kendall rank correlation with the sentence attention
  per document (documents with 3 or more sentences), and how often each one's top sentence is a
  key sentence.
"""

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from models import interventions
from studies import trained_runs
from studies.trained_runs import SPLIT, in_batches, split_arrays

POOLS = {'han': 'sentence_pool/weights', 'transformer_classifier': 'pool/weights'}


def _new_masses(
  mass: np.ndarray, real: np.ndarray, key: np.ndarray, rng: np.random.Generator
) -> dict[str, np.ndarray]:
  """Sentence weights `[B, S]` of the three interventions (each row sums to 1 over real ones)."""
  permuted = mass.copy()
  for row in range(len(mass)):
    where = np.flatnonzero(real[row])
    permuted[row, where] = mass[row, rng.permutation(where)]
  uniform = real / np.maximum(real.sum(1, keepdims=True), 1)
  on_key = key / np.maximum(key.sum(1, keepdims=True), 1)
  return {'permuted': permuted, 'uniform': uniform, 'key_sentences': on_key}


def classifier(workdir: str, rng: np.random.Generator) -> dict:
  task, model = trained_runs.newest(workdir)
  kind = type(model).__name__
  pool = next(
    name
    for name in POOLS.values()
    if name in interventions.names(model, jnp.ones((1, 2, 3), jnp.int32))
  )
  data = split_arrays(task)
  inputs, labels = data['inputs'], data['labels']  # [B, S, W], [B]
  b, s, w = inputs.shape
  words = inputs != task.tokenizer.pad_id  # [B, S, W]
  real = words.any(-1)  # [B, S]
  key = np.zeros((b, s), bool)
  for row, index in enumerate(data['index']):
    example = task.data.examples(SPLIT)[index]
    key[row, [k for k in example.key_sentences if k < s]] = True
  key &= real
  graphdef, params = nnx.split(model)
  run = lambda ids, edits=None: interventions.capture(nnx.merge(graphdef, params), ids, edits=edits)

  @jax.jit
  def clean(ids):
    logits, captured = run(ids)
    return jnp.argmax(logits, -1), captured[pool]

  @jax.jit
  def edited(ids, weights):
    return jnp.argmax(run(ids, {pool: weights})[0], -1)

  @jax.jit
  def attribution(ids):  # per word, [B, S, W]
    shape = interventions.names(nnx.merge(graphdef, params), ids)['embedded']

    def logit(delta):
      logits, captured = run(ids, {'embedded': lambda x: x + delta})
      return jnp.sum(jnp.max(logits, -1)), captured['embedded']

    grad, x = jax.grad(logit, has_aux=True)(jnp.zeros(shape))
    return jnp.sum(grad * x, -1).reshape(ids.shape)

  predicted = in_batches(lambda ids: clean(ids)[0], inputs)
  weights = in_batches(lambda ids: clean(ids)[1], inputs).reshape(b, s, -1)  # [B, S, W|1]
  mass = weights.sum(-1)  # [B, S]
  shares = weights / np.maximum(mass, 1e-12)[..., None]  # within each sentence
  result = dict(
    model=kind,
    examples=int(b),
    accuracy=float((predicted == labels).mean()),
    prediction_changed={},
    accuracy_under={},
  )
  for name, new in _new_masses(mass, real, key, rng).items():
    replaced = (new[..., None] * shares).reshape(b, -1) if weights.shape[-1] > 1 else new
    after = in_batches(edited, inputs, replaced.astype(np.float32))
    result['prediction_changed'][name] = float((after != predicted).mean())
    result['accuracy_under'][name] = float((after == labels).mean())
  per_word = in_batches(attribution, inputs)  # [B, S, W]
  sentence_attribution = np.abs(np.sum(np.where(words, per_word, 0.0), -1))  # [B, S]
  spearman, kendall = [], []
  for row in range(b):
    where = np.flatnonzero(real[row])
    if len(where) >= 3:
      spearman.append(stats.spearmanr(mass[row, where], sentence_attribution[row, where])[0])
      kendall.append(stats.kendalltau(mass[row, where], sentence_attribution[row, where])[0])
  top = lambda scores: key[np.arange(b), np.argmax(np.where(real, scores, -np.inf), -1)]
  result.update(
    rank_correlation=dict(
      documents=len(spearman),
      spearman_mean=float(np.nanmean(spearman)),
      spearman_median=float(np.nanmedian(spearman)),
      kendall_mean=float(np.nanmean(kendall)),
    ),
    top_sentence_is_key=dict(
      attention=float(top(mass).mean()), gradient_x_input=float(top(sentence_attribution).mean())
    ),
  )
  return result


def run(workdirs: list[str]) -> dict:
  """The study for each classifier workdir, keyed by workdir (each with the same permutations'
  seed, whatever the order)."""
  return {workdir: classifier(workdir, np.random.default_rng(0)) for workdir in workdirs}
