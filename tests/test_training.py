"""Experiments at tiny sizes: every config trains, checkpoints resume exactly, eval writes its
files."""

import functools
import importlib
import json
import os
import signal
import subprocess
import sys

from cpu_devices import cpu_environment
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import models
from reports import reordering, run_eval
import tasks
from tasks.translation import teacher_forced_loss
import training
from training import checkpoints, sharding, workdir
from training.checkpoints import Checkpointer
from training.config import read_config
from training.config import validate as validate_config
from training.evaluation import split_metrics
from training.setup import build_state
from training.steps import annotated_train_state, create_train_state, merge_model, train_step

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = (
  'default',
  'transformer',
  'seq2seq_bahdanau',
  'seq2seq_luong',
  'transformer_base',
  'tsv',
  'tsv_gru',
  'tsv_gru:none',
)
TINY_TRANSFORMER = dict(num_layers=1, d_model=16, num_heads=2, d_ff=32, max_length=64)
TINY_SEQ2SEQ = dict(embed_dim=8, hidden_dim=16)
# The loss of the translation task with the tokenizers' special ids (PAD 0, BOS 1).
LOSS = functools.partial(teacher_forced_loss, bos_id=1, pad_id=0)
DATA_ARGS = dict(input_vocab_size=11, output_vocab_size=13, pad_id=0)


# number_words' first 2,000 of 30,000 training pairs (reading and encoding them all took 1.3 s
# of CPU at every build of the task) and first 64 of 1,000 validation examples (what a tiny run
# of the default config evaluates at its end, and eval.py reads): the checks need no more.
TRAIN_SPLIT, EVAL_SPLIT = 'train[:2000]', 'validation[:64]'


def tiny(config, data_dir, **overrides):
  """`config` shrunk to seconds: a tiny model, small batches, few steps, no decoding."""
  config.model.update(TINY_TRANSFORMER if config.model.name == 'transformer' else TINY_SEQ2SEQ)
  # One bucket (48 > both limits), so each step function compiles once.
  config.dataset.update(
    data_dir=str(data_dir),
    batch_size=8,
    eval_batch_size=8,
    max_input_length=40,
    max_target_length=40,
    bucket_step=48,
  )
  config.update(
    num_train_steps=4,
    log_every_steps=50,
    checkpoint_every_steps=100,
    eval_every_steps=0,
    num_eval_decode=0,
    selection_metric='',  # the task's own: configs/tsv.py's chrF needs decoded outputs
    warmup_steps=2,
  )
  if config.dataset.name == 'number_words':
    config.dataset.update(train_split=TRAIN_SPLIT, eval_split=EVAL_SPLIT)
  config.update(overrides)
  return config


def get_config(name, arg=None):
  """`configs/NAME.py`'s config; 'NAME:ARG' passes ARG, as `--config=configs/NAME.py:ARG` does."""
  name, _, given = name.partition(':')
  return importlib.import_module(f'configs.{name}').get_config(arg or given or None)


@pytest.fixture(scope='module')
def data_dir(tfds_dir):
  return tfds_dir


def _final_params(workdir, config):
  task = tasks.build(config, workdir)
  state, _ = Checkpointer(os.path.join(workdir, 'checkpoints'), max_to_keep=None).restore(
    build_state(config, task)
  )
  return int(state.step), jax.tree.leaves(state.params)


@pytest.mark.parametrize('name', CONFIGS)
def test_every_config_takes_a_training_step(name, data_dir, tmp_path):
  config = tiny(get_config(name), data_dir)
  if name.startswith('tsv'):
    corpus = tmp_path / 'pairs.txt'
    corpus.write_text(''.join(f'He is {n} years old.\tIl a {n} ans.\tCC-BY\n' for n in range(40)))
    config.dataset.tsv_path = str(corpus)
  validate_config(config)
  if name == 'transformer_base':  # a real corpus; offline its builder is mocked
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

    with tfds.testing.mock_data(num_examples=32):
      task = tasks.build(config, str(tmp_path))
      batch = next(task.batches('train', batch_size=8, shuffle=True, seed=0))
  else:
    task = tasks.build(config, str(tmp_path))
    batch = next(task.batches(config.dataset.train_split, batch_size=8, shuffle=True, seed=0))
  state = build_state(config, task)
  step = jax.jit(functools.partial(train_step, loss_fn=task.loss))
  new_state, metrics = step(state, batch, jax.random.key(0))
  assert bool(metrics['finite']) and np.isfinite(float(metrics['loss']))
  assert int(new_state.step) == 1
  moved = [
    not np.allclose(a, b)
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(new_state.params))
  ]
  assert any(moved)


def test_a_decoder_without_attention_trains_and_evaluates(data_dir, tmp_path):
  """configs/tsv_gru.py:none end to end: no attention to measure, draw or explore, the rest of
  the evaluation as for any translation model."""
  corpus = tmp_path / 'pairs.txt'
  corpus.write_text(''.join(f'It is {n} %s.\tC’est {n} %s.\n' for n in range(40)))
  config = tiny(get_config('tsv_gru:none'), data_dir, num_train_steps=3)
  config.dataset.tsv_path = str(corpus)
  config.model.update(embed_dim=8, hidden_dim=8)
  workdir = str(tmp_path / 'run')
  training.train_and_evaluate(config, workdir)
  metrics = run_eval.evaluate(run_eval.Request(workdir, max_examples=2, num_heatmaps=2))
  assert 'attention_entropy' not in metrics and 0 <= metrics['chrf'] <= 100
  assert metrics['copy_examples'] == 2 and 'signatures' in metrics
  assert not [f for f in os.listdir(os.path.join(workdir, 'eval')) if f.endswith('.png')]
  assert os.path.exists(os.path.join(workdir, 'eval', 'explorer.html'))
  # --output keeps another evaluation (here of one chosen example) beside eval/, untouched.
  before = sorted(os.listdir(workdir)), open(os.path.join(workdir, 'eval', 'metrics.json')).read()
  one = run_eval.evaluate(run_eval.Request(workdir, split='test[1:2]', output='eval_one'))
  assert one['examples'] == 1 and one['split'] == 'test[1:2]'
  with open(os.path.join(workdir, 'eval_one', 'metrics.json')) as f:
    assert json.load(f)['examples'] == 1
  for bad in ('checkpoints', 'eval/../best', 'evaluation'):
    with pytest.raises(ValueError, match=f'--output={bad!r}'):
      run_eval.evaluate(run_eval.Request(workdir, output=bad))
  after = sorted(os.listdir(workdir)), open(os.path.join(workdir, 'eval', 'metrics.json')).read()
  assert after[0] == sorted(before[0] + ['eval_one']) and after[1] == before[1]
  # The rule that picks the docs' alignment sentence reads this run's test samples and data.
  chosen = reordering.report(workdir, min_words=1)
  assert chosen['source'].startswith('It is') and chosen['crossings'] == 0


STEPS = 300  # tiny steps take milliseconds, so a signal always lands mid-run


@pytest.fixture(scope='module')
def straight_run(data_dir, tmp_path_factory) -> str:
  """The reference: a workdir trained for STEPS steps without interruption."""
  workdir = str(tmp_path_factory.mktemp('straight'))
  training.train_and_evaluate(tiny(get_config('default'), data_dir, num_train_steps=STEPS), workdir)
  return workdir


def _start_train_py(workdir, data_dir, checkpoint_every_steps):
  """train.py in a subprocess with the tiny config, logging every step."""
  flags = dict(
    num_train_steps=STEPS,
    checkpoint_every_steps=checkpoint_every_steps,
    log_every_steps=1,
    eval_every_steps=0,
    num_eval_decode=0,
    selection_metric='',
    warmup_steps=2,
    **{f'model.{k}': v for k, v in TINY_TRANSFORMER.items()},
    **{
      f'dataset.{k}': v
      for k, v in dict(
        data_dir=data_dir,
        train_split=TRAIN_SPLIT,
        eval_split=EVAL_SPLIT,
        batch_size=8,
        eval_batch_size=8,
        max_input_length=40,
        max_target_length=40,
        bucket_step=48,
      ).items()
    },
  )
  return subprocess.Popen(
    [
      sys.executable,
      'train.py',
      '--config=configs/default.py',
      f'--workdir={workdir}',
      *[f'--config.{k}={v}' for k, v in flags.items()],
    ],
    cwd=ROOT,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
  )


def _signal_at_step(process, step: int, signum) -> str:
  for line in process.stdout:
    if f'step {step}/{STEPS}' in line:
      process.send_signal(signum)
      break
  return process.communicate(timeout=120)[0]


def _assert_same_params(workdir_a, workdir_b, data_dir):
  config = tiny(get_config('default'), data_dir)
  step_a, params_a = _final_params(workdir_a, config)
  step_b, params_b = _final_params(workdir_b, config)
  assert step_a == step_b == STEPS
  for a, b in zip(params_a, params_b):
    np.testing.assert_array_equal(a, b)


def test_straight_run_writes_metrics_and_events(straight_run, data_dir):
  metrics = [json.loads(line) for line in open(os.path.join(straight_run, 'metrics.jsonl'))]
  assert [m['step'] for m in metrics if m['split'] == 'train'] == list(range(50, STEPS + 1, 50))
  assert [m['step'] for m in metrics if m['split'] == EVAL_SPLIT] == [STEPS]
  [model_line] = [m for m in metrics if m['split'] == 'model']
  _, params = _final_params(straight_run, tiny(get_config('default'), data_dir))
  assert model_line['step'] == 0 and model_line['parameters'] == sum(p.size for p in params)
  assert os.listdir(os.path.join(straight_run, 'tensorboard'))
  assert json.load(open(os.path.join(straight_run, 'config.json')))['num_train_steps'] == STEPS


def test_eval_at_start_evaluates_the_initial_parameters(data_dir, tmp_path):
  """Step 0's validation line is the initial state's; step 1's train line is logged on its own."""
  config = tiny(get_config('default'), data_dir, num_train_steps=3, eval_at_start=True)
  training.train_and_evaluate(config, str(tmp_path))
  metrics = [json.loads(line) for line in open(tmp_path / 'metrics.jsonl')]
  assert [m['step'] for m in metrics if m['split'] == 'train'] == [1, 3]
  assert [m['step'] for m in metrics if m['split'] == EVAL_SPLIT] == [0, 3]
  task = tasks.build(config, str(tmp_path))
  initial = split_metrics(
    build_state(config, task), task, EVAL_SPLIT, batch_size=8, mesh=sharding.make_mesh()
  )
  np.testing.assert_allclose(metrics[1]['loss'], initial['loss'], rtol=1e-6)
  assert 0 < metrics[1]['attention_entropy'] <= np.log(48)


@pytest.mark.slow
def test_kill_9_then_restart_ends_bit_identical(data_dir, straight_run, tmp_path):
  workdir = str(tmp_path / 'run')
  process = _start_train_py(workdir, data_dir, checkpoint_every_steps=5)
  _signal_at_step(process, 12, signal.SIGKILL)
  assert process.returncode == -signal.SIGKILL
  saved = Checkpointer(os.path.join(workdir, 'checkpoints'), max_to_keep=None).steps()
  assert saved and saved[-1] % 5 == 0 and saved[-1] < STEPS
  training.train_and_evaluate(tiny(get_config('default'), data_dir, num_train_steps=STEPS), workdir)
  _assert_same_params(workdir, straight_run, data_dir)


@pytest.mark.slow
def test_sigterm_saves_and_exits_cleanly_then_resumes_exactly(data_dir, straight_run, tmp_path):
  workdir = str(tmp_path / 'run')
  process = _start_train_py(workdir, data_dir, checkpoint_every_steps=1000)
  output = _signal_at_step(process, 3, signal.SIGTERM)
  assert process.returncode == 0, output
  assert 'SIGTERM received' in output
  saved = Checkpointer(os.path.join(workdir, 'checkpoints'), max_to_keep=None).steps()
  assert len(saved) == 1 and 3 <= saved[0] < STEPS

  # Resumed, it ends bit-identical to the run that was never interrupted.
  training.train_and_evaluate(tiny(get_config('default'), data_dir, num_train_steps=STEPS), workdir)
  _assert_same_params(workdir, straight_run, data_dir)

  # eval.py on that checkpoint writes metrics, samples and a heatmap.
  result = subprocess.run(
    [
      sys.executable,
      'eval.py',
      f'--workdir={workdir}',
      f'--split={EVAL_SPLIT}',
      '--max_examples=4',
      '--num_heatmaps=1',
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  metrics = json.load(open(os.path.join(workdir, 'eval', 'metrics.json')))
  assert metrics['step'] == STEPS and metrics['examples'] == 4
  assert 0 <= metrics['exact_match'] <= 1 and metrics['loss'] > 0
  assert len(open(os.path.join(workdir, 'eval', 'samples.txt')).readlines()) == 5
  pngs = [f for f in os.listdir(os.path.join(workdir, 'eval')) if f.endswith('.png')]
  assert len(pngs) == 1
  with open(os.path.join(workdir, 'eval', pngs[0]), 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'


def test_eval_without_checkpoint_says_so(data_dir, tmp_path):
  workdir = tmp_path / 'empty'
  workdir.mkdir()
  (workdir / 'config.json').write_text(tiny(get_config('default'), data_dir).to_json())
  result = subprocess.run(
    [sys.executable, 'eval.py', f'--workdir={workdir}'], cwd=ROOT, capture_output=True, text=True
  )
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1] == (
    f'eval.py: No checkpoint in {workdir}/checkpoints; train first (python train.py '
    f'--config=CONFIG --workdir={workdir}) or convert a checkpoint into it (convert.py).'
  )
  assert 'Traceback' not in result.stderr


def test_a_config_saved_before_a_training_field_existed_loads_with_its_default(data_dir, tmp_path):
  saved = json.loads(tiny(get_config('default'), data_dir).to_json())
  del saved['attention_penalty']  # a run from before the field existed
  default_score = saved['model'].pop('score')  # and before this model field
  (tmp_path / 'config.json').write_text(json.dumps(saved))
  config = read_config(str(tmp_path))
  validate_config(config)
  assert config.attention_penalty == 0.0
  assert config.model.score == default_score == models.default_config('transformer').score


def _toy_state(width=4):
  model = nnx.Sequential(
    nnx.Linear(3, width, rngs=nnx.Rngs(0)), nnx.Linear(width, 2, rngs=nnx.Rngs(1))
  )
  return create_train_state(model, optax.adam(1e-3))


def test_corrupted_newest_checkpoint_falls_back_to_the_previous(tmp_path):
  checkpointer = Checkpointer(str(tmp_path), max_to_keep=3)
  states = [_toy_state()]
  for _ in range(2):
    state = states[-1]
    states.append(
      state.replace(step=state.step + 1, params=jax.tree.map(lambda p: p + 1, state.params))
    )
    checkpointer.save(states[-1], dict(data=dict(position=int(states[-1].step))))
  checkpointer.wait()
  for root, _, files in os.walk(tmp_path / '2'):
    for name in files:
      with open(os.path.join(root, name), 'wb') as f:
        f.write(b'not a checkpoint')
  restored, meta = checkpointer.restore(_toy_state())
  assert int(restored.step) == 1 and meta == dict(data=dict(position=1))
  for a, b in zip(jax.tree.leaves(restored.params), jax.tree.leaves(states[1].params)):
    np.testing.assert_array_equal(a, b)


def test_a_checkpoint_that_named_its_arrays_by_nnx_variable_still_restores(tmp_path):
  """Runs saved while the train state held NNX Variables ('params.layers.0.kernel.value')."""
  model = nnx.Sequential(nnx.Linear(3, 4, rngs=nnx.Rngs(0)), nnx.Linear(4, 2, rngs=nnx.Rngs(1)))
  old = annotated_train_state(model, optax.adam(1e-3))
  checkpointer = Checkpointer(str(tmp_path), max_to_keep=1)
  checkpointer.save(old.replace(step=old.step + 3), {})
  checkpointer.wait()
  assert 'params.layers.0.kernel.value' in checkpointer._manager.item_metadata(3)['state']
  assert 'params.layers.0.kernel' in checkpointer.shapes(3)
  fresh = _toy_state()
  restored, _ = checkpointer.restore(fresh)
  assert int(restored.step) == 3
  assert jax.tree.structure(restored.opt_state) == jax.tree.structure(fresh.opt_state)
  for a, b in zip(jax.tree.leaves(restored.params), jax.tree.leaves(old.params)):
    np.testing.assert_array_equal(a, b)


def test_a_host_restore_reads_numpy_arrays_in_parts_equal_to_the_device_restore(
  tmp_path, monkeypatch
):
  """Export's restore: the parameters alone, as NumPy arrays, read a few at a time (here
  about 24 bytes a part)."""
  checkpointer = Checkpointer(str(tmp_path), max_to_keep=1)
  saved = _toy_state()
  checkpointer.save(saved.replace(step=saved.step + 2), {})
  checkpointer.wait()
  like = _toy_state().replace(opt_state=None)
  monkeypatch.setattr(checkpoints, 'HOST_PART_BYTES', 24)
  wanted = checkpoints._abstract(checkpoints.flat_state(like))
  parts = checkpoints._in_parts(wanted, 24)
  assert len(parts) >= 3 and sorted(sum(parts, [])) == sorted(wanted)
  host, _ = checkpointer.restore(like, host=True)
  device, _ = checkpointer.restore(like)
  assert int(host.step) == 2
  for a, b in zip(jax.tree.leaves(host.params), jax.tree.leaves(device.params), strict=True):
    assert isinstance(a, np.ndarray) and isinstance(b, jax.Array)
    np.testing.assert_array_equal(a, b)


def test_checkpoint_of_another_model_config_is_a_clear_error(tmp_path):
  checkpointer = Checkpointer(str(tmp_path), max_to_keep=1)
  checkpointer.save(_toy_state(width=4), {})
  checkpointer.wait()
  with pytest.raises(
    ValueError, match=r'does not match this config.model.*\(4,\) in the checkpoint'
  ):
    checkpointer.restore(_toy_state(width=5))


def test_non_finite_loss_stops_without_saving_the_bad_state(data_dir, tmp_path, monkeypatch):
  # A learning rate of 1e15 puts the parameters near 1e15 after one update, so the second
  # step's logits overflow.
  config = tiny(
    get_config('default'),
    data_dir,
    learning_rate=1e15,
    schedule='constant',
    warmup_steps=0,
    checkpoint_every_steps=1,
    grad_clip=0.0,
  )
  monkeypatch.chdir(tmp_path)  # a relative workdir, as users type it
  with pytest.raises(FloatingPointError, match='Non-finite loss or gradient at step 2'):
    training.train_and_evaluate(config, 'run')
  assert Checkpointer(str(tmp_path / 'run' / 'checkpoints'), max_to_keep=None).steps() == [1]


@pytest.mark.parametrize(
  'field, value, message',
  [
    ('num_train_steps', 0, 'config.num_train_steps=0 must be a positive integer'),
    ('schedule', 'linear', "config.schedule='linear' is not one of"),
    ('dtype', 'float16', "config.dtype='float16' is not one of"),
    ('label_smoothing', 1.0, 'config.label_smoothing=1.0 must be in'),
    ('learning_rate', -1.0, 'config.learning_rate=-1.0 must be > 0'),
    ('press', 'h2o', "config.press='h2o' is not one of ['adakv', "),
  ],
)
def test_bad_config_values_name_the_field(field, value, message):
  config = get_config('default')
  config[field] = value
  with pytest.raises(ValueError, match=message.replace('(', r'\(').replace('[', r'\[')):
    validate_config(config)


def test_unknown_model_name_lists_the_valid_ones():
  config = get_config('default')
  config.model.name = 'rnn'
  with pytest.raises(ValueError, match="'rnn'.*seq2seq.*transformer"):
    models.build(config.model, input_vocab_size=8, output_vocab_size=8, pad_id=0, rngs=nnx.Rngs(0))


def sharded_step_metrics() -> dict:
  """Loss and gradient norm of one train step on a fixed batch, data-parallel over all devices."""
  model = models.build(
    dict(name='transformer', **TINY_TRANSFORMER, dropout_rate=0.0), **DATA_ARGS, rngs=nnx.Rngs(0)
  )
  mesh = sharding.make_mesh()
  state = sharding.replicate(create_train_state(model, optax.adam(1e-3)), mesh)
  rng = np.random.default_rng(0)
  batch = dict(
    inputs=rng.integers(1, 11, (16, 7), dtype=np.int32),
    targets=rng.integers(1, 13, (16, 9), dtype=np.int32),
  )
  batch['targets'][:, 6:] = 0  # padding must be masked identically on every device
  _, metrics = jax.jit(functools.partial(train_step, loss_fn=LOSS))(
    state, sharding.shard_batch(batch, mesh), jax.random.key(0)
  )
  return dict(
    devices=jax.device_count(), loss=float(metrics['loss']), grad_norm=float(metrics['grad_norm'])
  )


@pytest.mark.slow
def test_eight_simulated_devices_match_one_device():
  # The suite's XLA flags stay: without them this process compiles at XLA's full optimisation.
  env = cpu_environment(devices=8)
  script = (
    'import sys, json; sys.path.insert(0, "tests"); import test_training as t; '
    'print(json.dumps(t.sharded_step_metrics()))'
  )
  result = subprocess.run(
    [sys.executable, '-c', script], cwd=ROOT, env=env, capture_output=True, text=True
  )
  assert result.returncode == 0, result.stderr[-3000:]
  eight = json.loads(result.stdout.strip().splitlines()[-1])
  one = sharded_step_metrics()
  assert eight['devices'] == 8 and one['devices'] == 1
  np.testing.assert_allclose(eight['loss'], one['loss'], rtol=1e-5)
  np.testing.assert_allclose(eight['grad_norm'], one['grad_norm'], rtol=1e-5)


def test_bfloat16_compute_tracks_float32():
  model = models.build(
    dict(name='transformer', **TINY_TRANSFORMER, dropout_rate=0.0), **DATA_ARGS, rngs=nnx.Rngs(0)
  )
  state = create_train_state(model, optax.adam(1e-3))
  rng = np.random.default_rng(1)
  batch = dict(
    inputs=rng.integers(1, 11, (4, 7), dtype=np.int32),
    targets=rng.integers(1, 13, (4, 9), dtype=np.int32),
  )
  losses = {}
  for dtype in (jnp.float32, jnp.bfloat16):
    new_state, metrics = jax.jit(functools.partial(train_step, loss_fn=LOSS, dtype=dtype))(
      state, batch, jax.random.key(0)
    )
    losses[dtype] = float(metrics['loss'])
    assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(new_state.params))
  # bf16 keeps 8 mantissa bits: the loss agrees to about 1%, and differs from float32's at all.
  np.testing.assert_allclose(losses[jnp.bfloat16], losses[jnp.float32], rtol=2e-2)
  assert losses[jnp.bfloat16] != losses[jnp.float32]


def _dot_operand_dtypes(jaxpr):
  """The operand dtypes of every matmul in a jaxpr, including those inside scans and loops."""
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'dot_general':
      yield tuple(v.aval.dtype for v in eqn.invars)
    for value in eqn.params.values():
      for sub in value if isinstance(value, (tuple, list)) else (value,):
        sub = getattr(sub, 'jaxpr', sub)
        if hasattr(sub, 'eqns'):
          yield from _dot_operand_dtypes(sub)


@pytest.mark.parametrize('name', ['default', 'seq2seq_bahdanau'])
def test_bfloat16_compute_runs_every_matmul_in_bfloat16(name):
  """Parameters cast to bf16 keep the whole forward pass in bf16 (a float32 embedding lookup
  once promoted every later layer back to float32)."""
  model = models.build(get_config(name).model, **DATA_ARGS, rngs=nnx.Rngs(0))
  bf16 = merge_model(create_train_state(model, optax.adam(1e-3)), jnp.bfloat16)
  ids = jnp.ones((2, 5), jnp.int32)
  jaxpr = jax.make_jaxpr(lambda: bf16(ids, ids, deterministic=True))().jaxpr
  dtypes = list(_dot_operand_dtypes(jaxpr))
  assert len(dtypes) > 4
  assert all(d == (jnp.bfloat16, jnp.bfloat16) for d in dtypes), dtypes


def test_resuming_with_a_changed_config_names_the_changed_fields(tmp_path, caplog):
  config = get_config('default')
  (tmp_path / 'config.json').write_text(config.to_json_best_effort())
  config.schedule = 'constant'
  config.model.num_layers = 3
  with caplog.at_level('WARNING'):
    workdir.record_config(str(tmp_path), config, step=60)
  assert "model.num_layers 2 -> 3, schedule 'rsqrt' -> 'constant'" in caplog.text


def test_compilation_cache_entries_are_renamed_into_place_whole(tmp_path, monkeypatch):
  """An entry is written under a temporary name and renamed (tests/conftest.py turns this on, as
  training.enable_compilation_cache does): a reader never meets it half-written."""
  from jax._src import lru_cache

  cache = lru_cache.LRUCache(str(tmp_path), max_size=-1)
  renamed, rename = [], os.replace
  seen = lambda source, target: renamed.append(
    (os.path.basename(source), os.path.basename(target), open(source, 'rb').read())
  )
  monkeypatch.setattr(
    os, 'replace', lambda source, target: (seen(source, target), rename(source, target))
  )
  cache.put('key', b'compiled')
  cache.put('key', b'again')  # an entry already there is kept
  assert renamed == [(f'.key-cache.{os.getpid()}.tmp', 'key-cache', b'compiled')]
  assert os.listdir(tmp_path) == ['key-cache'] and cache.get('key') == b'compiled'


def test_progress_leaves_compilation_and_evaluation_out_of_its_rates(monkeypatch, caplog):
  """A first step that compiled for 60 s and an evaluation of 20 s do not make the ETA: 10
  steps in 130 s, 80 s of them not training, is 5 s a step."""
  from training import metrics as metrics_lib

  now = [0.0]
  monkeypatch.setattr(metrics_lib.time, 'perf_counter', lambda: now[0])
  progress = metrics_lib.Progress(0, 110, 'tokens')
  now[0] = 60.0
  progress.pause(60.0, steps=1)  # step 1 ran inside its compilation
  with caplog.at_level('INFO', logger='absl'):
    assert progress.update(1, 100, {'loss': 2.0}) == {}  # no timed step yet
    assert not progress.due()
    now[0] = 130.0
    assert progress.due()  # 70 s without a line
    progress.pause(20.0)
    rates = progress.update(11, 1000, {})
  assert rates == {'steps_per_s': pytest.approx(0.2), 'tokens_per_s': pytest.approx(20.0)}
  lines = [r.getMessage() for r in caplog.records]
  assert lines == [
    'step 1/110 | loss 2 | ETA after the next steps',
    'step 11/110 | 0.20 steps/s | 20 tokens/s | ETA 8m15s',  # 99 steps at 5 s
  ]


def test_a_model_traced_with_traced_rngs_gets_the_keys_of_nnx_rngs():
  """`models.traced_rngs`' ref-held counters draw nnx.Rngs' keys: a model initialised under jit
  with either has the same parameters, and `jax.eval_shape` gives their shapes."""
  config = models.default_config('decoder_lm', d_model=8, num_heads=2, num_layers=1, d_ff=16)

  def params(rngs):
    return nnx.state(models.build(config, rngs=rngs(5), vocab_size=11, pad_id=0), nnx.Param)

  plain = jax.tree.leaves(jax.jit(lambda: params(nnx.Rngs))())
  traced = jax.tree.leaves(jax.jit(lambda: params(models.traced_rngs))())
  shapes = jax.tree.leaves(jax.eval_shape(lambda: params(models.traced_rngs)))
  assert len(plain) > 3 and len(plain) == len(traced) == len(shapes)
  for want, got, shape in zip(plain, traced, shapes):
    np.testing.assert_array_equal(got, want)
    assert (shape.shape, shape.dtype) == (want.shape, want.dtype)
