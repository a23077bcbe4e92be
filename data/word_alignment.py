"""Word alignments that need no model: a word-for-word table learned from sentence co-occurrence,
and the word-order changes it shows between a sentence and its translation."""

import collections


def word_table(pairs: list[tuple[str, str]]) -> dict[str, str]:
  """Source word -> the target word with the highest Dice coefficient over training sentences."""
  source_count, target_count = collections.Counter(), collections.Counter()
  together = collections.defaultdict(collections.Counter)
  for source, target in pairs:
    source_words, target_words = set(source.split()), set(target.split())
    source_count.update(source_words)
    target_count.update(target_words)
    for word in source_words:
      together[word].update(target_words)
  # Ties go to the more frequent pair, then to the word itself: set order changes with Python's
  # string hashing, so without the last key the table would differ between processes.
  return {
    word: max(
      counts, key=lambda t: (2 * counts[t] / (source_count[word] + target_count[t]), counts[t], t)
    )
    for word, counts in together.items()
  }


def aligned_positions(source: str, target: str, table: dict[str, str]) -> list[tuple[int, int]]:
  """(source position, target position) of each source word that occurs once in `source` and
  whose table word occurs once in `target`: the links the table is sure of."""
  source_words, target_words = source.split(), target.split()
  links = []
  for i, word in enumerate(source_words):
    translation = table.get(word)
    if source_words.count(word) == 1 and translation and target_words.count(translation) == 1:
      links.append((i, target_words.index(translation)))
  return links


def crossings(links: list[tuple[int, int]]) -> int:
  """Pairs of links whose order differs between the two sides (0 = the same word order)."""
  return sum(
    1 for a, (i, j) in enumerate(links) for k, m in links[a + 1 :] if (k - i) * (m - j) < 0
  )
