"""Fault injection into real train.py / eval.py runs: prints the table of docs/workdir_integrity.md.

  python tests/workdir_faults.py [SCRATCH_DIR]

Each fault is a user's mistake or an accident on a tiny run (a Transformer on 40 sentence pairs).
For each: the exit status, the last line on the terminal, whether any traceback reached the
terminal, and whether a workdir was damaged (a refused run must leave it byte for byte as it was;
an accident must leave its checkpoints readable). The full-disk fault needs a 3 MB tmpfs (root).
Takes about 5 minutes on 2 CPU cores.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = dict(
  num_train_steps=4,
  log_every_steps=2,
  checkpoint_every_steps=2,
  eval_every_steps=0,
  num_eval_decode=0,
  selection_metric='',  # the task's own: configs/tsv.py's chrF needs decoded outputs
  warmup_steps=2,
  **{
    'model.num_layers': 1,
    'model.d_model': 16,
    'model.num_heads': 2,
    'model.d_ff': 32,
    'model.max_length': 64,
    'dataset.batch_size': 8,
    'dataset.eval_batch_size': 8,
    'dataset.bucket_step': 48,
  },
)


def snapshot(path: str) -> dict:
  found = {}
  for root, _, files in os.walk(path):
    for name in files:
      with open(os.path.join(root, name), 'rb') as f:
        found[os.path.relpath(os.path.join(root, name), path)] = hashlib.sha256(
          f.read()
        ).hexdigest()
  return found


def truncate_checkpoint(workdir: str, step: int) -> None:
  """Cuts every file of checkpoint `step` to half its size (a save interrupted mid-write)."""
  for root, _, files in os.walk(os.path.join(workdir, 'checkpoints', str(step))):
    for name in files:
      path = os.path.join(root, name)
      with open(path, 'rb') as f:
        data = f.read()
      with open(path, 'wb') as f:
        f.write(data[: len(data) // 2])


def train_args(workdir: str, corpus: str, data_dir: str, **overrides) -> list[str]:
  fields = {**TINY, 'dataset.tsv_path': corpus, 'dataset.data_dir': data_dir, **overrides}
  return [
    'train.py',
    '--config=configs/tsv.py',
    f'--workdir={workdir}',
    *[f'--config.{key}={value}' for key, value in fields.items()],
  ]


def run(args: list[str]) -> tuple[int, str]:
  result = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True)
  return result.returncode, result.stdout + result.stderr


def last_line(output: str) -> str:
  lines = [line for line in output.strip().splitlines() if line.strip()]
  return lines[-1] if lines else ''


def readable(workdir: str) -> bool:
  """Whether eval.py restores a checkpoint of (a copy of) `workdir`."""
  copy = tempfile.mkdtemp()
  shutil.copytree(workdir, copy, dirs_exist_ok=True)
  status, _ = run(
    ['eval.py', f'--workdir={copy}', '--max_examples=1', '--num_heatmaps=0', '--split=validation']
  )
  shutil.rmtree(copy)
  return status == 0


def main(scratch: str) -> None:
  os.makedirs(scratch, exist_ok=True)
  corpus = os.path.join(scratch, 'pairs.txt')
  with open(corpus, 'w', encoding='utf-8') as f:
    f.writelines(f'He is {n} years old.\tIl a {n} ans.\tCC-BY\n' for n in range(40))
  data_dir = os.path.join(scratch, 'tfds')
  good = os.path.join(scratch, 'good')
  status, output = run(train_args(good, corpus, data_dir))
  assert status == 0, output
  rows = []

  def fault(
    name: str,
    args: list[str],
    workdirs: list[str],
    *,
    expect_status: int = 1,
    kept=None,
    check=None,
    shows: str = '',
  ) -> None:
    """Runs one fault; `workdirs` must come out byte for byte, `kept` (a workdir) readable; the
    row quotes the terminal's last line, or its one line that `shows` (a run that goes on)."""
    before = {path: snapshot(path) if os.path.isdir(path) else None for path in workdirs}
    status, output = run(args)
    damaged = [
      path for path in workdirs if (snapshot(path) if os.path.isdir(path) else None) != before[path]
    ]
    if kept is not None and not readable(kept):
      damaged.append(kept)
    ok = status == expect_status and not damaged and (check is None or check(output))
    line = next(
      (line for line in output.splitlines() if shows and shows in line), last_line(output)
    )
    rows.append((name, status, line, 'Traceback' in output, damaged, ok))
    print(rows[-1], flush=True)

  def copy(name: str) -> str:
    return shutil.copytree(good, os.path.join(scratch, name))

  fault(
    'unknown model field value `--config.model.score=dott`',
    train_args(good, corpus, data_dir, **{'model.score': 'dott'}),
    [good],
  )
  fault(
    'a model size the checkpoint refuses `--config.model.d_model=32`',
    train_args(good, corpus, data_dir, **{'model.d_model': 32}),
    [good],
  )
  tuned = os.path.join(scratch, 'tuned')
  fault(
    '`init_from` of another model size (`d_ff=64`)',
    train_args(tuned, corpus, data_dir, init_from=good, **{'model.d_ff': 64}),
    [good, tuned],
  )
  fault(
    'unknown config field `--config.model.scroe=dot`',
    train_args(good, corpus, data_dir, **{'model.scroe': 'dot'}),
    [good],
  )
  fault(
    'wrong `--config` path', ['train.py', '--config=configs/nope.py', f'--workdir={good}'], [good]
  )
  fault(
    'bad config argument `configs/memn2n_babi.py:qa99`',
    ['train.py', '--config=configs/memn2n_babi.py:qa99', f'--workdir={good}'],
    [good],
  )

  # Two train.py on one workdir: the second is refused while the first trains on.
  raced = copy('raced')
  first = subprocess.Popen(
    [sys.executable, *train_args(raced, corpus, data_dir, num_train_steps=400)],
    cwd=ROOT,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
  )
  for line in first.stdout:
    if 'Compiling the train step' in line:
      break
  fault(
    'a second train.py on a workdir in use',
    train_args(raced, corpus, data_dir, num_train_steps=400),
    [],
  )
  first.stdout.close()
  first.kill()  # kill -9: the lock file stays behind
  first.wait()
  fault(
    'a lock left by a killed run (kill -9), then the same command',
    train_args(raced, corpus, data_dir, num_train_steps=6),
    [],
    expect_status=0,
    kept=raced,
    shows='no longer running',
    check=lambda out: 'no longer running' in out,
  )

  damaged = copy('damaged')
  truncate_checkpoint(damaged, 4)
  skipped = lambda out: out.count('Skipping checkpoint 4') == 1
  fault(
    'truncated newest checkpoint: eval.py',
    [
      'eval.py',
      f'--workdir={damaged}',
      '--checkpoint=latest',
      '--max_examples=1',
      '--num_heatmaps=0',
    ],
    [os.path.join(damaged, 'checkpoints')],
    expect_status=0,
    check=skipped,
    shows='Skipping checkpoint',
  )
  fault(
    'truncated newest checkpoint: `init_from`',
    train_args(
      os.path.join(scratch, 'from_damaged'), corpus, data_dir, init_from=damaged, num_train_steps=1
    ),
    [damaged],
    expect_status=0,
    check=skipped,
    shows='Skipping checkpoint',
  )

  images = os.path.join(scratch, 'images')
  rng = np.random.default_rng(0)
  for label in ('a', 'b'):
    os.makedirs(os.path.join(images, label))
    for i in range(5):
      Image.fromarray(rng.integers(0, 256, (16, 16, 3), np.uint8)).save(
        os.path.join(images, label, f'{i}.png')
      )
  png = os.path.join(images, 'a', '3.png')
  with open(png, 'rb') as f:
    data = f.read()
  with open(png, 'wb') as f:
    f.write(data[: len(data) // 2])
  vit = os.path.join(scratch, 'vit')
  fault(
    'a truncated PNG in an image folder',
    [
      'train.py',
      '--config=configs/vit_folder.py',
      f'--config.dataset.folder={images}',
      f'--config.dataset.data_dir={data_dir}',
      f'--workdir={vit}',
    ],
    [vit],
    check=lambda out: png in last_line(out),
  )

  nan = copy('nan')
  fault(
    'a non-finite loss (`learning_rate=1e15`)',
    train_args(
      nan,
      corpus,
      data_dir,
      learning_rate=1e15,
      schedule='constant',
      warmup_steps=0,
      grad_clip=1e9,
      num_train_steps=10,
    ),
    [os.path.join(nan, 'checkpoints')],
    kept=nan,
    check=lambda out: 'newest checkpoint is step 4' in last_line(out),
  )

  binary = os.path.join(scratch, 'book.bin')
  with open(binary, 'wb') as f:
    f.write(bytes(range(256)) * 64)
  gpt = os.path.join(scratch, 'gpt')
  fault(
    'a binary file as gpt_text `dataset.text_path`',
    [
      'train.py',
      '--config=configs/gpt_text.py',
      f'--config.dataset.text_path={binary}',
      f'--workdir={gpt}',
    ],
    [gpt],
    check=lambda out: 'text_path' in last_line(out),
  )

  for flag in ('--num_heatmaps=-1', '--max_examples=-3', '--average_last=5'):
    fault(f'eval.py `{flag}`', ['eval.py', f'--workdir={good}', flag], [good])
  empty = os.path.join(scratch, 'empty')
  os.makedirs(empty)
  shutil.copy(os.path.join(good, 'config.json'), empty)
  fault('eval.py on a workdir without checkpoints', ['eval.py', f'--workdir={empty}'], [empty])

  disk = os.path.join(scratch, 'disk')
  os.makedirs(disk, exist_ok=True)
  if subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=3m', 'tmpfs', disk]).returncode == 0:
    try:
      full = os.path.join(disk, 'run')
      fault(
        'a full disk (a 3 MB filesystem)',
        train_args(
          full,
          corpus,
          data_dir,
          num_train_steps=200,
          checkpoint_every_steps=1,
          keep_checkpoints=1000,
        ),
        [],
        kept=full,
        check=lambda out: 'is full' in last_line(out),
      )
    finally:
      time.sleep(1)
      subprocess.run(['umount', disk], check=False)

  print(
    '\n| fault | exit | what the terminal ends with | traceback on the terminal | '
    'workdir damaged |\n|---|---|---|---|---|'
  )
  for name, status, line, traceback, damaged, _ in rows:
    print(
      f'| {name} | {status} | `{line}` | {"yes" if traceback else "no"} | '
      f'{"yes" if damaged else "no"} |'
    )
  print(
    f'\n{len(rows)} faults injected, {sum(bool(r[4]) for r in rows)} workdirs damaged, '
    f'{sum(r[3] for r in rows)} tracebacks on the terminal; '
    f'{sum(not r[5] for r in rows)} not as expected.'
  )


if __name__ == '__main__':
  main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix='attend-faults-'))
