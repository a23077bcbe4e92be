"""Neural Turing Machine (Graves et al. 2014) and the LSTM it is compared with.

Both map a float sequence `[B, T, input_size]` to logits `[B, T, output_size]`, one per step, for
algorithmic tasks (copy, repeat copy, associative recall) trained with sigmoid cross-entropy.

The NTM, one step (all of it inside one `jax.lax.scan` over time):

1. The controller (an LSTM, or one tanh layer) reads `[x_t; r_{t-1}]`, the input and the previous
   step's read vectors, and emits `o_t`.
2. Every head maps `o_t` to its addressing parameters: key k (linear: the cosine ignores its
   length, so a squashing function would only saturate gradients), strength β = softplus,
   gate g = sigmoid, shift s = softmax over the 2r + 1 offsets -r..r, sharpening γ = 1 + softplus;
   a write head also to erase e = sigmoid and add a = tanh.
3. The write heads address `M_{t-1}` and write into it, all erasures before all additions
   (`attention.addressing.write_heads`); the read heads then address and read `M_t`, so a step can
   read what it wrote (the paper's `r_t = Σ_i w_t(i) M_t(i)`).
4. The output is the logits `W [o_t; r_t] + b`; the loss applies the sigmoid.

Initial state: every memory row is the constant 1e-6 (the initialisation Collier & Beel 2018,
"Implementing Neural Turing Machines", found to learn fastest and most reliably); every head's
previous weighting is one-hot on row 0, because equal rows make the first content weights uniform
and shifts need a known place to walk from; the previous read vectors are learned
(`initial_reads`, initialised to zero).
"""

from typing import Any, ClassVar

from flax import nnx
import jax
import jax.numpy as jnp

from attention import addressing
from models import interventions
from models.layers import check_choice, check_positive_ints, dense, is_int

Array = jax.Array
CONTROLLERS = ('lstm', 'feedforward')
MEMORY_INIT = 1e-6  # every memory row at t = 0; nonzero, so the first cosines are defined


def _check_inputs(inputs: Any, input_size: int, name: str) -> Array:
  """`inputs` as a float32 array; raises ValueError unless it is `[B, T, input_size]`."""
  inputs = jnp.asarray(inputs)
  if inputs.ndim != 3 or inputs.shape[-1] != input_size:
    raise ValueError(
      f'{name}: inputs must be float [B, T, input_size={input_size}]; got '
      f'{inputs.dtype}{tuple(inputs.shape)}.'
    )
  return inputs.astype(jnp.float32)


def _lstm_carry(batch: int, size: int) -> tuple[Array, Array]:
  """The zero `(c, h)` carry `([B, size], [B, size])` of an `nnx.OptimizedLSTMCell`."""
  return jnp.zeros((batch, size)), jnp.zeros((batch, size))


def _time_major(x: Array) -> Array:
  """`[B, T, ...]` <-> `[T, B, ...]`, the layout `jax.lax.scan` steps over."""
  return jnp.swapaxes(x, 0, 1)


class NTM(nnx.Module):
  """Neural Turing Machine with an LSTM or feedforward controller and separate read/write heads.

  Args:
    input_size: features of each input step.
    output_size: logits per output step.
    memory_slots: memory rows N.
    memory_width: width M of a memory row.
    controller: 'lstm' or 'feedforward'.
    controller_size: the controller's output size.
    read_heads: read heads R.
    write_heads: write heads W.
    shift_range: r, the largest shift of a head's focus per step (offsets -r..r).
    rngs: `params` stream.

  `attention_names`: `read` and `write`, the heads' weightings over the slots `[B, T, heads, N]`.
  """

  attention_names: ClassVar[dict[str, str]] = {'read': 'read_weights', 'write': 'write_weights'}

  def __init__(
    self,
    *,
    input_size: int,
    output_size: int,
    memory_slots: int = 128,
    memory_width: int = 20,
    controller: str = 'lstm',
    controller_size: int = 100,
    read_heads: int = 1,
    write_heads: int = 1,
    shift_range: int = 1,
    rngs: nnx.Rngs,
  ):
    check_positive_ints(
      input_size=input_size,
      output_size=output_size,
      memory_slots=memory_slots,
      memory_width=memory_width,
      controller_size=controller_size,
      read_heads=read_heads,
      write_heads=write_heads,
    )
    check_choice('controller', controller, CONTROLLERS)
    if not is_int(shift_range) or not 0 <= shift_range < memory_slots:
      raise ValueError(
        f'shift_range must be an integer in [0, memory_slots={memory_slots}); got {shift_range!r}.'
      )
    self.input_size, self.memory_slots, self.memory_width = input_size, memory_slots, memory_width
    self.controller_kind, self.controller_size = controller, controller_size
    self.read_heads, self.write_heads = read_heads, write_heads
    self.shifts = 2 * shift_range + 1
    m, c = memory_width, controller_size
    controller_in = input_size + read_heads * m
    if controller == 'lstm':
      self.controller = nnx.OptimizedLSTMCell(controller_in, c, rngs=rngs)
    else:
      self.controller = dense(controller_in, c, rngs=rngs)
    # Per head: key [M], β, g, γ [1 each], s [S]; a write head also e and a [M each].
    self.read_params = dense(c, read_heads * (m + 3 + self.shifts), rngs=rngs)
    self.write_params = dense(c, write_heads * (3 * m + 3 + self.shifts), rngs=rngs)
    self.initial_reads = nnx.Param(jnp.zeros((read_heads, m)))
    self.output = dense(c + read_heads * m, output_size, rngs=rngs)

  def _initial_carry(self, batch: int) -> dict[str, Any]:
    """The state before the first step; see the module docstring."""
    n, m = self.memory_slots, self.memory_width
    one_hot = jax.nn.one_hot(0, n)  # [N]
    return {
      'controller': (
        _lstm_carry(batch, self.controller_size) if self.controller_kind == 'lstm' else ()
      ),
      'memory': jnp.full((batch, n, m), MEMORY_INIT),
      'read_w': jnp.broadcast_to(one_hot, (batch, self.read_heads, n)),
      'write_w': jnp.broadcast_to(one_hot, (batch, self.write_heads, n)),
      'reads': jnp.broadcast_to(self.initial_reads[...], (batch, self.read_heads, m)),
    }

  def _address(self, params: Array, memory: Array, previous: Array) -> tuple[Array, Array]:
    """Weightings `[B, K, N]` of K heads from their raw parameters `[B, K, M + 3 + S + ...]`.

    Returns:
      `(weights [B, K, N], the parameters after the addressing ones [B, K, ...])`.
    """
    m, s = self.memory_width, self.shifts
    key = params[..., :m]  # [B, K, M]
    beta = jax.nn.softplus(params[..., m])  # [B, K]
    gate = jax.nn.sigmoid(params[..., m + 1])  # [B, K]
    gamma = 1.0 + jax.nn.softplus(params[..., m + 2])  # [B, K]
    shift = jax.nn.softmax(params[..., m + 3 : m + 3 + s], axis=-1)  # [B, K, S]
    weights = addressing.address(memory[:, None], key, beta, gate, shift, gamma, previous)
    return weights, params[..., m + 3 + s :]

  def _step(self, carry: dict[str, Any], x_t: Array) -> tuple[dict[str, Any], Array]:
    """One time step from the input `x_t [B, input_size]`.

    Returns:
      `(new carry, output features [B, C + R*M])`; the weightings are the taps `read_weights`
      `[B, R, N]` and `write_weights` `[B, W, N]`.
    """
    batch, m = x_t.shape[0], self.memory_width
    controller_in = jnp.concatenate([x_t, carry['reads'].reshape(batch, -1)], axis=-1)  # [B, I+R*M]
    if self.controller_kind == 'lstm':
      state, out = self.controller(carry['controller'], controller_in)  # out [B, C]
    else:
      # tanh bounds the output like an LSTM's, so the heads see the same range either way.
      state, out = (), jnp.tanh(self.controller(controller_in))
    write_raw = self.write_params(out).reshape(batch, self.write_heads, -1)  # [B, W, 3M+3+S]
    write_w, rest = self._address(write_raw, carry['memory'], carry['write_w'])
    write_w = interventions.tap(self, 'write_weights', write_w)  # [B, W, N]
    erase, add = jax.nn.sigmoid(rest[..., :m]), jnp.tanh(rest[..., m:])  # [B, W, M] each
    memory = addressing.write_heads(carry['memory'], write_w, erase, add)  # [B, N, M]
    read_raw = self.read_params(out).reshape(batch, self.read_heads, -1)  # [B, R, M+3+S]
    read_w, _ = self._address(read_raw, memory, carry['read_w'])
    read_w = interventions.tap(self, 'read_weights', read_w)  # [B, R, N]
    reads = addressing.read(memory[:, None], read_w)  # [B, R, M]
    features = jnp.concatenate([out, reads.reshape(batch, -1)], axis=-1)  # [B, C + R*M]
    new = {
      'controller': state,
      'memory': memory,
      'read_w': read_w,
      'write_w': write_w,
      'reads': reads,
    }
    return new, features

  def sequence_logits(
    self,
    inputs: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Runs the machine over a sequence from a fresh memory.

    Args:
      inputs: float `[B, T, input_size]`.
      deterministic: part of the common interface; the NTM has no dropout.
      rngs: part of the common interface; unused.

    Returns:
      Logits float32 `[B, T, output_size]`. The heads' weightings are the taps
      `attention_names` lists, per step: `read_weights` `[B, T, R, N]`, `write_weights`
      `[B, T, W, N]`.
    """
    del deterministic, rngs  # no dropout
    inputs = _check_inputs(inputs, self.input_size, 'NTM')
    carry = self._initial_carry(inputs.shape[0])
    _, features = interventions.scan(self._step, carry, _time_major(inputs))  # [T, B, C + R*M]
    return self.output(_time_major(features)).astype(jnp.float32)  # [B, T, O]


def lstm_parameter_count(
  hidden_size: int, *, input_size: int, output_size: int, num_layers: int = 1
) -> int:
  """Parameters of `LSTMBaseline` with these sizes, without building it.

  A layer with input I has `4 (I H + H H + H)` (input and recurrent kernels, one bias per gate);
  the output layer `H O + O`.
  """
  h = hidden_size
  layers = sum(4 * ((input_size if i == 0 else h) * h + h * h + h) for i in range(num_layers))
  return layers + h * output_size + output_size


class LSTMBaseline(nnx.Module):
  """Stacked LSTM with a linear output per step, the NTM paper's baseline.

  To compare at a similar parameter count, pick the `hidden_size` whose
  `lstm_parameter_count(hidden_size, input_size=..., output_size=..., num_layers=...)` is closest to
  the NTM's `sum(x.size for x in jax.tree.leaves(nnx.state(ntm, nnx.Param)))`; the count grows as
  `4 (2L - 1) H²`, so a bisection or a scan over H finds it at once.

  Args:
    input_size: features of each input step.
    output_size: logits per output step.
    hidden_size: LSTM size H of every layer.
    num_layers: stacked LSTM layers L.
    rngs: `params` stream.

  `attention_names` is empty: an LSTM has no attention to show.
  """

  attention_names: ClassVar[dict[str, str]] = {}

  def __init__(
    self,
    *,
    input_size: int,
    output_size: int,
    hidden_size: int = 256,
    num_layers: int = 1,
    rngs: nnx.Rngs,
  ):
    check_positive_ints(
      input_size=input_size, output_size=output_size, hidden_size=hidden_size, num_layers=num_layers
    )
    self.input_size, self.hidden_size = input_size, hidden_size
    self.cells = nnx.List(
      [
        nnx.OptimizedLSTMCell(input_size if i == 0 else hidden_size, hidden_size, rngs=rngs)
        for i in range(num_layers)
      ]
    )
    self.output = dense(hidden_size, output_size, rngs=rngs)

  def sequence_logits(
    self,
    inputs: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Logits float32 `[B, T, output_size]` for float inputs `[B, T, input_size]`.

    `deterministic` and `rngs` are part of the common interface (no dropout).
    """
    del deterministic, rngs  # no dropout
    inputs = _check_inputs(inputs, self.input_size, 'LSTMBaseline')
    batch = inputs.shape[0]

    def step(carry, x_t):
      new = []
      for cell, layer_carry in zip(self.cells, carry):
        layer_carry, x_t = cell(layer_carry, x_t)  # x_t [B, H]
        new.append(layer_carry)
      return new, x_t

    carry = [_lstm_carry(batch, self.hidden_size) for _ in self.cells]
    _, hidden = jax.lax.scan(step, carry, _time_major(inputs))  # [T, B, H]
    return self.output(_time_major(hidden)).astype(jnp.float32)  # [B, T, O]
