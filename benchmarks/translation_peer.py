"""Attend against Joey NMT on a parallel TSV: the same split, subword vocabulary and time budget.

    make joeynmt   # Joey NMT 2.3.0 in its own environment (its pins conflict with Attend's)
    python -m benchmarks.translation_peer \
        --tsv=../shared/data/translation/software_en_fr.tsv --workdir=runs/peer

For each model (`--models`, default both): Attend trains its config as shipped (`configs/tsv.py`,
the Transformer; `configs/tsv_gru.py`, the GRU with Bahdanau's attention) with `train.py`, timed
from start to exit, and evaluates it with `eval.py` (greedy, the test split). Joey NMT then trains
the model of the same shape on the same training pairs, cut into the same SentencePiece pieces
(the model Attend's run trained on the training split), for the same wall time (`train.py`'s, its
own validations included), and is stopped there; its best checkpoint by chrF on 256 validation
sentences (Attend selects by the same) translates the test split greedily. Both outputs are
scored by `tasks.translation.text_scores` against the raw references. Run the benchmark on a quiet
machine: the budget is wall time.

Settings shared with Attend's configs: layers, widths, heads, dropout, label smoothing 0.1,
gradient clipping at 1.0, Adam (betas 0.9/0.98 for the Transformer), the peak learning rate and its
warm-up, 64 sentences a batch, training pairs up to 64 pieces a side, post-norm Transformer layers,
the output layer tied to the target embedding; where Attend's config protects items
(`config.dataset.protect_items`), Joey reads the same tagged text and its outputs' tags are
replaced by their sources' items as Attend's are. Where Joey differs: its RNN decoder feeds the
previous attentional vector into the cell (input feeding) and has no learning-rate warm-up, and
its loss is summed per sentence (Joey's default normalisation), Attend's averaged per token.

`--joey_set` changes Joey's training fields from these matched settings, by Joey's own names, to
run Joey as its documentation would (e.g. `normalization=tokens`, `clip_grad_norm=null`, another
`learning_rate`); each setting keeps its folder (joey_gru_normalization=tokens) and its row in
results.json beside the matched one. `updates=N` gives Joey a budget of N steps instead of
Attend's wall time, which a busy machine does not change. `--joey_recipe` starts Joey from the
training settings of its own recipe for a real corpus instead (`JOEY_RECIPES` in
benchmarks/joey_config.py, which cites them); `--joey_set` then changes those, e.g. a learning
rate of a small search:

    python -m benchmarks.translation_peer --tsv=... --models=gru --joey_recipe \
        --joey_set=learning_rate=0.001,updates=2000
"""

import argparse
import importlib
import json
import os
from pathlib import Path
import re
import signal
import subprocess
import sys
import time

import sentencepiece as spm

from benchmarks.joey_config import JOEY_RECIPES, joey_config, parse_changes
from data.placeholders import protect_pair, restore, source_items
from data.readers import tsv_parallel
from tasks.translation import text_scores
from training import layout

REPO = Path(__file__).resolve().parent.parent
JOEY_PYTHON = REPO / '.venv-joeynmt' / 'bin' / 'python'
ATTEND_CONFIGS = {'transformer': 'configs/tsv.py', 'gru': 'configs/tsv_gru.py'}


# How Joey's train.log names each step it logs (every `logging_freq` steps).
JOEY_STEP = re.compile(r'Step:\s+(\d+)')


def write_joey_inputs(
  tsv: str, spm_model: Path, out: Path, dev_sentences: int, protect_items: bool = False
) -> tuple[list[str], list[list[str]]]:
  """Writes the split Attend trains on as Joey's plain files (validation: its first
  `dev_sentences`) and Joey's vocabulary (the pieces of `spm_model`); returns the raw test
  references and, with `protect_items` (Attend's `config.dataset.protect_items`: both sides'
  items written as the same tags Attend trains on), each test source's items, else empty lists."""
  splits = tsv_parallel.corpus_splits(tsv)
  splits['validation'] = splits['validation'][:dev_sentences]
  out.mkdir(parents=True, exist_ok=True)
  for split, name in (('train', 'train'), ('validation', 'dev'), ('test', 'test')):
    pairs = [(row[1].replace('\n', ' '), row[2].replace('\n', ' ')) for row in splits[split]]
    if protect_items:
      pairs = [protect_pair(s, t) for s, t in pairs]
    for column, lang in ((0, 'src'), (1, 'trg')):  # file suffixes, any language pair
      lines = [pair[column] for pair in pairs]
      (out / f'{name}.{lang}').write_text('\n'.join(lines) + '\n', encoding='utf-8')
  pieces = spm.SentencePieceProcessor(model_file=str(spm_model))
  vocab = [
    pieces.id_to_piece(i)
    for i in range(pieces.get_piece_size())
    if not (pieces.is_control(i) or pieces.is_unknown(i))  # Joey adds its own specials
  ]
  (out / 'vocab.txt').write_text('\n'.join(vocab) + '\n', encoding='utf-8')
  items = [source_items(row[1]) if protect_items else [] for row in splits['test']]
  return [row[2] for row in splits['test']], items


def timed(command: list[str], log: Path, budget_s: float | None = None) -> float:
  """Runs `command` (output to `log`), stopped with SIGTERM after `budget_s`; returns wall s."""
  start = time.perf_counter()
  with open(log, 'w', encoding='utf-8') as f:
    process = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
      process.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
      os.killpg(process.pid, signal.SIGTERM)
      process.wait()
      return time.perf_counter() - start
  if process.returncode:
    raise RuntimeError(f'{" ".join(command[:4])} failed ({process.returncode}); see {log}')
  return time.perf_counter() - start


def attend_run(name: str, tsv: str, workdir: Path, budget_is_wall: bool = True) -> dict:
  """Trains and evaluates Attend's config for `name` (once: a finished run is read back).

  Where Joey's budget is Attend's wall time (`budget_is_wall`), a run this benchmark did not
  finish timing is refused; where Joey's budget is steps, it is resumed and its wall time, a part
  only, is not recorded (None)."""
  record = workdir / 'peer_timing.json'
  resumed = workdir.exists() and not record.exists()
  if resumed and budget_is_wall:  # its wall time would be a part
    sys.exit(
      f'{workdir} holds a run this benchmark did not finish timing; remove it to time a new one.'
    )
  if not record.exists():
    workdir.parent.mkdir(parents=True, exist_ok=True)
    train = [sys.executable, 'train.py', f'--config={ATTEND_CONFIGS[name]}']
    train += [f'--config.dataset.tsv_path={tsv}', f'--workdir={workdir}']
    wall = timed(train, workdir.parent / f'{workdir.name}.train.log')
    timed([sys.executable, 'eval.py', f'--workdir={workdir}'], workdir / 'peer_eval.log')
    record.write_text(json.dumps({'train_wall_s': None if resumed else wall}))
  timing = json.loads(record.read_text())
  if budget_is_wall and timing['train_wall_s'] is None:
    sys.exit(f'{workdir} was resumed, so its wall time is unknown: give Joey updates=N steps.')
  metrics = json.loads(Path(layout.eval_file(str(workdir), layout.EVAL_METRICS_FILE)).read_text())
  config = json.loads((workdir / layout.CONFIG_FILE).read_text())
  return dict(
    timing,
    steps=config['num_train_steps'],
    config=config,
    **{k: metrics[k] for k in ('bleu', 'chrf', 'copy_accuracy', 'exact_match')},
  )


def joey_run(
  name: str, tsv: str, attend: dict, workdir: Path, out: Path, python: str, changes: dict
) -> dict:
  """Trains Joey NMT's `name` for Attend's wall time (or, where `changes` set Joey's `updates`,
  for that many steps) and scores its greedy test translations."""
  spm_model = Path(layout.vocab_dir(str(workdir))) / 'shared.spm.model'
  protected = attend['config']['dataset'].get('protect_items', False)
  references, items = write_joey_inputs(
    tsv, spm_model, out / 'data', attend['config']['num_eval_decode'], protected
  )
  config_path = out / 'config.yaml'  # JSON is YAML
  config = joey_config(name, attend['config'], out / 'data', spm_model, out / 'model', changes)
  config_path.write_text(json.dumps(config, indent=1))
  # A step budget does not depend on how busy the machine is; Joey stops itself after it.
  budget = None if 'updates' in changes else attend['train_wall_s']
  wall = timed(
    [python, '-m', 'joeynmt', 'train', str(config_path), '--skip-test'], out / 'train.log', budget
  )
  best = out / 'model' / 'best.ckpt'
  if not best.exists():
    raise RuntimeError(f'Joey NMT saved no checkpoint within {budget:.0f} s; see {out}/train.log')
  config['testing']['load_model'] = str(best)
  config_path.write_text(json.dumps(config, indent=1))
  command = [python, '-m', 'joeynmt', 'test', str(config_path), '--output-path', str(out / 'hyp')]
  timed(command, out / 'test.log')
  hypotheses = (out / 'hyp.test').read_text(encoding='utf-8').split('\n')[: len(references)]
  if protected:  # tags back to the items of their sources, as Attend's outputs are
    hypotheses = [restore(h, i) for h, i in zip(hypotheses, items, strict=True)]
  log = (out / 'train.log').read_text(encoding='utf-8')
  logged = JOEY_STEP.findall(log)
  return dict(
    train_wall_s=wall,
    best_step=int(best.resolve().stem),
    steps=int(logged[-1]),  # the last step Joey logged (every 100) before the budget stopped it
    validation_chrf=joey_validation_chrf(log),
    **text_scores(hypotheses, references),
  )


def joey_validation_chrf(log: str) -> dict[int, float]:
  """{step: chrF on Joey's validation sentences, 0-100} from Joey's train.log: each validation's
  result follows the last step logged before it (validations fall on logged steps)."""
  curve, step = {}, None
  for line in log.splitlines():
    if logged := JOEY_STEP.search(line):
      step = int(logged[1])
    elif (result := re.search(r'Evaluation result \(greedy\).*chrf:\s+([\d.]+)', line)) and step:
      curve[step] = round(100 * float(result[1]), 2)  # Joey prints 0-1 to 2 decimals
  return curve


def minutes(seconds: float | None) -> str:
  return 'resumed, not timed' if seconds is None else f'{seconds / 60:.1f} min'


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--tsv', required=True, help='english<TAB>other lines (tsv_parallel)')
  parser.add_argument('--workdir', default='runs/peer', help='runs and results go here')
  parser.add_argument('--models', default='transformer,gru', help='comma-separated')
  parser.add_argument('--joey_python', default=str(JOEY_PYTHON), help='its python: make joeynmt')
  parser.add_argument(
    '--joey_set',
    default='',
    help="Joey's training fields changed from the matched settings, e.g. "
    "'normalization=tokens,updates=2000' (updates: a step budget instead of Attend's wall time)",
  )
  parser.add_argument(
    '--joey_recipe',
    action='store_true',
    help="start Joey from its own recipe's training settings (JOEY_RECIPES) instead of the "
    'matched ones; --joey_set changes them further',
  )
  args = parser.parse_args(argv)
  try:
    changes = parse_changes(args.joey_set)
  except ValueError as error:
    sys.exit(str(error))
  # Each setting of Joey's keeps its own folder and row, beside the matched one.
  label = ' '.join(['recipe'] * args.joey_recipe + [args.joey_set]).strip()
  tag = '_recipe' * args.joey_recipe + ''.join(f'_{k}={v}' for k, v in changes.items())
  changes_for = {
    name: {**(JOEY_RECIPES[name] if args.joey_recipe else {}), **changes} for name in ATTEND_CONFIGS
  }
  if not Path(args.joey_python).exists():
    sys.exit(f'--joey_python: {args.joey_python} does not exist; run `make joeynmt` first.')
  root = Path(args.workdir)
  saved = root / 'results.json'  # one file for every model measured here, run by run
  read_saved = lambda: json.loads(saved.read_text()) if saved.exists() else {}  # noqa: E731
  names = args.models.split(',')
  if unknown := set(names) - set(ATTEND_CONFIGS):  # refused before anything trains
    sys.exit(f'--models: {sorted(unknown)} not among {sorted(ATTEND_CONFIGS)}.')
  for name in names:  # so is a --joey_set field Joey's section does not have
    module = importlib.import_module(ATTEND_CONFIGS[name].removesuffix('.py').replace('/', '.'))
    try:
      joey_config(name, module.get_config().to_dict(), Path(), Path(), Path(), changes_for[name])
    except ValueError as error:
      sys.exit(str(error))
  for name in names:
    step_budget = 'updates' in changes_for[name]
    attend = attend_run(name, args.tsv, root / f'attend_{name}', budget_is_wall=not step_budget)
    print(f'{name}: Attend trained in {minutes(attend["train_wall_s"])}', flush=True)
    joey = joey_run(
      name,
      args.tsv,
      attend,
      root / f'attend_{name}',
      root / f'joey_{name}{tag}',
      args.joey_python,
      changes_for[name],
    )
    results = read_saved()  # now: other settings of Joey's may have finished meanwhile
    row = results.setdefault(name, {})
    row['attend'] = {k: v for k, v in attend.items() if k != 'config'}
    row[f'joeynmt {label}'.strip()] = joey
    saved.write_text(json.dumps(results, indent=1))
  print('| model | toolkit | train wall | steps | BLEU | chrF | copy accuracy | exact |')
  print('|---|---|---|---|---|---|---|---|')
  for name, row in results.items():
    for toolkit, r in row.items():
      print(
        f'| {name} | {toolkit} | {minutes(r["train_wall_s"])} | {r["steps"]} | '
        f'{r["bleu"]:.1f} | {r["chrf"]:.1f} | {100 * r["copy_accuracy"]:.1f}% | '
        f'{100 * r["exact_match"]:.1f}% |'
      )
  return results


if __name__ == '__main__':
  main()
