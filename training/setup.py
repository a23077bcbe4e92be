"""Builds the train state an experiment config describes, for the task's data (fresh, for
training; or the shapes a checkpoint is read into, for a command that only reads); the
compilation cache."""

import functools
import os

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import optax

import models
from training import sharding
from training.optim import make_optimizer
from training.steps import TrainState, annotated_train_state, plain


def build_state(config, task, mesh: Mesh | None = None) -> TrainState:
  """A fresh train state: `config.model` built by the task for its data, seeded by config.seed.

  With a `mesh`, every array is created where its sharding puts it (parameters and optimizer
  moments split by their logical axes), so no device ever holds a whole sharded model.

  Raises:
    ValueError: the mesh has an fsdp or tensor axis that splits no parameter of this model.
  """
  tx = make_optimizer(config)  # one object: the shardings' tree must match the state's statics
  annotated = functools.partial(_annotated, config, task, tx)
  create = lambda: plain(annotated())
  # One compiled initialiser instead of an eager compile per parameter shape (seconds on CPU).
  if mesh is None:
    return jax.jit(create)()
  abstract = jax.eval_shape(annotated)  # shapes and logical axis names; nothing is computed
  sharding.check_axes_used(abstract, dict(mesh.shape), config.model.name)
  return jax.jit(create, out_shardings=plain(sharding.state_shardings(abstract, mesh)))()


def abstract_state(config, task) -> TrainState:
  """The names, shapes and dtypes of `build_state`'s arrays, without computing any (for checking
  a config against a checkpoint before anything is built or written)."""
  return plain(jax.eval_shape(functools.partial(_annotated, config, task, make_optimizer(config))))


def shaped_state(config, task, mesh: Mesh | None = None, *, optimizer: bool = True) -> TrainState:
  """The state a checkpoint is restored straight into: its step, parameters and (with
  `optimizer`) optimizer moments abstract (shapes, dtypes and, with a `mesh`, the shardings
  `build_state` would give them); the model's other state built. Without `optimizer`,
  `opt_state` is None: `Checkpointer.restore` then reads the parameters alone (a command that
  only reads: evaluation, prompts, studies).

  Nothing is initialised at random: for a pretrained model the random init and the AdamW moments
  took longer than reading the checkpoint (SmolLM2: 41 s of a 61 s prompt.py command) and twice
  its memory.
  """
  tx = make_optimizer(config) if optimizer else optax.identity()
  annotated = functools.partial(_annotated, config, task, tx)
  abstract = jax.eval_shape(annotated)
  shardings = None
  if mesh is not None:  # as `build_state` checks and places it
    sharding.check_axes_used(abstract, dict(mesh.shape), config.model.name)
    shardings = plain(sharding.state_shardings(abstract, mesh))
  abstract = plain(abstract)
  if jax.tree.leaves(abstract.other):  # built for real: no checkpoint holds it
    # Only `other` leaves the jitted function, so XLA drops the parameters' initialisers.
    other = jax.jit(lambda: plain(annotated()).other)()
  else:
    other = abstract.other
  if shardings is not None:
    place = lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)
    abstract = abstract.replace(
      step=place(abstract.step, shardings.step),
      params=jax.tree.map(place, abstract.params, shardings.params),
      opt_state=jax.tree.map(place, abstract.opt_state, shardings.opt_state),
    )
  if not optimizer:
    return abstract.replace(opt_state=None, other=other, tx=None)
  return abstract.replace(other=other)


def fresh_moments(state: TrainState) -> TrainState:
  """`state` (its parameters arrays, its moments possibly abstract) with the optimizer's initial
  moments, made where `state.opt_state`'s shardings (if any) put them."""
  leaves, treedef = jax.tree.flatten(state.opt_state)
  shardings = [getattr(x, 'sharding', None) for x in leaves]
  placed = dict(out_shardings=treedef.unflatten(shardings)) if all(shardings) else {}
  init = jax.jit(state.tx.init, **placed)
  # Committed where the state's step lives, as every later step is: an uncommitted first step
  # made jit compile the train step a second time at step 2 (SmolLM2: 16 s, two programs held).
  step = jnp.zeros((), jnp.int32)
  if getattr(state.step, 'sharding', None) is not None:
    step = jax.device_put(step, state.step.sharding)
  return state.replace(step=step, opt_state=init(state.params))


def readable_state(config, task, mesh: Mesh | None = None) -> TrainState:
  """`shaped_state` without the optimizer: what a command that only reads restores into."""
  return shaped_state(config, task, mesh, optimizer=False)


def _annotated(config, task, tx) -> TrainState:
  model = task.build_model(config.model, models.traced_rngs(config.seed))
  return annotated_train_state(model, tx)


# XLA's persistent compilation cache: a repeated or resumed run reads its compiled programs from
# disk instead of compiling them again. JAX_COMPILATION_CACHE_DIR, when set, is the default.
DEFAULT_COMPILATION_CACHE = os.environ.get('JAX_COMPILATION_CACHE_DIR') or os.path.join(
  os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'), 'attend', 'jax'
)
# Every entry point's --compilation_cache flag says this.
COMPILATION_CACHE_HELP = "Directory of XLA's persistent compilation cache ('' = off)."
# Programs that compile faster than this are not worth a disk entry.
_MIN_COMPILE_SECONDS = 0.2


def enable_compilation_cache(directory: str) -> None:
  """Caches compiled programs in `directory` ('' = off); call before anything is compiled."""
  if directory:
    write_cache_entries_whole()
    jax.config.update('jax_compilation_cache_dir', os.path.expanduser(directory))
    jax.config.update('jax_persistent_cache_min_compile_time_secs', _MIN_COMPILE_SECONDS)


def write_cache_entries_whole() -> None:
  """Makes JAX write each persistent-cache entry under a temporary name and rename it into place.

  JAX (0.10) writes an entry in place (`LRUCache.put`: `write_bytes` on its final name), so a
  process reading the same cache meets it half-written, and a process killed mid-write leaves it
  truncated: either reader warns `Error reading persistent compilation cache entry` and compiles
  again. A rename is atomic: readers now see an entry whole or not at all. Where the cache
  evicts (`jax_compilation_cache_max_size` set), JAX's own locked write is kept.
  """
  from jax._src import lru_cache  # pylint: disable=import-outside-toplevel

  in_place = lru_cache.LRUCache.put
  if getattr(in_place, 'whole', False):
    return

  def put(self, key: str, value: bytes) -> None:
    if self.eviction_enabled or not key:
      return in_place(self, key, value)
    path = self.path / f'{key}{lru_cache._CACHE_SUFFIX}'  # pylint: disable=protected-access
    if path.exists():
      return None
    staged = path.with_name(f'.{path.name}.{os.getpid()}.tmp')
    staged.write_bytes(value)
    os.replace(staged, path)
    return None

  put.whole = True
  lru_cache.LRUCache.put = put
