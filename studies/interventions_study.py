"""Causal checks of what Attend's attention pictures show (docs/interventions.md), on trained runs.

  python -m studies.interventions_study mqar WORKDIR      # configs/gpt_mqar.py
  python -m studies.interventions_study dates WORKDIR     # configs/seq2seq_bahdanau.py
  python -m studies.interventions_study documents WORKDIR...  # configs/han.py and
                                                          # configs/transformer_classifier.py

Each prints its measurements as JSON (`--out` also writes them). All use the test split.

- `mqar`: the answer accuracy with each head ablated (`interpret.split_sweep`), then activation
  patching: a context key is replaced by a key the example does not hold, so its query no longer
  finds it; the layer-1 heads' outputs at the query position, taken from the clean prompt, are
  patched into the corrupted run. Reported: the fraction of the broken answers restored.
- `dates`: each output field (year, month, day) is generated again with the attention of its
  steps forced onto the source position 3 away (a two-digit field and its separator) from where
  the clean run looked. Reported: how often the field changes, and how often the others do.
- `documents`: see `documents_study.py`.
"""

import argparse
import json

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from interpret import split_sweep
from models import interventions
from models.attention_paths import attention_layers
import sources
from studies import documents_study, trained_runs
from studies.trained_runs import SPLIT, in_batches, split_arrays
from training import failures
from training.steps import merge_model


def mqar(workdir: str) -> dict:
  source = sources.resolve(workdir, newest=True)
  task, run = source.task, source.restore()
  state, mesh = run.state, run.mesh
  model = merge_model(state)
  ablation = split_sweep.sweep(state, task, SPLIT, batch_size=250, mesh=mesh)
  data = split_arrays(task)
  query, answer, corrupted = _corrupted(data)
  answers, shape = _patched_answers(model, data['inputs'], query)
  none = np.zeros(shape, bool)
  clean, broken = answers(data['inputs'], none) == answer, answers(corrupted, none) == answer
  result = dict(
    examples=len(answer),
    head_ablation=dict(
      metric=ablation['metric'], unablated=ablation['unablated'], layers=ablation['layers']
    ),
    clean_accuracy=float(clean.mean()),
    corrupted_accuracy=float(broken.mean()),
  )
  lost = clean & ~broken
  result['broken_answers'] = int(lost.sum())
  patches = {
    'layer 1, both heads': none.copy(),
    'layer 1, head 0': none.copy(),
    'layer 1, head 1': none.copy(),
    'layer 0, both heads (control)': none.copy(),
  }
  patches['layer 1, both heads'][1] = True
  patches['layer 1, head 0'][1, 0] = True
  patches['layer 1, head 1'][1, 1] = True
  patches['layer 0, both heads (control)'][0] = True
  result['fraction_restored'] = {
    label: float((answers(corrupted, patch) == answer)[lost].mean())
    for label, patch in patches.items()
  }
  return result


def _corrupted(data: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """`(query, answer, corrupted)`: one scored query position per example, its answer, and the
  inputs with the context key that query asks for replaced by a key the example does not hold
  (so the query no longer finds it)."""
  inputs, targets, support = data['inputs'], data['targets'], data['support']
  n = len(inputs)
  query = 16 + 2 * (np.arange(n) % 8)
  answer = targets[np.arange(n), query]
  keys = np.unique(inputs[:, 0:16:2])  # the key names of the split
  rng = np.random.default_rng(0)
  corrupted = inputs.copy()
  for i in range(n):
    absent = np.setdiff1d(keys, inputs[i, 0:16:2])
    corrupted[i, support[i, query[i]]] = rng.choice(absent)
  return query, answer, corrupted


def _patched_answers(model, inputs: np.ndarray, query: np.ndarray):
  """`(answers, (L, N))`: `answers(ids, patch [L, N]) -> [B]`, the greedy answer at each
  example's `query` position, the heads `patch` marks given their outputs there on the clean
  `inputs` (activation patching at the query)."""
  graphdef, params = nnx.split(model)
  names = [f'{path}/heads' for path in attention_layers(model)]

  @jax.jit
  def heads_of(ids):
    return interventions.capture(nnx.merge(graphdef, params), ids, method='token_logits')[1]

  @jax.jit
  def patched(ids, q, layer_heads, patch):  # patch [B, L, N]: which heads to patch
    t = jnp.arange(ids.shape[1])
    edits = {
      names[layer]: (
        lambda v, layer=layer: jnp.where(
          (patch[:, layer, :, None] & (t[None, None] == q[:, None, None]))[..., None],
          layer_heads[names[layer]],
          v,
        )
      )
      for layer in range(patch.shape[1])
    }
    logits, _ = interventions.capture(
      nnx.merge(graphdef, params), ids, method='token_logits', edits=edits
    )
    return jnp.argmax(logits[jnp.arange(ids.shape[0]), q], axis=-1)

  clean_heads = [in_batches(lambda ids, name=name: heads_of(ids)[name], inputs) for name in names]

  shape = (len(names), clean_heads[0].shape[1])

  def answers(ids, patch):
    patch = np.broadcast_to(patch, (len(inputs), *shape))
    return in_batches(
      lambda ids, q, patch, *heads: patched(ids, q, dict(zip(names, heads)), patch),
      ids,
      query,
      patch,
      *clean_heads,
    )

  return answers, shape


FIELDS = {'year': slice(0, 4), 'month': slice(5, 7), 'day': slice(8, 10)}  # in YYYY-MM-DD
SHIFT = 3


def dates(workdir: str) -> dict:
  task, model = trained_runs.newest(workdir)
  data = split_arrays(task)
  inputs, targets = data['inputs'], data['targets']
  n, steps = targets.shape
  bos = task.target_tokenizer.bos_id
  graphdef, params = nnx.split(model)

  @jax.jit
  def step_outputs(source, decoder_inputs, forced, field_steps):
    """Greedy outputs [B, T] of a teacher-forced pass, field_steps' attention set to `forced`."""

    def edit(w):  # one step: [B, 1, S]
      t = interventions.scan_step()
      return jnp.where(field_steps[t], forced[:, t], w)

    logits, captured = interventions.capture(
      nnx.merge(graphdef, params), source, decoder_inputs, edits={'attn/weights': edit}
    )
    return jnp.argmax(logits, axis=-1), captured['attn/weights']

  def generate(forced, field_steps):
    """Greedy decoding (each step's input the previous output) under the forced attention."""
    outputs = np.zeros((n, steps), np.int32)
    weights = None
    for t in range(steps):
      decoder_inputs = np.concatenate([np.full((n, 1), bos), outputs[:, :-1]], axis=1)
      ids = in_batches(lambda *a: step_outputs(*a, field_steps)[0], inputs, decoder_inputs, forced)
      outputs[:, t] = ids[:, t]
    if field_steps.any():
      return outputs, None
    weights = in_batches(
      lambda *a: step_outputs(*a, field_steps)[1], inputs, decoder_inputs, forced
    )
    return outputs, weights

  none = np.zeros(steps, bool)
  s = inputs.shape[1]
  clean, weights = generate(np.zeros((n, steps, 1, s), np.float32), none)
  correct = np.all(clean[:, :10] == targets[:, :10], axis=1)
  looked = np.argmax(weights[:, :, 0], axis=-1)  # [B, T]
  length = np.sum(inputs != task.pad_id, axis=1)[:, None]  # real source positions
  # Move off the field, staying inside the real source.
  moved = np.where(looked + SHIFT < length, looked + SHIFT, looked - SHIFT)
  forced = jax.nn.one_hot(moved, s, dtype=np.float32)[:, :, None]  # [B, T, 1, S]
  result = dict(examples=n, clean_exact_match=float(correct.mean()), shift=SHIFT, fields={})
  for field, where in FIELDS.items():
    field_steps = np.zeros(steps, bool)
    field_steps[where] = True
    out, _ = generate(np.asarray(forced), field_steps)
    changed = np.any(out[:, where] != clean[:, where], axis=1)
    others = [w for f, w in FIELDS.items() if f != field]
    other_changed = np.any(
      np.concatenate([out[:, w] != clean[:, w] for w in others], axis=1), axis=1
    )
    result['fields'][field] = dict(
      field_changed=float(changed[correct].mean()),
      other_fields_changed=float(other_changed[correct].mean()),
    )
  return result


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('study', choices=('mqar', 'dates', 'documents'))
  parser.add_argument('workdirs', nargs='+')
  parser.add_argument('--out', default='', help='Also write the JSON here.')
  args = parser.parse_args()
  if args.study == 'documents':
    result = documents_study.run(args.workdirs)
  else:
    result = {'mqar': mqar, 'dates': dates}[args.study](args.workdirs[0])
  text = json.dumps(result, indent=2)
  print(text)
  if args.out:
    with open(args.out, 'w', encoding='utf-8') as f:
      f.write(text + '\n')


if __name__ == '__main__':
  failures.run('python -m studies.interventions_study', main)  # a user's error: one sentence
