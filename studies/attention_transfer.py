"""LoLCATs' attention transfer (Zhang et al. 2024): linear attention's feature maps trained to
give each layer's softmax outputs, for a trained decoder.

    python -m studies.attention_transfer --checkpoint=SmolLM2-135M-Instruct \
        --text=../shared/data/books/pride_and_prejudice.txt --workdir=runs/smollm2_hedgehog
    python train.py --config=configs/pretrained_lm.py:SmolLM2-135M-Instruct \
        --config.init_from=runs/smollm2_hedgehog --config.model.attention=linear \
        --config.model.feature_map=hedgehog --workdir=runs/smollm2_hedgehog_tuned

The checkpoint's decoder becomes linear attention with Hedgehog's learned feature maps
(`config.model.attention='linear'`, `feature_map='hedgehog'`: per head `[softmax(x W),
softmax(-x W)]`, W starting at the identity), and only those maps train. At each step the
unchanged (softmax) model reads a batch of the text's train split; each layer's queries, keys
and values then go through that layer's linear attention, and the loss is the mean squared
difference from the softmax layer's per-head outputs, averaged over the layers. Every layer learns
from the softmax model's own inputs, so the layers train side by side, none waiting on another's
maps. AdamW at `--learning_rate` (LoLCATs: 1e-2), no weight decay.

Writes WORKDIR as convert.py writes a checkpoint: step 0 of configs/pretrained_lm.py with the
linear model, the trained maps among its parameters, and transfer.json (the loss on a held-out
batch before and after, per layer). train.py fine-tunes it with `--config.init_from=WORKDIR`
(LoLCATs' second step, there with LoRA; here a full fine-tune) and eval.py reads it.
"""

import argparse
import copy
import json
import os
import tempfile
import time

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import attention
from configs import pretrained_lm
from models import interventions, pretrained
from models.attention_paths import attention_layers
import tasks
import training
from training import failures, pretrained_workdir
from training.metrics import duration

LINEAR = dict(attention='linear', feature_map='hedgehog')  # the student's `config.model` changes
TAPS = ('queries', 'keys', 'values', 'heads')  # what the softmax model gives each layer's maps
PROGRESS_EVERY = 10  # steps between progress lines


def softmax_taps(teacher: nnx.Module):
  """A compiled `ids [B, T] -> {tap: [L, B, N|K, T, H]}` of the softmax model's queries, keys,
  values and per-head outputs, layer by layer."""
  graphdef, state = nnx.split(teacher)
  paths = list(attention_layers(teacher))

  @jax.jit
  def run(state, ids):
    model = nnx.merge(graphdef, state)
    _, captured = interventions.capture(model, ids, method='token_states')
    return {name: jnp.stack([captured[f'{path}/{name}'] for path in paths]) for name in TAPS}

  return lambda ids: run(state, ids)


def transfer_loss(maps: dict[str, jax.Array], taps: dict[str, jax.Array], key_mask: jax.Array):
  """`(mean over layers of the squared error of linear attention's outputs against softmax's,
  [L] per layer)`: `maps` `{'query_features': [L, N, H, H], 'key_features': [L, K, H, H]}`, the
  taps `[L, B, ...]`, `key_mask [B, 1, 1, T]` True at real tokens."""
  linear = attention.get_variant('linear')

  def layer(query_features, key_features, q, k, v, heads):
    out = linear.attend(
      q, k, v, mask=key_mask, is_causal=True, feature_weights=(query_features, key_features)
    )
    error = jnp.square(out.astype(jnp.float32) - heads.astype(jnp.float32))  # [B, N, T, H]
    real = jnp.broadcast_to(key_mask[:, :, 0, :, None], error.shape)  # padded queries left out
    return jnp.sum(jnp.where(real, error, 0.0)) / jnp.maximum(jnp.sum(real), 1)

  per_layer = jax.vmap(layer)(
    maps['query_features'], maps['key_features'], *(taps[name] for name in TAPS)
  )
  return jnp.mean(per_layer), per_layer


def _student_maps(student: nnx.Module, paths: list[str]) -> dict[str, jax.Array]:
  """Each layer's feature maps stacked, `{'query_features': [L, N, H, H], 'key_features': ...}`."""
  modules = interventions.modules_by_path(student)
  return {
    name: jnp.stack([getattr(modules[path], name)[...] for path in paths])
    for name in ('query_features', 'key_features')
  }


def _set_maps(student: nnx.Module, paths: list[str], maps: dict[str, jax.Array]) -> None:
  modules = interventions.modules_by_path(student)
  for i, path in enumerate(paths):
    for name, stacked in maps.items():
      getattr(modules[path], name).value = stacked[i]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--checkpoint', required=True, help='what models.pretrained.read reads')
  parser.add_argument('--text', required=True, help='a plain UTF-8 text file')
  parser.add_argument('--workdir', required=True, help='the workdir to write (new or empty)')
  parser.add_argument('--steps', type=int, default=100, help='transfer steps')
  parser.add_argument('--batch', type=int, default=4, help='rows per step')
  parser.add_argument('--seq_length', type=int, default=256, help='tokens per row')
  parser.add_argument('--learning_rate', type=float, default=1e-2, help="AdamW's, constant")
  args = parser.parse_args(argv)
  if args.steps < 1 or args.batch < 1 or args.seq_length < 2:
    raise ValueError('--steps and --batch must be at least 1, --seq_length at least 2.')
  return args


def linear_student(read, conversion: pretrained.Conversion, args: argparse.Namespace):
  """`(task, student_config, student)`: the language-modelling task over `--text` (its config's
  dataset set from the flags), and the converted model with linear attention and Hedgehog's maps
  at the identity, every other weight the softmax model's."""
  config = conversion.config
  config.dataset.update(
    text_path=os.path.abspath(args.text),
    seq_length=args.seq_length,
    batch_size=args.batch,
    eval_batch_size=args.batch,
  )
  student_config = copy.deepcopy(config)
  student_config.model.update(LINEAR)
  with tempfile.TemporaryDirectory(prefix='.attend-transfer-') as staged:
    pretrained_workdir.save_vocab(staged, read)
    task = tasks.build(config, staged)
  student = task.build_model(student_config.model, nnx.Rngs(config.seed))
  nnx.update(student, nnx.state(conversion.model, nnx.Param))  # every weight but the new maps
  return task, student_config, student


def _inputs(batch: dict, pad_id: int) -> tuple[jax.Array, jax.Array]:
  """A batch's `(ids [B, T], key_mask [B, 1, 1, T])`, the mask True at real tokens."""
  ids = jnp.asarray(batch['inputs'])
  return ids, (ids != pad_id)[:, None, None, :]


def train_maps(maps: dict, taps_of, batches, pad_id: int, args: argparse.Namespace) -> dict:
  """`--steps` AdamW steps of the stacked maps towards the softmax model's outputs on `batches`,
  with a progress line every `PROGRESS_EVERY` steps; returns the trained maps."""
  tx = optax.adamw(args.learning_rate, weight_decay=0.0)

  @jax.jit
  def step(maps, opt_state, taps, key_mask):
    (loss, _), grads = jax.value_and_grad(transfer_loss, has_aux=True)(maps, taps, key_mask)
    updates, opt_state = tx.update(grads, opt_state, maps)
    return optax.apply_updates(maps, updates), opt_state, loss

  opt_state = tx.init(maps)
  first_done = time.perf_counter()
  for i in range(1, args.steps + 1):
    ids, key_mask = _inputs(next(batches), pad_id)
    maps, opt_state, loss = step(maps, opt_state, taps_of(ids), key_mask)
    if i == 1:  # the rates leave out compiling
      jax.block_until_ready(loss)
      first_done = time.perf_counter()
    if i % PROGRESS_EVERY == 0 or i == args.steps:
      rate = (i - 1) / max(time.perf_counter() - first_done, 1e-9)  # steps a second
      print(
        f'Attention transfer: step {i}/{args.steps} | loss {float(loss):.4g} | '
        f'{rate * args.batch * args.seq_length:,.0f} tokens/s | '
        f'ETA {duration((args.steps - i) / max(rate, 1e-9))}',
        flush=True,
      )
  return maps


def write_transferred(workdir: str, read, conversion, student_config, student, result: dict):
  """WORKDIR as convert.py writes it, the student with its trained maps, and transfer.json."""
  report = dict(conversion.report, attention_transfer=result)
  pretrained_workdir.write_workdir(
    workdir,
    read,
    pretrained.Conversion(
      student_config, student, report, 'its output layer; feature maps from attention transfer'
    ),
  )
  with open(os.path.join(workdir, 'transfer.json'), 'w', encoding='utf-8') as f:
    json.dump(result, f, indent=1)


def main(argv: list[str] | None = None) -> dict:
  args = parse_args(argv)
  training.quiet_library_logs()
  pretrained_workdir.refuse_used(args.workdir)  # before anything is read
  read = pretrained.read(args.checkpoint)
  conversion = pretrained_lm.converted(read)
  config = conversion.config
  task, student_config, student = linear_student(read, conversion, args)
  paths = list(attention_layers(student))
  taps_of = softmax_taps(conversion.model)
  pad_id = task.tokenizer.pad_id
  held_out = _inputs(
    next(task.batches(config.dataset.eval_split, batch_size=args.batch, shuffle=False, seed=0)),
    pad_id,
  )
  held_out_taps = taps_of(held_out[0])
  evaluate = jax.jit(lambda maps: transfer_loss(maps, held_out_taps, held_out[1]))
  maps = _student_maps(student, paths)
  before, before_layers = evaluate(maps)
  print(
    f'Attention transfer of {read.name} ({len(paths)} layers): held-out loss {float(before):.4g} '
    f'at the identity maps; {args.steps} steps of {args.batch} x {args.seq_length} tokens.',
    flush=True,
  )
  batches = task.batches(config.dataset.train_split, batch_size=args.batch, shuffle=True, seed=0)
  started = time.perf_counter()
  maps = train_maps(maps, taps_of, batches, pad_id, args)
  after, after_layers = evaluate(maps)
  _set_maps(student, paths, maps)
  result = dict(
    checkpoint=read.name,
    text=args.text,
    steps=args.steps,
    batch=args.batch,
    seq_length=args.seq_length,
    learning_rate=args.learning_rate,
    seconds=round(time.perf_counter() - started, 1),
    held_out_loss=dict(before=float(before), after=float(after)),
    per_layer=dict(
      before=np.asarray(before_layers).round(6).tolist(),
      after=np.asarray(after_layers).round(6).tolist(),
    ),
  )
  write_transferred(args.workdir, read, conversion, student_config, student, result)
  print(f'Held-out transfer loss {float(before):.4g} -> {float(after):.4g}.')
  return result


if __name__ == '__main__':
  failures.run('python -m studies.attention_transfer', main)  # a user's error: one sentence
