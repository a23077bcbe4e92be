"""benchmarks/translation_floors.py: the word table on hand-made pairs, and the floors end to end
on a small TSV (the real corpus is measured in docs/translation.md)."""

import numpy as np
import pytest

from benchmarks import translation_floors
from data import word_alignment


def test_word_table_picks_the_strongest_co_occurrence():
  pairs = [('the cat', 'le chat'), ('the dog', 'le chien'), ('a cat', 'un chat')]
  table = word_alignment.word_table(pairs)
  assert table['cat'] == 'chat' and table['dog'] == 'chien' and table['the'] == 'le'
  assert table['a'] == 'un'


def test_floors_score_copy_and_word_for_word(tmp_path):
  """On pairs that are word-for-word translations (random word orders, a placeholder kept), the
  table recovers every word: its floor scores 100, copying the source far less."""
  words = dict(
    file='fichier', not_='pas', found='trouvé', open='ouvrir', read='lire', disk='disque'
  )
  rng = np.random.default_rng(0)
  lines = []
  for _ in range(120):
    chosen = rng.choice(list(words), size=4, replace=False)
    source = ' '.join(w.rstrip('_') for w in chosen) + ' %s'
    lines.append(f'{source}\t{" ".join(words[w] for w in chosen)} %s')
  path = tmp_path / 'pairs.tsv'
  path.write_text('\n'.join(lines) + '\n', encoding='utf-8')
  table = translation_floors.main([f'--tsv={path}'])
  count = table['test examples']['count']
  assert count >= 1
  copy, word_for_word = table['copy the source'], table['word for word']
  assert word_for_word['bleu'] == pytest.approx(100.0) and word_for_word['copy_accuracy'] == 1.0
  assert copy['bleu'] < 30 and copy['copy_accuracy'] == 1.0 and copy['copy_examples'] == count
