"""The attention mechanisms of 2025 against the older ones, trained from scratch on one budget.

    python -m studies.mechanisms --out=runs/mechanisms

One small decoder-only model per mechanism, the same in everything else (width, depth, heads,
feed-forward, optimizer, steps, tokens), is trained three times in this process with
`training.train_and_evaluate`, each run in OUT/TASK/NAME:

- on *Pride and Prejudice* at the character level (../shared/data/books/, the last 10% held out,
  configs/gpt_text.py's data), then measured on the held-out test tail: bits per character; the
  share of attention on the first position of each window (the attention sink: mean over layers,
  heads and queries, for layers that form weights); the largest activation in the residual
  stream; cache bytes per token of context and decoding tokens/s after a 2,048-token context;
  training tokens/s;
- on multi-query associative recall (configs/gpt_mqar.py's task) at two numbers of key-value
  pairs: the answer accuracy.

Writes OUT/mechanisms.json, OUT/mechanisms.png and prints the table (`studies.mechanisms_report`).
`--mechanisms` runs some; a run whose workdir holds its final checkpoint is read, not trained
again. Progress: train.py's lines for each run, and one line per measurement.
"""

import argparse
import json
import os
import re
import time

from absl import logging
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from configs import gpt_mqar, gpt_text
from models import interventions
from models.mechanism_config import DELTA_RULE
import sources
from studies import mechanisms_report
from studies.decoder_runs import first_token_weight
import training
from training import evaluation, failures, restore

BOOK = os.path.join(
  os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
  '..',
  'shared',
  'data',
  'books',
  'pride_and_prejudice.txt',
)
# The model every mechanism shares (4 layers so that the 3:1 hybrid has one softmax layer).
MODEL = dict(num_layers=4, d_model=128, num_heads=4, d_ff=512, dropout_rate=0.0, positions='rope')
DELTA = 'gated_deltanet'
# name -> the `config.model` fields that make the mechanism (head size 32; MLA's query/key is
# its 16 no-position + 16 rotary features, the same 32).
MECHANISMS = {
  'softmax': {},
  'gated softmax': dict(output_gate=True),
  'MLA latent 16': dict(kv_lora_rank=16, d_k=16, rope_head_dim=16),
  'MLA latent 64': dict(kv_lora_rank=64, d_k=16, rope_head_dim=16),
  'differential': dict(attention='differential'),
  'Gated DeltaNet': dict(attention=DELTA),
  '3:1 hybrid': dict(layer_pattern=f'{DELTA},{DELTA},{DELTA},softmax', output_gate=True),
  'linear': dict(attention='linear'),
  'sigmoid': dict(attention='sigmoid'),
  'DeepSeek sparse k=T/4': dict(kv_lora_rank=64, d_k=16, rope_head_dim=16, index_topk='T/4'),
}
RECALL_PAIRS = (4, 8)  # MQAR's key-value pairs: 4 * pairs tokens per example
DECODE_CONTEXT = 2048
DECODE_STEPS = 32


def _model_fields(name: str, seq_length: int) -> dict:
  fields = {**MODEL, **MECHANISMS[name]}
  if fields.get('index_topk') == 'T/4':
    fields['index_topk'] = max(1, seq_length // 4)
  return fields


def book_config(name: str, args):
  """configs/gpt_text.py on the book, with the study's model and budget."""
  config = gpt_text.get_config()
  config.model.update(_model_fields(name, args.seq_length), max_length=DECODE_CONTEXT * 2)
  config.dataset.update(
    text_path=os.path.abspath(args.text), seq_length=args.seq_length, batch_size=args.batch
  )
  _budget(config, args.steps)
  return config


def recall_config(name: str, pairs: int, args):
  """configs/gpt_mqar.py at `pairs` key-value pairs, with the study's model."""
  config = gpt_mqar.get_config()
  length = 4 * pairs
  config.model.update(_model_fields(name, length), max_length=length)
  config.dataset.update(builder_config=f'pairs_{pairs}', seq_length=length - 1)
  config.num_eval_decode = 0
  _budget(config, args.recall_steps)
  return config


def _budget(config, steps: int) -> None:
  config.num_train_steps = steps
  config.eval_every_steps = steps
  config.checkpoint_every_steps = steps
  config.log_every_steps = max(1, steps // 4)


def _train(config, workdir: str) -> None:
  """Trains `config` in `workdir` unless its final checkpoint is there."""
  checkpoints = os.path.join(workdir, 'checkpoints')
  if os.path.isdir(checkpoints) and config.num_train_steps in restore.reader(checkpoints).steps():
    return
  training.train_and_evaluate(config, workdir)


def _train_tokens_per_second(workdir: str) -> float:
  """The median of the train lines' token rates, the first (compilation) left out."""
  rates = []
  with open(os.path.join(workdir, 'metrics.jsonl'), encoding='utf-8') as f:
    for line in f:
      record = json.loads(line)
      rate = record.get('tokens_per_s')
      if record.get('split') == 'train' and rate:
        rates.append(rate)
  return float(np.median(rates[1:] if len(rates) > 1 else rates)) if rates else float('nan')


def _readings(model, ids: np.ndarray) -> dict:
  """The sink share (mean over the layers that form attention weights, heads and queries 1.. of
  the weight on position 0; a delta-rule layer's signed attention form is left out) and the
  largest |activation| of the residual stream, from one pass of `ids`."""
  graphdef, state = nnx.split(model)
  mixers = interventions.modules_by_path(model).items()
  weighted = [
    f'{path}/weights'
    for path, module in mixers
    if path.endswith('self_attn') and module.config.attention not in DELTA_RULE
  ]

  @jax.jit
  def read(state, ids):
    _, captured = interventions.capture(nnx.merge(graphdef, state), ids, method='encode')
    sinks = [jnp.mean(first_token_weight(captured[name])) for name in weighted if name in captured]
    largest = jnp.max(
      jnp.stack([jnp.max(jnp.abs(v)) for k, v in captured.items() if k.endswith('/residual')])
    )
    return (jnp.mean(jnp.stack(sinks)) if sinks else jnp.nan), len(sinks), largest

  sink, layers, largest = read(state, jnp.asarray(ids))
  return dict(sink_share=float(sink), sink_layers=int(layers), largest_activation=float(largest))


def cache_bytes_per_token(model, context: int = DECODE_CONTEXT) -> float:
  """The decoding cache's bytes for `context` tokens of one row, over `context`, counted from
  its arrays (a fixed-size state is spread over the context)."""
  shapes = jax.eval_shape(lambda: model.init_decode_cache(jnp.zeros((1, 1), jnp.int32), context))
  leaves = jax.tree.leaves(shapes['layers'])
  return sum(leaf.size * leaf.dtype.itemsize for leaf in leaves) / context


def decoding_tokens_per_second(model, context: int = DECODE_CONTEXT) -> float:
  """Greedy decoding's tokens/s of one row after a `context`-token prompt (prefill excluded),
  the median of 3 timed runs of `DECODE_STEPS` steps after a compiling one."""
  graphdef, state = nnx.split(model)
  prompt = jnp.asarray(np.random.default_rng(0).integers(1, 20, (1, context)), jnp.int32)
  cache = jax.jit(
    lambda state: nnx.merge(graphdef, state).init_decode_cache(prompt, DECODE_STEPS + 1)
  )(state)

  @jax.jit
  def decode(state, cache):
    model = nnx.merge(graphdef, state)

    def body(step, carry):
      ids, cache = carry
      logits, cache = model.decode_step(ids, step, cache)
      return jnp.argmax(logits, axis=-1).astype(jnp.int32), cache

    return jax.lax.fori_loop(0, DECODE_STEPS, body, (prompt[:, -1], cache))[0]

  times = []
  for _ in range(4):
    started = time.perf_counter()
    jax.block_until_ready(decode(state, cache))
    times.append(time.perf_counter() - started)
  return DECODE_STEPS / float(np.median(times[1:]))


def measure_book(name: str, workdir: str, args) -> dict:
  source = sources.resolve(workdir, checkpoint='latest')
  restored = source.restore()
  test = evaluation.split_metrics(
    restored.state, source.task, 'test', batch_size=args.batch, mesh=restored.mesh
  )
  model = source.model()
  windows = next(iter(source.task.batches('test', batch_size=8, shuffle=False, seed=0)))
  row = dict(
    name=name,
    bits_per_character=test['bits_per_char'],
    train_tokens_per_second=_train_tokens_per_second(workdir),
    cache_bytes_per_token=cache_bytes_per_token(model),
    parameters=int(sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))),
    **_readings(model, windows['inputs']),
  )
  row['decode_tokens_per_second'] = decoding_tokens_per_second(model)
  return row


def measure_recall(workdir: str) -> float:
  source = sources.resolve(workdir, checkpoint='latest')
  restored = source.restore()
  test = evaluation.split_metrics(
    restored.state, source.task, 'test', batch_size=250, mesh=restored.mesh
  )
  return float(test['accuracy'])


def _workdir(args, task: str, name: str) -> str:
  return os.path.join(args.out, task, re.sub(r'\W+', '_', name).strip('_'))


def run(args) -> dict:
  names = [name for name in args.mechanisms.split(',') if name]
  unknown = [name for name in names if name not in MECHANISMS]
  if unknown:
    raise ValueError(f'--mechanisms: {unknown[0]!r} is not one of {list(MECHANISMS)}.')
  if not os.path.isfile(args.text):
    raise ValueError(f'--text={args.text!r} is not a file; the study reads the book corpus.')
  # Every configuration first: a wrong field is one sentence before anything trains.
  configs = {name: book_config(name, args) for name in names}
  for name in names:
    for pairs in RECALL_PAIRS:
      recall_config(name, pairs, args)
  result = dict(
    model=MODEL,
    book_steps=args.steps,
    batch=args.batch,
    seq_length=args.seq_length,
    recall_steps=args.recall_steps,
    recall_pairs=list(RECALL_PAIRS),
    decode_context=DECODE_CONTEXT,
    machine=f'{os.cpu_count()} CPU cores, {jax.devices()[0].platform}',
    rows=[],
  )
  os.makedirs(args.out, exist_ok=True)  # only once every configuration was accepted
  for i, name in enumerate(names):
    started = time.perf_counter()
    print(f'[{i + 1}/{len(names)}] {name}: the book, {args.steps} steps', flush=True)
    workdir = _workdir(args, 'book', name)
    _train(configs[name], workdir)
    row = measure_book(name, workdir, args)
    for pairs in RECALL_PAIRS:
      print(f'[{i + 1}/{len(names)}] {name}: recall at {pairs} pairs', flush=True)
      workdir = _workdir(args, f'mqar_{pairs}', name)
      _train(recall_config(name, pairs, args), workdir)
      row[f'recall_{pairs}'] = measure_recall(workdir)
    row['seconds'] = round(time.perf_counter() - started, 1)
    print(mechanisms_report.row_line(row, row['seconds']), flush=True)
    result['rows'].append(row)
  with open(os.path.join(args.out, 'mechanisms.json'), 'w', encoding='utf-8') as f:
    json.dump(result, f, indent=1)
  mechanisms_report.save_figure(os.path.join(args.out, 'mechanisms.png'), result)
  print(mechanisms_report.markdown(result))
  return result


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--out', required=True, help='folder for the runs and mechanisms.json/.png')
  parser.add_argument('--text', default=BOOK, help='the book (plain UTF-8 text)')
  parser.add_argument('--mechanisms', default=','.join(MECHANISMS), help='comma-separated')
  parser.add_argument('--steps', type=int, default=300, help='training steps on the book')
  parser.add_argument('--batch', type=int, default=16, help='rows per step on the book')
  parser.add_argument('--seq_length', type=int, default=128, help='characters per row')
  parser.add_argument('--recall_steps', type=int, default=600, help='training steps on MQAR')
  args = parser.parse_args(argv)
  logging.use_absl_handler()
  logging.set_verbosity(logging.INFO)
  training.quiet_library_logs()
  return run(args)


if __name__ == '__main__':
  failures.run('python -m studies.mechanisms', main)
