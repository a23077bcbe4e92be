"""What each attention variant costs a trained language model, and what fine-tuning gets back.

    python -m studies.attention_swaps --checkpoint=SmolLM2-135M-Instruct \
        --text=../shared/data/books/pride_and_prejudice.txt --out=runs/swaps_smollm2

For each variant of `VARIANTS` (the unchanged model among them, as the control), one train.py
run of configs/pretrained_lm.py:CHECKPOINT in OUT/NAME, started from the checkpoint's weights
with only `config.model` changed, all with one budget (`--steps` of `--batch` rows of
`--seq_length` tokens, the config's AdamW): the validation bits per token before any training
(step 0: the trained weights under the new attention), every `--eval_every` steps (the recovery
curve) and at the end, then the test split's of the final weights. The variants researchers
convert trained models to:

- a sliding window of `--window` tokens, with and without 4 kept first tokens (StreamingLLM's
  attention sinks, Xiao et al. 2024), binding when the window is shorter than `--seq_length`;
- multi-query attention (one key/value head) made by mean-pooling each group of key/value heads
  (Ainslie et al. 2023), and from the group's first head and from a random one, their
  alternatives (`config.init_kv_pooling`, training/kv_heads.py);
- sigmoid attention (Ramapuram et al. 2025) and linear attention (Katharopoulos et al. 2020),
  which replace the softmax the weights were trained with;
- linear attention with Hedgehog's learned feature maps, fine-tuned from the identity maps, and
  LoLCATs' recipe (Zhang et al. 2024): first `--transfer_steps` of attention transfer
  (studies/attention_transfer.py, only the maps train, in OUT/NAME_transfer), then the same
  fine-tune as every other variant.

Writes OUT/swaps.json and OUT/swaps.png (validation bits per token against steps, one curve per
variant) and prints the table. `--variants` runs some of them; a finished variant's run (its
workdir complete) is read, not trained again.
"""

import argparse
import json
import os
import re
import subprocess
import sys

from absl import logging
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

from reports import runs
import sources
import training
from training import evaluation, failures, restore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where train.py is

KEPT_FIRST = 4  # first tokens kept visible past the window (StreamingLLM keeps 4)
# name -> `config.model` changes ('window' stands for --window) and the key/value head pooling.
VARIANTS = {
  'unchanged': {},
  'sliding window': dict(window='window'),
  'sliding window + 4 first tokens': dict(window='window', sink_tokens=KEPT_FIRST),
  'multi-query (mean-pooled)': dict(num_kv_heads=1, pooling='mean'),
  'multi-query (first head)': dict(num_kv_heads=1, pooling='first'),
  'multi-query (random head)': dict(num_kv_heads=1, pooling='random'),
  'sigmoid': dict(attention='sigmoid'),
  'linear': dict(attention='linear'),
  'linear (Hedgehog)': dict(attention='linear', feature_map='hedgehog'),
  'linear (Hedgehog) after attention transfer': dict(
    attention='linear', feature_map='hedgehog', transfer=True
  ),
}


def overrides(args, name: str) -> dict[str, object]:
  """train.py's `--config.FIELD=value` overrides of configs/pretrained_lm.py:CHECKPOINT for
  variant `name`: its `config.model` changes and the study's budget."""
  changes = dict(VARIANTS[name])
  pooling = changes.pop('pooling', '')
  changes.pop('transfer', None)  # train_variant's first step
  if changes.get('window') == 'window':
    changes['window'] = args.window
  fields = {f'model.{field}': value for field, value in changes.items()}
  fields.update(
    {
      'dataset.text_path': os.path.abspath(args.text),
      'dataset.seq_length': args.seq_length,
      'dataset.batch_size': args.batch,
      'dataset.eval_batch_size': args.batch,
      'num_train_steps': args.steps,
      'eval_every_steps': args.eval_every,
      'checkpoint_every_steps': args.steps,
      'num_eval_decode': 0,
      'eval_at_start': True,
      'learning_rate': args.learning_rate,
    }
  )
  if pooling:
    fields['init_kv_pooling'] = pooling
  return fields


def _complete(workdir: str) -> bool:
  return bool(restore.reader(os.path.join(workdir, 'checkpoints')).steps())


def train_variant(args, name: str) -> str:
  """Variant `name`'s workdir, trained with train.py in a process of its own unless complete
  (after its attention transfer, in a process of its own too, where the variant has one)."""
  workdir = os.path.abspath(os.path.join(args.out, re.sub(r'\W+', '_', name).strip('_')))
  # train.py runs from the repository root: a checkpoint that is a path is given whole.
  checkpoint = (
    os.path.abspath(args.checkpoint) if os.path.exists(args.checkpoint) else args.checkpoint
  )
  fields = overrides(args, name)
  if VARIANTS[name].get('transfer'):
    fields['init_from'] = transferred = f'{workdir}_transfer'
    if not _complete(transferred):
      print(f'{name}: {args.transfer_steps} steps of attention transfer', flush=True)
      _run(
        name,
        ['studies.attention_transfer', f'--checkpoint={checkpoint}', f'--workdir={transferred}']
        + [f'--text={os.path.abspath(args.text)}', f'--steps={args.transfer_steps}']
        + [f'--batch={args.batch}', f'--seq_length={args.seq_length}'],
        'the attention transfer failed',
      )
  if not _complete(workdir):
    print(f'{name}: training {args.steps} steps in {workdir}', flush=True)
    command = ['train', f'--workdir={workdir}']
    command.append(f'--config={os.path.join(ROOT, "configs", "pretrained_lm.py")}:{checkpoint}')
    command += [f'--config.{field}={value}' for field, value in fields.items()]
    _run(name, command, f'train.py failed; its log is {workdir}/train.log')
  return workdir


def _run(name: str, module_and_args: list[str], failed: str) -> None:
  """`python -m MODULE ARGS` under Attend's allocator, from the repository root."""
  command = [sys.executable, '-m', 'training.allocator', *module_and_args]
  if subprocess.run(command, cwd=ROOT, check=False).returncode:
    raise ValueError(f'{name}: {failed}.')


def score(args, name: str, workdir: str) -> dict:
  """Variant `name`'s validation curve, and the test split's bits per token of its final
  weights."""
  source = sources.resolve(workdir, checkpoint='latest')
  final = source.restore()
  run = runs.load_run(workdir)
  curve = [
    (line['step'], line['bits_per_token']) for line in run.lines[final.config.dataset.eval_split]
  ]
  test = evaluation.split_metrics(
    final.state, source.task, 'test', batch_size=args.batch, mesh=final.mesh
  )
  return dict(
    name=name,
    workdir=workdir,
    curve=curve,
    before=curve[0][1],
    after=curve[-1][1],
    test_after=test['bits_per_token'],
  )


def save_figure(path: str, result: dict, title: str) -> None:
  """Validation bits per token against fine-tuning steps, one curve per variant."""
  figure = Figure(figsize=(8, 5), dpi=120)
  axes = figure.add_subplot()
  window = f'sliding window of {result["window"]}'
  for row in result['variants']:
    steps, bits = zip(*row['curve'])
    label = row['name'].replace('sliding window', window)
    axes.plot(steps, bits, marker='o', markersize=3, label=label)
  axes.set_yscale('log')
  axes.yaxis.set_major_locator(FixedLocator([4, 5, 6, 8, 10, 15, 20, 30, 40]))
  axes.yaxis.set_major_formatter(ScalarFormatter())
  axes.yaxis.set_minor_formatter(NullFormatter())
  axes.set(xlabel='fine-tuning steps', ylabel='validation bits per token (log scale)', title=title)
  axes.grid(True, which='both', alpha=0.3)
  axes.legend(fontsize=8)
  figure.tight_layout()
  FigureCanvasAgg(figure).print_png(path)


def markdown(result: dict) -> str:
  """The table: bits per token before and after the budget, and the test split's after."""
  steps = result['steps']
  lines = [
    f'| variant | validation before | after {steps} steps | test after {steps} steps |',
    '|---|---|---|---|',
  ]
  lines += [
    f'| {r["name"]} | {r["before"]:.2f} | {r["after"]:.2f} | {r["test_after"]:.2f} |'
    for r in result['variants']
  ]
  return '\n'.join(lines)


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--checkpoint', required=True, help='what models.pretrained.read reads')
  parser.add_argument('--text', required=True, help='a plain UTF-8 text file')
  parser.add_argument('--out', required=True, help='the folder for the runs and swaps.json/.png')
  parser.add_argument('--variants', default=','.join(VARIANTS), help='comma-separated names')
  parser.add_argument('--steps', type=int, default=60, help='fine-tuning steps of every variant')
  parser.add_argument('--eval_every', type=int, default=10, help='steps between validations')
  parser.add_argument('--batch', type=int, default=4, help='rows per step')
  parser.add_argument('--seq_length', type=int, default=256, help='tokens per row')
  parser.add_argument('--window', type=int, default=64, help='the sliding window, in tokens')
  parser.add_argument('--learning_rate', type=float, default=1e-4, help='peak, cosine decay')
  parser.add_argument(
    '--transfer_steps', type=int, default=100, help='attention transfer steps (LoLCATs)'
  )
  args = parser.parse_args(argv)
  # Each run's progress lines as train.py shows them, without Orbax's chatter.
  logging.use_absl_handler()
  logging.set_verbosity(logging.INFO)
  training.quiet_library_logs()
  names = [name for name in args.variants.split(',') if name]
  unknown = [name for name in names if name not in VARIANTS]
  if unknown:
    raise ValueError(f'--variants: {unknown[0]!r} is not one of {list(VARIANTS)}.')
  if not 0 < args.window < args.seq_length:
    raise ValueError(
      f'--window={args.window} must be in 1 .. --seq_length - 1 = {args.seq_length - 1}, so '
      'that it binds.'
    )
  os.makedirs(args.out, exist_ok=True)
  result = dict(
    checkpoint=args.checkpoint,
    text=args.text,
    steps=args.steps,
    batch=args.batch,
    seq_length=args.seq_length,
    window=args.window,
    learning_rate=args.learning_rate,
    transfer_steps=args.transfer_steps,
  )
  # Every run first, each in its own process; then the scores here, so that this process holds
  # no model while a run trains.
  workdirs = [train_variant(args, name) for name in names]
  result['variants'] = [score(args, name, workdir) for name, workdir in zip(names, workdirs)]
  with open(os.path.join(args.out, 'swaps.json'), 'w', encoding='utf-8') as f:
    json.dump(result, f, indent=1)
  name = os.path.basename(os.path.normpath(args.checkpoint))
  title = (
    f'{name}: attention swapped, then {args.steps} steps of {args.batch} x {args.seq_length} tokens'
  )
  save_figure(os.path.join(args.out, 'swaps.png'), result, title)
  print(markdown(result))
  return result


if __name__ == '__main__':
  failures.run('python -m studies.attention_swaps', main)  # a user's error: one sentence
