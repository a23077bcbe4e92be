"""benchmarks/step_profile.py by hand: self times of nested spans, and the line of Attend's code
an op of an XLA dump is charged to; then on a real trace and dump."""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import step_profile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The tables XLA prints after a dumped module's instructions; a frame without a parent names
# itself as its parent.
DUMP = """HloModule jit_train_step

ENTRY %main {
  %p = f32[2]{0} parameter(0)
  %dot.1 = f32[2]{0} dot(%p, %p), metadata={op_name="jit(train_step)/dot" stack_frame_id=2}
  %fusion.2 = f32[2]{0} fusion(%p), kind=kLoop, metadata={op_name="a" stack_frame_id=3}
  ROOT %exp.3 = f32[2]{0} exponential(%p), metadata={op_name="b" stack_frame_id=4}
  %add.4 = f32[2]{0} add(%p, %p), metadata={op_name="c" stack_frame_id=5}
}

FileNames
1 "/repo/attention/core.py"
2 "/env/lib/python3.11/site-packages/flax/nnx/nn/linear.py"
3 "/env/lib/python3.11/site-packages/optax/_src/transform.py"
4 "/repo/models/layers.py"

FunctionNames
1 "attend"
2 "Linear.__call__"
3 "update"
4 "FeedForward.__call__"

FileLocations
1 {file_name_id=1 function_name_id=1 line=10 end_line=10 column=1 end_column=9}
2 {file_name_id=2 function_name_id=2 line=20 end_line=20 column=1 end_column=9}
3 {file_name_id=3 function_name_id=3 line=30 end_line=30 column=1 end_column=9}
4 {file_name_id=4 function_name_id=4 line=40 end_line=40 column=1 end_column=9}

StackFrames
1 {file_location_id=4 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=1}
3 {file_location_id=2 parent_frame_id=3}
4 {file_location_id=1 parent_frame_id=1}
5 {file_location_id=3 parent_frame_id=2}

"""


def test_a_span_loses_the_time_of_the_spans_nested_in_it():
  # A (0-10 ns) holds B (2-5) and C (6-8); D (12-13) stands alone; C's twin on the same key.
  spans = [(0, 10, 'A'), (2, 5, 'B'), (6, 8, 'C'), (12, 13, 'D'), (20, 24, 'C')]
  seconds = step_profile.self_seconds(spans)
  assert seconds == pytest.approx({'A': 5e-9, 'B': 3e-9, 'C': 6e-9, 'D': 1e-9})


def test_an_op_is_charged_to_its_innermost_frame_in_attends_code(tmp_path):
  frames = step_profile.stack_frames(DUMP)
  assert frames[2] == (
    '/env/lib/python3.11/site-packages/flax/nnx/nn/linear.py',
    'Linear.__call__',
    20,
    1,
  )
  (tmp_path / 'module_0004.jit_train_step.cpu_after_optimizations.txt').write_text(DUMP)
  (tmp_path / 'module_0005.jit_eval_step.cpu_after_optimizations.txt').write_text(DUMP)
  [program] = step_profile.dumped_programs(str(tmp_path), repo='/repo')
  assert program == {
    'p': 'other',  # no stack
    'dot.1': 'models/layers.py FeedForward.__call__',  # flax's Linear called by Attend's layer
    'fusion.2': 'flax/nnx/nn/linear.py Linear.__call__',  # XLA kept no frame of Attend's
    'exp.3': 'attention/core.py attend',
    'add.4': 'optimizer (optax)',
  }


CHARGE_SCRIPT = """
import json, sys
import jax
import jax.numpy as jnp
import attention
from benchmarks import step_profile

@jax.jit
def encode(q):
  return jnp.tanh(attention.scaled_dot_product_attention(q, q, q, implementation='reference'))

q = jnp.ones((2, 2, 64, 8))
encode(q).block_until_ready()
jax.profiler.start_trace(sys.argv[1] + '/trace')
for _ in range(3):
  encode(q).block_until_ready()
jax.profiler.stop_trace()
xplane = step_profile.newest_trace(sys.argv[1] + '/trace')
print(json.dumps(step_profile.charge(xplane, sys.argv[1] + '/hlo', 'jit_encode', calls=3)))
"""


def test_a_real_trace_of_any_jitted_function_is_charged_to_attends_lines(tmp_path):
  """`charge` on a real jax.profiler trace and XLA dump of a jitted `encode` (any module name,
  as benchmarks/pretrained_bench.py's --trace uses it): the attention kernel's lines get time."""
  dump = step_profile.dump_flags(f'{tmp_path}/hlo', 'jit_encode')
  result = subprocess.run(
    [sys.executable, '-c', CHARGE_SCRIPT, str(tmp_path)],
    cwd=ROOT,
    # Compiled afresh: a program read from the suite's persistent cache keeps the stack frames
    # of the checkout that compiled it, which may be another folder.
    env={**os.environ, 'XLA_FLAGS': dump, 'JAX_ENABLE_COMPILATION_CACHE': 'false'},
    capture_output=True,
    text=True,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  places = json.loads(result.stdout.strip().splitlines()[-1])
  assert places and all(ms >= 0 for ms in places.values())
  assert list(places.values()) == sorted(places.values(), reverse=True)
  assert any(place.startswith('attention/') for place in places), places
