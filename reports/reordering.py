"""The test sentence whose word order changes most between source and reference, chosen by a
stated rule (not for how its attention looks), and the command that draws its alignment.

    python reordering.py --workdir=runs/gru

The rule, on the evaluated test split (WORKDIR/eval/samples.jsonl, in the split's order):
1. link words with a word-for-word table learned from the training pairs alone
   (`data.word_alignment.word_table`, Dice co-occurrence): a source word that occurs once is
   linked to its table word where that occurs once in the reference;
2. count the pairs of links whose order differs between the two sides (`crossings`);
3. among sources of `--min_words` to `--max_words` words, take the most crossings; ties go to
   more links, then to the earlier sentence.
The model's output plays no part in the choice. The command printed draws the example's
cross-attention with `eval.py --split='test[I:I+1]' --output=eval_alignment`.
"""

import json
import os

from data.readers import tsv_parallel
from data.word_alignment import aligned_positions, crossings, word_table
from training import layout
from training.config import read_config


def training_pairs(config) -> list[tuple[str, str]]:
  """The training split the workdir's run was trained on (`tsv_parallel`'s cut)."""
  dataset = config.dataset
  if dataset.name != 'tsv_parallel':
    raise ValueError(
      f'config.dataset.name={dataset.name!r}: the rule needs a parallel TSV (tsv_parallel).'
    )
  splits = tsv_parallel.corpus_splits(dataset.tsv_path, dataset.validation_path, dataset.test_path)
  return [(source, target) for _, source, target in splits['train']]


def choose(samples: list[dict], table: dict[str, str], min_words: int, max_words: int) -> dict:
  """The sample the rule picks, with its links and crossings added."""
  best, best_key = None, None
  for position, sample in enumerate(samples):
    if not min_words <= len(sample['source'].split()) <= max_words:
      continue
    links = aligned_positions(sample['source'], sample['reference'], table)
    key = (crossings(links), len(links), -position)
    if best_key is None or key > best_key:
      best, best_key = dict(sample, position=position, links=links, crossings=key[0]), key
  if best is None:
    raise ValueError(f'No test source has {min_words} to {max_words} words.')
  return best


def report(workdir: str, min_words: int = 5, max_words: int = 10) -> dict:
  """The sample the rule picks from `workdir`'s evaluation (`choose`), printed with the eval.py
  command that draws its alignment; FileNotFoundError if eval.py has not evaluated `workdir`."""
  path = layout.eval_file(workdir, layout.SAMPLES_JSONL)
  if not os.path.isfile(path):
    raise FileNotFoundError(f'--workdir={workdir}: no {path}; run eval.py --workdir first.')
  with open(path, encoding='utf-8') as f:
    samples = [json.loads(line) for line in f]
  table = word_table(training_pairs(read_config(workdir)))
  chosen = choose(samples, table, min_words, max_words)
  i = chosen['position']
  print(f'test example {i}: {chosen["crossings"]} crossings over {len(chosen["links"])} links')
  print(f'  source:    {chosen["source"]}\n  reference: {chosen["reference"]}')
  print(
    f"python eval.py --workdir={workdir} --split='test[{i}:{i + 1}]' "
    '--output=eval_alignment --num_heatmaps=1'
  )
  return chosen


if __name__ == '__main__':
  raise SystemExit('python -m reports.reordering is now python reordering.py, with the same flags.')
