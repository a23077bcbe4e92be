"""benchmarks/sharding_memory: the bytes per device it reports for a tiny Transformer equal the
ones counted here by hand from the model's shapes under each mesh."""

import json

import pytest

from benchmarks import sharding_memory
from configs import default


def _transformer_parameters(d: int, ff: int, layers: int, embedding_rows: int) -> int:
  """Parameters of a post-norm encoder-decoder Transformer with a tied output layer."""
  attention = 4 * (d * d + d)  # w_q, w_k, w_v, w_o kernels and biases
  ffn = d * ff + ff + ff * d + d  # w_1, w_2 kernels and biases
  norm = 2 * d  # scale and bias
  encoder = attention + ffn + 2 * norm
  decoder = 2 * attention + ffn + 3 * norm  # self-attention, cross-attention
  return layers * (encoder + decoder) + embedding_rows * d


# d_model 32, d_ff 64, one encoder and one decoder layer, vocabularies 24 in (divisible by 8) and
# 20 out (not divisible by 8), separate embeddings, output tied to the target embedding.
D, FF = 32, 64
NORM = 2 * D
PARAMETERS = _transformer_parameters(D, FF, 1, 24 + 20)
ADAM_COUNTS = 2 * 4  # the int32 counts of AdamW and of its schedule


@pytest.fixture(scope='module')
def state():
  config = default.get_config()
  config.model.update(d_model=D, d_ff=FF, num_layers=1)
  return sharding_memory.abstract_state(
    config, dict(input_vocab_size=24, output_vocab_size=20, pad_id=0)
  )


def _sizes(**axes):
  return {axis: axes.get(axis, 1) for axis in ('data', 'fsdp', 'tensor')}


def test_data_parallel_holds_every_parameter_on_every_device(state):
  assert PARAMETERS == 22784
  memory = sharding_memory.memory_per_device(state, _sizes(data=8))
  assert memory['params'] == 4 * PARAMETERS
  assert memory['grads'] == 4 * PARAMETERS
  assert memory['adam'] == 2 * 4 * PARAMETERS + ADAM_COUNTS
  assert memory['split'] == 0.0


def test_fsdp_splits_every_embed_dimension_eight_ways(state):
  kernel = state.params['encoder_layers'][0]['self_attn']['w_q']['kernel']  # ('embed', 'heads')
  assert sharding_memory.split_ways(kernel, _sizes(fsdp=8)) == 8
  assert sharding_memory.device_bytes(kernel, _sizes(fsdp=8)) == D * D * 4 / 8
  # Whole: the biases named 'heads' (3 attentions x 3) or 'mlp' (2), and the 5 unnamed norms.
  whole = 9 * D + 2 * FF + 5 * NORM
  memory = sharding_memory.memory_per_device(state, _sizes(fsdp=8))
  assert memory['params'] == 4 * (whole + (PARAMETERS - whole) / 8)
  assert memory['split'] == pytest.approx((PARAMETERS - whole) / PARAMETERS)


def test_total_is_params_grads_and_moments(state):
  memory = sharding_memory.memory_per_device(state, _sizes(fsdp=4, tensor=2))
  assert memory['grads'] == memory['params']
  assert memory['adam'] == 2 * memory['params'] + ADAM_COUNTS
  assert memory['total'] == 4 * memory['params'] + ADAM_COUNTS


def test_a_dimension_the_axis_does_not_divide_stays_whole(state):
  target = state.params['target_embed']['embed']['embedding']  # ('vocab', 'embed'), [20, 32]
  source = state.params['source_embed']['embed']['embedding']  # [24, 32]
  assert sharding_memory.device_bytes(target, _sizes(tensor=8)) == 20 * D * 4
  assert sharding_memory.device_bytes(source, _sizes(tensor=8)) == 24 * D * 4 / 8
  # Whole under tensor=8: the biases named 'embed' (3 w_o, 2 w_2), the norms, the target table.
  whole = 5 * D + 5 * NORM + 20 * D
  tensor = sharding_memory.memory_per_device(state, _sizes(tensor=8))
  assert tensor['params'] == 4 * (whole + (PARAMETERS - whole) / 8)
  # fsdp=3 divides no dimension (all are 20, 24, 32 or 64): every device holds everything.
  assert sharding_memory.memory_per_device(state, _sizes(fsdp=3))['params'] == 4 * PARAMETERS


def test_meshes_multiply_to_the_device_count():
  assert [sharding_memory.mesh_label(s) for s in sharding_memory.meshes(8)] == [
    'data=8',
    'fsdp=8',
    'tensor=8',
    'fsdp=4 x tensor=2',
    'data=2 x fsdp=4',
  ]
  assert [sharding_memory.mesh_label(s) for s in sharding_memory.meshes(3)] == [
    'data=3',
    'fsdp=3',
    'tensor=3',
  ]
  assert sharding_memory.meshes(1) == [_sizes()]


def test_main_writes_one_row_per_mesh(tmp_path, capsys):
  path = tmp_path / 'memory.json'
  sharding_memory.main(['--devices=2', '--models=base', f'--json={path}'])
  rows = json.loads(path.read_text())['rows']
  assert [r['mesh'] for r in rows] == ['data=2', 'fsdp=2', 'tensor=2']
  assert rows[0]['params'] == 4 * rows[0]['parameters']
  base = _transformer_parameters(512, 2048, 6, 8000)  # one shared vocabulary of 8000
  assert rows[0]['parameters'] == base
  assert f'| base | {base:,} | fsdp=2 |' in capsys.readouterr().out
  with pytest.raises(SystemExit):
    sharding_memory.main(['--models=nope'])
