"""Beyond one device: train.py as a 2-process job on localhost, and sharded parameters on 8
simulated CPU devices (data parallel, FSDP, tensor parallel), with checkpoints moving between
process counts and meshes."""

import json
import os
import socket
import subprocess
import sys

from cpu_devices import cpu_environment
from flax import nnx
import jax
import ml_collections
import numpy as np
import pytest
from test_training import EVAL_SPLIT, TRAIN_SPLIT

from configs import default
import models
import tasks
from training import config as config_lib
from training import sharding
from training.checkpoints import Checkpointer
from training.optim import make_optimizer
from training.setup import build_state
from training.steps import annotated_train_state

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# configs/default.py shrunk; dropout stays on, so the runs also agree on their dropout masks. One
# length bucket: each process compiles one train step instead of one per padded shape. Adam's eps
# is 1e-6, not the configs' 1e-9 (the paper's): with 1e-9 an element whose gradient is zero in
# exact arithmetic (the key projection's bias: q.b_k is added to every score of a query, which
# the softmax ignores) takes learning-rate-sized steps from rounding noise, and that noise
# differs with the summation order of 1 or 2 processes.
TINY = [
  '--config.model.d_model=32',
  '--config.model.d_ff=64',
  '--config.model.num_layers=1',
  '--config.dataset.batch_size=8',
  '--config.dataset.eval_batch_size=200',
  '--config.dataset.bucket_step=128',
  f'--config.dataset.train_split={TRAIN_SPLIT}',  # each process reads less
  f'--config.dataset.eval_split={EVAL_SPLIT}',  # the final evaluation: 64 examples, not 1,000
  '--config.eps=1e-6',
  '--config.log_every_steps=1',
  '--config.checkpoint_every_steps=2',
  '--config.eval_every_steps=0',
  '--config.num_eval_decode=0',
  '--config.warmup_steps=2',
]


@pytest.fixture(scope='module')
def data_dir(tfds_dir, tmp_path_factory):
  """The default config's dataset, prepared once (the tests' runs start side by side)."""
  data_dir = tfds_dir
  config = default.get_config()
  config.dataset.data_dir = str(data_dir)
  tasks.build(config, str(tmp_path_factory.mktemp('vocab')))
  return data_dir


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _start(workdir, data_dir, steps: int, processes: int) -> list[subprocess.Popen]:
  """Starts train.py on the tiny default config as `processes` processes of one job."""
  command = [
    sys.executable,
    'train.py',
    '--config=configs/default.py',
    f'--workdir={workdir}',
    f'--config.dataset.data_dir={data_dir}',
    f'--config.num_train_steps={steps}',
    *TINY,
  ]
  if processes > 1:
    command += [f'--coordinator_address=127.0.0.1:{_free_port()}', f'--num_processes={processes}']
  return [
    subprocess.Popen(
      command + ([f'--process_id={i}'] if processes > 1 else []),
      cwd=ROOT,
      env=cpu_environment(),
      text=True,
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
    )
    for i in range(processes)
  ]


def _finish(*jobs: list[subprocess.Popen]) -> list[list[str]]:
  """Waits for every process of `jobs`; returns each job's logs."""
  logs = [[run.communicate(timeout=600)[0] for run in job] for job in jobs]
  for job, job_logs in zip(jobs, logs):
    for run, log in zip(job, job_logs):
      assert run.returncode == 0, log[-3000:]
  return logs


def _metrics(workdir) -> list[dict]:
  with open(os.path.join(workdir, 'metrics.jsonl'), encoding='utf-8') as f:
    return [json.loads(line) for line in f]


def _losses(workdir, split='train') -> dict[int, float]:
  lines = [m for m in _metrics(workdir) if m['split'] == split]
  steps = [m['step'] for m in lines]
  assert len(steps) == len(set(steps)), f'{split} metrics written twice: {steps}'
  return {m['step']: m['loss'] for m in lines}


def _saved_params(workdir, step: int) -> dict[str, np.ndarray]:
  """The parameters saved at `step` by name, read in this (single-device) process."""
  with open(os.path.join(workdir, 'config.json'), encoding='utf-8') as f:
    config = ml_collections.ConfigDict(json.load(f))
  checkpointer = Checkpointer(os.path.join(workdir, 'checkpoints'), max_to_keep=None)
  state, _ = checkpointer.restore(build_state(config, tasks.build(config, str(workdir))), step)
  checkpointer.close()
  return {
    jax.tree_util.keystr(path, simple=True, separator='.'): np.asarray(x)
    for path, x in jax.tree_util.tree_flatten_with_path(state.params)[0]
  }


@pytest.mark.slow
def test_two_processes_train_as_one_and_their_checkpoints_resume_either_way(data_dir, tmp_path):
  one, two = tmp_path / 'one', tmp_path / 'two'
  _, logs = _finish(
    _start(one, data_dir, steps=4, processes=1), _start(two, data_dir, steps=4, processes=2)
  )
  assert 'Process 1 of 2' in logs[1]
  # Same global batches, same dropout masks: the same curve, up to summation order.
  np.testing.assert_allclose(list(_losses(two).values()), list(_losses(one).values()), rtol=1e-5)
  assert list(_losses(two)) == [1, 2, 3, 4]
  np.testing.assert_allclose(_losses(two, EVAL_SPLIT)[4], _losses(one, EVAL_SPLIT)[4], rtol=1e-5)
  assert len(os.listdir(two / 'tensorboard')) == 1  # process 0's event file only

  # Each checkpoint resumes under the other process count.
  resumed = _finish(
    _start(one, data_dir, steps=6, processes=2), _start(two, data_dir, steps=6, processes=1)
  )
  assert all('Resumed from step 4' in log for job in resumed for log in job)
  np.testing.assert_allclose(
    [_losses(two)[s] for s in (5, 6)], [_losses(one)[s] for s in (5, 6)], rtol=1e-5
  )
  for step in (4, 6):
    ones, twos = _saved_params(one, step), _saved_params(two, step)
    assert ones.keys() == twos.keys()
    for name in ones:  # atol: a hundredth of one Adam step at the peak learning rate
      np.testing.assert_allclose(ones[name], twos[name], rtol=1e-5, atol=2e-5, err_msg=name)


# Runs in a process of 8 simulated CPU devices: three train steps under each mesh, the shard
# sizes of every parameter, and a checkpoint saved under FSDP restored under tensor parallelism.
_MESHES = r"""
import json, sys
import jax, numpy as np
from flax import nnx
import tasks
from configs import default
from training import sharding
from training.checkpoints import Checkpointer
from training.loop import jit_train_step
from training.setup import build_state

data_dir, checkpoint_dir, train_split = sys.argv[1:]
config = default.get_config()
config.model.update(d_model=32, d_ff=64, num_layers=1, num_heads=4)
config.dataset.update(data_dir=data_dir, batch_size=16, bucket_step=128,   # one shape
                      train_split=train_split)
task = tasks.build(config, checkpoint_dir + '_vocab')
batches = task.batches('train', batch_size=16, shuffle=True, seed=0)
data = [next(batches) for _ in range(3)]
MESHES = {'data': dict(data=8), 'fsdp': dict(data=1, fsdp=8), 'tensor': dict(data=1, tensor=8)}
report, states = {}, {}
for name, axes in MESHES.items():
  config.mesh.update({'data': 1, 'fsdp': 1, 'tensor': 1, **axes})
  mesh = sharding.make_mesh(config.mesh)
  state = build_state(config, task, mesh)
  step = jit_train_step(config, task, state, mesh)
  losses = []
  for i, batch in enumerate(data):
    state, metrics = step(state, sharding.shard_batch(batch, mesh), jax.random.key(i))
    losses.append(float(metrics['loss']))
  params = jax.tree_util.tree_flatten_with_path(state.params)[0]
  shards = {jax.tree_util.keystr(path): [x.size, [s.data.size for s in x.addressable_shards]]
            for path, x in params}
  moments = jax.tree.leaves(state.opt_state)
  report[name] = dict(losses=losses, shards=shards,
                      moment_ways=sorted({x.size // x.addressable_shards[0].data.size
                                          for x in moments if x.size > 1}))
  states[name] = (state, mesh)

fsdp_state, _ = states['fsdp']
saver = Checkpointer(checkpoint_dir, max_to_keep=1)
saver.save(fsdp_state, dict(data={}))
saver.wait()
config.mesh.update(data=1, fsdp=1, tensor=8)
mesh = sharding.make_mesh(config.mesh)
like = build_state(config, task, mesh)
restored, _ = Checkpointer(checkpoint_dir, max_to_keep=1).restore(like)
triples = list(zip(jax.tree.leaves(restored.params), jax.tree.leaves(fsdp_state.params),
                   jax.tree.leaves(like.params)))
report['restored'] = dict(
    equal=all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b, _ in triples),
    tensor_shardings=all(a.sharding == c.sharding for a, _, c in triples))
print(json.dumps(report))
"""


@pytest.mark.slow
def test_data_fsdp_and_tensor_parallel_agree_and_split_the_parameters(data_dir, tmp_path):
  run = subprocess.run(
    [sys.executable, '-c', _MESHES, str(data_dir), str(tmp_path / 'checkpoints'), TRAIN_SPLIT],
    cwd=ROOT,
    env=cpu_environment(devices=8),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert run.returncode == 0, run.stderr[-3000:]
  report = json.loads(run.stdout.splitlines()[-1])
  for name in ('fsdp', 'tensor'):
    np.testing.assert_allclose(report[name]['losses'], report['data']['losses'], rtol=1e-5)

  def split_ways(mesh, key):
    size, shards = report[mesh]['shards'][key]
    assert len(shards) == 8 and len(set(shards)) == 1, (mesh, key, shards)
    return size // shards[0]

  kernel = "['decoder_layers'][0]['self_attn']['w_q']['kernel']"  # [embed, heads]
  ffn = "['encoder_layers'][0]['ffn']['w_1']['kernel']"  # [embed, mlp]
  norm = "['encoder_layers'][0]['norms'][0]['scale']"  # unnamed: replicated
  assert [split_ways('data', k) for k in (kernel, ffn, norm)] == [1, 1, 1]
  assert [split_ways('fsdp', k) for k in (kernel, ffn, norm)] == [8, 8, 1]
  assert [split_ways('tensor', k) for k in (kernel, ffn, norm)] == [8, 8, 1]
  # Under FSDP the Adam moments are split like their parameters (8 ways), or whole (norms).
  assert report['fsdp']['moment_ways'] == [1, 8]
  # Each device holds 1/8 of every parameter that FSDP splits: most of the model's bytes.
  sizes = report['fsdp']['shards'].values()
  split = sum(size for size, shards in sizes if shards[0] * 8 == size)
  assert split / sum(size for size, _ in sizes) > 0.8
  assert report['restored'] == dict(equal=True, tensor_shardings=True)


def _mesh(**axes) -> ml_collections.ConfigDict:
  mesh = sharding.mesh_config()
  mesh.update(axes)
  return mesh


def test_mesh_sizes_resolve_and_bad_meshes_are_one_sentence():
  assert sharding.mesh_shape(_mesh(), 8, 8) == dict(data=8, fsdp=1, tensor=1)
  assert sharding.mesh_shape(_mesh(fsdp=4), 8, 4) == dict(data=2, fsdp=4, tensor=1)
  assert sharding.mesh_shape(_mesh(data=1, fsdp=-1, tensor=2), 8, 8) == dict(
    data=1, fsdp=4, tensor=2
  )
  with pytest.raises(
    ValueError,
    match=r'^config.mesh data=3 x fsdp=1 x tensor=1 does not '
    r'multiply to the 8 devices; .*\.$',
  ):
    sharding.mesh_shape(_mesh(data=3), 8, 8)
  with pytest.raises(ValueError, match=r'config.mesh data=-1 x fsdp=3 .* 8 devices'):
    sharding.mesh_shape(_mesh(fsdp=3), 8, 8)
  with pytest.raises(
    ValueError,
    match=r'^config.mesh.pipeline is not a mesh axis; the axes are '
    r'data, fsdp, tensor\.$',
  ):
    sharding.mesh_shape(ml_collections.ConfigDict(dict(data=-1, pipeline=2)), 8, 8)
  with pytest.raises(ValueError, match=r'only one axis may be -1; got data, tensor'):
    sharding.mesh_shape(_mesh(tensor=-1), 8, 8)
  with pytest.raises(ValueError, match=r'config.mesh.fsdp=0 must be a positive integer or -1'):
    sharding.mesh_shape(_mesh(fsdp=0), 8, 8)
  with pytest.raises(
    ValueError,
    match=r'config.mesh.tensor=4 must divide the 2 devices of one '
    r'process',
  ):
    sharding.mesh_shape(_mesh(data=-1, tensor=4), 8, 2)


def test_a_batch_the_batch_shards_do_not_divide_is_refused_before_anything_runs(monkeypatch):
  monkeypatch.setattr(jax, 'device_count', lambda: 8)
  monkeypatch.setattr(jax, 'local_device_count', lambda: 8)
  config = config_lib.default_config('translation', 'transformer')
  config.mesh.update(data=2, fsdp=2, tensor=2)
  config.dataset.batch_size = 10
  with pytest.raises(
    ValueError,
    match=r'^config.dataset.batch_size=10 is not divisible by the 4 '
    r'batch shards \(config.mesh data=2 x fsdp=2\); choose a '
    r'multiple of 4\.$',
  ):
    config_lib.validate(config)
  config.dataset.batch_size = 8  # tensor parallelism does not split the batch
  config_lib.validate(config)


def test_a_mesh_axis_that_splits_no_parameter_of_the_model_is_refused():
  def abstract_state(name, **data_args):
    config = config_lib.default_config('translation', name)

    def create():
      model = models.build(config.model, rngs=nnx.Rngs(0), **data_args)
      return annotated_train_state(model, make_optimizer(config))

    return jax.eval_shape(create)  # shapes only: nothing is compiled

  data_args = dict(input_vocab_size=16, output_vocab_size=16, pad_id=0)
  seq2seq = abstract_state('seq2seq', **data_args)
  with pytest.raises(
    ValueError,
    match=r'^config.mesh.tensor=2, but no parameter of '
    r"config.model.name='seq2seq' has a dimension it splits "
    r'\(heads, mlp, vocab, .*\); use config.mesh.data for '
    r'this model\.$',
  ):
    sharding.check_axes_used(seq2seq, dict(data=4, fsdp=1, tensor=2), 'seq2seq')
  sharding.check_axes_used(seq2seq, dict(data=8, fsdp=1, tensor=1), 'seq2seq')
  transformer = abstract_state('transformer', **data_args)
  sharding.check_axes_used(transformer, dict(data=1, fsdp=2, tensor=4), 'transformer')


def test_every_logical_axis_name_of_every_model_has_a_rule():
  """A name missing from LOGICAL_AXIS_RULES would raise only when someone shards that model."""
  config = config_lib.default_config('language_modeling', 'decoder_lm')
  model = models.build(config.model, rngs=nnx.Rngs(0), vocab_size=16, pad_id=0)
  names = {
    name
    for x in jax.tree.leaves(
      nnx.state(model, nnx.Param), is_leaf=lambda x: isinstance(x, nnx.Variable)
    )
    for name in (x.get_metadata().get('out_sharding') or ())
    if name
  }
  assert names == set(sharding.LOGICAL_AXIS_RULES)
  assert sharding.partition_spec(
    ('embed', 'vocab'), (32, 30), dict(data=1, fsdp=4, tensor=4)
  ) == jax.sharding.PartitionSpec('fsdp', None)  # 30 is not divisible by 4: kept whole
