"""reports/reordering.py and data/word_alignment.py: the stated rule that picks the docs'
alignment sentence, on hand-made sentences."""

from data.word_alignment import aligned_positions, crossings
from reports import reordering

TABLE = {'red': 'rouge', 'file': 'fichier', 'the': 'le', 'open': 'ouvrir', 'a': 'un'}


def test_links_are_the_words_the_table_is_sure_of():
  # 'the' occurs twice in the source: no link; 'open' has no table word in the reference.
  links = aligned_positions('the red file the open', 'le fichier rouge', TABLE)
  assert links == [(1, 2), (2, 1)]
  assert crossings(links) == 1  # red file -> fichier rouge
  assert crossings([(0, 0), (1, 1), (2, 2)]) == 0
  assert crossings([(0, 2), (1, 1), (2, 0)]) == 3  # every pair reversed


def test_the_rule_takes_most_crossings_then_most_links_then_the_first():
  samples = [
    {'source': 'open a file now', 'reference': 'ouvrir un fichier'},  # 0 crossings
    {'source': 'the red file here', 'reference': 'le fichier rouge'},  # 1 crossing, 3 links
    {'source': 'red file here now', 'reference': 'fichier rouge'},  # 1 crossing, 2 links
    {'source': 'a red file here', 'reference': 'un fichier rouge'},  # ties with the second
    {'source': 'red file', 'reference': 'fichier rouge'},  # too short
  ]
  chosen = reordering.choose(samples, TABLE, min_words=3, max_words=10)
  assert chosen['position'] == 1 and chosen['crossings'] == 1 and len(chosen['links']) == 3
