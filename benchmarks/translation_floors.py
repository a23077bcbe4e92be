"""The floors a translation model must clear on a parallel TSV, on the split Attend trains on.

    python -m benchmarks.translation_floors --tsv=../shared/data/translation/software_en_fr.tsv

Two outputs that need no model, scored as Attend scores its translations
(`tasks.translation.text_scores`: sacreBLEU BLEU and chrF against the raw references, copy
accuracy) on the test split that `tsv_parallel` cuts (the same function, so the same sentences):
- copy: the English source unchanged (software messages share placeholders, options, numbers and
  loanwords with their translations);
- word for word: each source word replaced by the target word it co-occurs with most strongly in
  the training pairs (Dice coefficient over sentence co-occurrence), unknown words copied.
"""

import argparse
import json

from data.readers import tsv_parallel
from data.word_alignment import word_table
from tasks.translation import text_scores


def floors(path: str) -> dict[str, dict[str, float]]:
  splits = tsv_parallel.corpus_splits(path)
  train = [(source, target) for _, source, target in splits['train']]
  test = [(source, target) for _, source, target in splits['test']]
  references = [target for _, target in test]
  table = word_table(train)
  word_for_word = [' '.join(table.get(w, w) for w in source.split()) for source, _ in test]
  return {
    'copy the source': text_scores([source for source, _ in test], references),
    'word for word': text_scores(word_for_word, references),
    'test examples': {'count': len(test)},
  }


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--tsv', required=True, help='english<TAB>other lines (tsv_parallel)')
  parser.add_argument('--json', default='', help='also write the table here')
  args = parser.parse_args(argv)
  table = floors(args.tsv)
  print(f'{args.tsv}: {table["test examples"]["count"]} test examples')
  print('| floor | BLEU | chrF | copy accuracy |\n|---|---|---|---|')
  for name, row in table.items():
    if 'bleu' in row:
      print(
        f'| {name} | {row["bleu"]:.1f} | {row["chrf"]:.1f} | '
        + (
          f'{100 * row["copy_accuracy"]:.1f}% (of {row["copy_examples"]:.0f}) |'
          if 'copy_accuracy' in row
          else 'nothing to copy |'
        )
      )
  if args.json:
    with open(args.json, 'w', encoding='utf-8') as f:
      json.dump(table, f, indent=1)
  return table


if __name__ == '__main__':
  main()
