"""What every family reads of its attention, pinned: the numbers its pictures, explorer page, hit
rates and head ablation show for one tiny model of fixed parameters.

`readings(task, model, tfds_dir)` evaluates the tiny `(task, model)` of `tests/test_tasks.py`
(with its representative attention variant) the way eval.py does: the predicted records of the
first examples of the split (the weights the pictures draw), their prediction metrics (hit and
alignment rates among them), the explorer's records, and for the Transformer-family pairs the
head-ablation sweep. The parameters come from `tests/fixtures/attention_readings/`, so the
readings depend on how the model reads attention, not on how it is initialised.

`python tests/attention_readings.py` rewrites the fixtures from the code as it is: run it only
on a commit whose readings are the reference (they were written before capture by name replaced
the `return_attention` flags).
"""

import json
import os
import sys

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, 'tests', 'fixtures', 'attention_readings')
# The first rows of the validation split (copy's is generated whole, 16 examples).
SPLITS = {'copy': 'validation'}
EXAMPLES = 2
ABLATED = ('transformer', 'decoder_lm', 'vit')  # one per stack: encoder-decoder, causal, encoder


def _plain(value):
  """`value` as JSON: arrays as nested lists of floats or ints."""
  if isinstance(value, dict):
    return {str(key): _plain(item) for key, item in value.items()}
  if isinstance(value, (list, tuple)):
    return [_plain(item) for item in value]
  if isinstance(value, (np.ndarray, jax.Array, np.generic)):
    return _plain(np.asarray(value).tolist())
  if isinstance(value, float):
    return float(f'{value:.7g}')  # float32's precision; the comparison allows 1e-5
  return value


def _config(task: str, model: str, tfds_dir):
  from test_tasks import VARIANTS, tiny_config

  config = tiny_config(task, model, tfds_dir)
  config.model.update(VARIANTS.get(model, {}))
  config.dataset.update(batch_size=4, eval_batch_size=4)
  return config


def _state(config, task, params_file: str, *, write: bool):
  """A train state of `config` whose parameters are the fixture's (or, writing, are saved)."""
  from training.setup import build_state

  state = build_state(config, task)
  leaves, treedef = jax.tree_util.tree_flatten_with_path(state.params)
  names = [jax.tree_util.keystr(path) for path, _ in leaves]
  if write:
    np.savez_compressed(params_file, **{n: np.asarray(x) for n, (_, x) in zip(names, leaves)})
    return state
  with np.load(params_file) as saved:
    assert sorted(saved.files) == sorted(names), 'the parameters moved: checkpoints would not load'
    params = jax.tree_util.tree_unflatten(treedef, [saved[n] for n in names])
  return state.replace(params=params)


def readings(task_name: str, model: str, tfds_dir, *, write: bool = False) -> dict:
  """The pinned readings of the tiny `(task_name, model)`; see the module docstring."""
  from interpret import split_sweep
  import tasks
  from training import evaluation, sharding
  from training.steps import merge_model

  config = _config(task_name, model, tfds_dir)
  task = tasks.build(config, str(tfds_dir.parent / f'readings-{task_name}-{model}'))
  params_file = os.path.join(FIXTURES, f'{task_name}-{model}.npz')
  state, mesh = _state(config, task, params_file, write=write), sharding.make_mesh(None)
  split = SPLITS.get(task_name, 'validation[:8]')
  options = tasks.EvalOptions(max_examples=EXAMPLES, num_pictures=EXAMPLES)
  samples = evaluation.predict_split(state, task, split, batch_size=4, mesh=mesh, options=options)
  found = dict(
    samples=samples,
    prediction_metrics=task.prediction_metrics(samples),
    explorer=task.explore(merge_model(state), samples, options),
  )
  if model in ABLATED:
    found['head_ablation'] = split_sweep.sweep(state, task, split, batch_size=4, mesh=mesh)
  return _plain(found)


# Metrics added after the fixtures were pinned (language evaluation's bits per token;
# translation's chrF and copy accuracy; the head ablation's count of examples read): present in
# what is found, absent from what was pinned. Every pinned key must still be found.
ADDED_SINCE_PINNED = {'bits_per_token', 'chrf', 'copy_accuracy', 'copy_examples', 'examples'}


def assert_close(found, expected, where: str = '') -> None:
  """Raises AssertionError naming the first place where `found` and `expected` differ (floats
  to 1e-5 relative, 1e-6 absolute)."""
  if isinstance(expected, dict):
    assert isinstance(found, dict), where
    assert sorted(set(found) - ADDED_SINCE_PINNED) == sorted(expected), where
    for key in expected:
      assert_close(found[key], expected[key], f'{where}/{key}')
  elif isinstance(expected, list):
    assert isinstance(found, list) and len(found) == len(expected), where
    for index, (a, b) in enumerate(zip(found, expected)):
      assert_close(a, b, f'{where}[{index}]')
  elif isinstance(expected, float) and not isinstance(found, str):
    np.testing.assert_allclose(found, expected, rtol=1e-5, atol=1e-6, err_msg=where)
  else:
    assert found == expected, f'{where}: {found!r} != {expected!r}'


if __name__ == '__main__':
  import pathlib
  import tempfile

  sys.path.insert(0, os.path.join(ROOT, 'tests'))
  sys.path.insert(0, ROOT)
  import conftest  # noqa: F401  (the suite's CPU and precision settings)
  from test_tasks import PAIRS

  os.makedirs(FIXTURES, exist_ok=True)
  data = pathlib.Path(tempfile.mkdtemp()) / 'tfds'
  for pair in PAIRS:
    found = readings(*pair, data, write=True)
    with open(os.path.join(FIXTURES, '-'.join(pair) + '.json'), 'w', encoding='utf-8') as f:
      json.dump(found, f)
    print('wrote', '-'.join(pair))
