"""A fine-tune's first parameters: its source's (`config.init_from`, resolved once by train.py
into a `sources.Source`), through the named conversions of `CONVERSIONS`, in one seam.

The parameters that match the new model by name and shape are taken as they are. One whose shape
differs is converted by the first conversion that claims it and that the config allows, and any
other difference is refused in one sentence naming the parameters, before anything is written
(`check`). Today's one conversion merges key/value heads (training/kv_heads.py, grouped-query
conversion, allowed by `config.init_kv_pooling`); the next ones (an attention a fine-tune swaps in,
a low-rank key/value factorisation) are entries of `CONVERSIONS`, not changes to the loop.

The source is duck-typed (training/ imports nothing above it): `reference.text`, `model_fields`
(its architecture's), `parameters(check, arrays=...)` (sources.Source).
"""

import dataclasses
from typing import Any, Callable

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from training import kv_heads
from training.checkpoints import CheckpointMismatchError, flat_state, from_flat
from training.setup import build_state, fresh_moments, shaped_state
from training.steps import TrainState


@dataclasses.dataclass(frozen=True)
class Conversion:
  """A named change of a parameter from the source's shape to the new model's.

  `claims(key, config)`: whether it may convert that parameter under this config; `plan(saved,
  wanted, config)`: what `convert` needs, or the sentence saying why it cannot; `allowed(config)`:
  '' when the config asks for it, else the sentence saying how to; `convert(value, plan, config,
  initial)`: the converted array (`initial`: the new model's own value, where `uses_initial`).
  """

  name: str
  claims: Callable[[str, Any], bool]
  plan: Callable[[tuple, tuple, Any], Any]
  allowed: Callable[[Any, Any], str]
  convert: Callable[[np.ndarray, Any, Any, np.ndarray | None], np.ndarray]
  uses_initial: Callable[[Any], bool] = lambda config: False


def _num_kv_heads(config) -> int:
  return config.model.get('num_kv_heads') or config.model.get('num_heads', 0)


def _pooling_allowed(config, plan) -> str:
  if config.init_kv_pooling in kv_heads.POOLINGS:
    return ''
  heads, target = plan
  return (
    f'has {heads} key/value heads where config.model has {target}: set config.init_kv_pooling '
    f"to one of {kv_heads.POOLINGS} to merge them ('mean' is Ainslie et al.'s grouped-query "
    'conversion)'
  )


KV_POOLING = Conversion(
  'kv_pooling',
  claims=lambda key, config: kv_heads.is_kv_projection(key) and bool(_num_kv_heads(config)),
  plan=lambda saved, wanted, config: kv_heads.regroupable(saved, wanted, _num_kv_heads(config)),
  allowed=_pooling_allowed,
  convert=lambda value, plan, config, initial: kv_heads.regroup(
    value, *plan, config.init_kv_pooling, initial
  ),
  uses_initial=lambda config: config.init_kv_pooling == 'random',
)
CONVERSIONS = (KV_POOLING,)


@dataclasses.dataclass(frozen=True)
class Plan:
  """What a fine-tune takes from its source: `{key: (conversion, its plan)}` of the parameters
  converted; the others that both hold are taken as they are."""

  converted: dict[str, tuple[Conversion, Any]]

  def uses_initial(self, config) -> bool:
    return any(conversion.uses_initial(config) for conversion, _ in self.converted.values())


def plan(like: TrainState, saved: dict[str, tuple], config, reference: str) -> Plan:
  """The conversions that turn the source's `saved` parameter shapes into `like`'s, or
  CheckpointMismatchError naming the parameters no allowed conversion explains."""
  wanted = _shapes(flat_state(like))
  converted, differ = {}, []
  for key, shape in wanted.items():
    if key not in saved or tuple(saved[key]) == shape:
      continue
    why = 'another model size?'
    for conversion in CONVERSIONS:
      if conversion.claims(key, config):
        found = conversion.plan(tuple(saved[key]), shape, config)
        if not isinstance(found, str):
          converted[key] = conversion, found
          break
        why = found
    else:
      differ.append(f'{key} is {tuple(saved[key])} there but {shape} here ({why})')
  if differ:
    raise CheckpointMismatchError(
      f'config.init_from={reference!r}: {len(differ)} parameter(s) have other shapes than in '
      f'this config.model: {"; ".join(differ[:3])}.'
    )
  for conversion, found in converted.values():
    if why := conversion.allowed(config, found):
      raise CheckpointMismatchError(f'config.init_from={reference!r} {why}.')
  return Plan(converted)


def check(config, like: TrainState, source) -> int:
  """The step of the source a fine-tune would start from (0 for a pretrained checkpoint), its
  parameters checked against `like` (possibly abstract) from metadata alone: nothing is read
  or written. Raises as `initial_state`."""
  _check_fields(config, source)
  step, _, _ = source.parameters(
    lambda saved: plan(like, saved, config, source.reference.text), arrays=False
  )
  return step


def initial_state(config, task, mesh, source) -> TrainState:
  """The first state of a fine-tune: the source's parameters, converted where `plan` says and
  placed where the mesh puts them, and fresh optimizer moments at step 0.

  Where the source fills every parameter they are read straight into the model's shapes
  (`setup.shaped_state`): nothing is initialised at random first, and the process never holds
  a random model beside the source's (SmolLM2's fine-tune: 6.1 GB peak before). A model with
  parameters the source lacks, or a conversion that takes the new model's own initial value
  (key/value heads pooled 'random'), is initialised and then overwritten.

  Raises:
    FileNotFoundError: the source holds no checkpoint (or not that step).
    CheckpointMismatchError: a parameter of both has a shape no allowed conversion explains.
    UnreadableCheckpointError: no checkpoint of a workdir can be read.
  """
  like = shaped_state(config, task, mesh)
  planned = []

  def checked(saved):
    planned.append(plan(like, saved, config, source.reference.text))

  step, saved, arrays = source.parameters(checked)
  lacking = [key for key in flat_state(like) if key.startswith('params.') and key not in saved]
  if lacking or planned[-1].uses_initial(config):
    state = build_state(config, task, mesh)
    return _placed(state, config, step, arrays, planned[-1], source)[0]
  return fresh_moments(_placed(like, config, step, arrays, planned[-1], source)[0])


def load_matching_params(state: TrainState, config, source) -> tuple[TrainState, list, list]:
  """`state` with the source's parameters that match by name and shape, converted where `plan`
  says; `(state, loaded names, initialised names)`. The optimizer state and step stay fresh.
  Raises as `initial_state`."""
  planned = []
  step, _, arrays = source.parameters(
    lambda saved: planned.append(plan(state, saved, config, source.reference.text))
  )
  return _placed(state, config, step, arrays, planned[-1], source)


def _placed(state: TrainState, config, step: int, arrays: dict, planned: Plan, source):
  """`state` with each of `arrays` that it has converted by `planned` and placed where `state`'s
  parameter is; `(state, loaded names, initialised names)`."""
  flat = flat_state(state)
  wanted = [key for key in flat if key.startswith('params.')]
  loaded = sorted(key for key in wanted if key in arrays)
  for key in loaded:
    value = np.asarray(arrays.pop(key))  # each array freed once placed: never two models held
    if key in planned.converted:
      conversion, found = planned.converted[key]
      # Only a conversion that takes the new model's own value reads it (`state` may be abstract).
      initial = np.asarray(jax.device_get(flat[key])) if conversion.uses_initial(config) else None
      value = conversion.convert(value, found, config, initial)
    placed = jax.device_put(
      np.asarray(value, flat[key].dtype), getattr(flat[key], 'sharding', None)
    )
    # A copy of its own: `np.asarray` views the restored array's buffer and `device_put` shares
    # it on CPU, and a buffer two arrays hold cannot be donated, so the train step's first call
    # allocated new parameters beside these (SmolLM2: 540 MB more at the run's peak).
    flat[key] = jnp.copy(placed)
  initialised = sorted(key for key in wanted if key not in loaded)
  names = sorted({conversion.name for conversion, _ in planned.converted.values()})
  converted = f'; converted ({", ".join(names)}): {len(planned.converted)}' if names else ''
  logging.info(
    'init_from %s (step %d): loaded %d of %d parameter arrays%s; initialised: %s',
    source.reference.text,
    step,
    len(loaded),
    len(wanted),
    converted,
    ', '.join(initialised[:8]) + (f' and {len(initialised) - 8} more' if initialised[8:] else '')
    if initialised
    else 'none',
  )
  return from_flat(flat, state), loaded, initialised


def _check_fields(config, source) -> None:
  """CheckpointMismatchError unless `config.model` has every field of a pretrained source's
  architecture (a config of another family)."""
  unknown = sorted(set(source.model_fields) - set(config.model))
  if unknown:
    raise CheckpointMismatchError(
      f'config.init_from={source.reference.text!r}: config.model={config.model.name!r} has no '
      f"field {unknown[0]} of the checkpoint's architecture; start from its own config "
      '(configs/pretrained_lm.py:CHECKPOINT, configs/minilm_mlm.py:CHECKPOINT).'
    )


def _shapes(tree) -> dict[str, tuple[int, ...]]:
  return {key: tuple(np.shape(v)) for key, v in tree.items() if key.startswith('params.')}
