"""Copy accuracy: whether a translation carries the source's untranslatable items over intact.

An item is what `data.placeholders.ITEMS` finds: a printf placeholder, an option, an `@NAME@`
substitution, an identifier or an upper-case ASCII word, which a translator copies rather than
translates. A placeholder is data the model must move by attention: `%s` reordered wrongly, or
split into `% s`, breaks the program that prints the message.

`copy_items(text)` is the multiset of such items; an output copies correctly when its multiset
equals the reference's. `copy_accuracy` is the share of outputs that do, over the examples whose
reference holds at least one item (the others have nothing to copy).
"""

import collections

from data.placeholders import ITEMS


def copy_items(text: str) -> collections.Counter:
  """The multiset of placeholders and literal identifiers in `text`."""
  return collections.Counter(match.group(0) for match in ITEMS.finditer(text))


def copy_accuracy(hypotheses: list[str], references: list[str]) -> tuple[float, int]:
  """(share of outputs whose items equal their reference's, how many references hold items);
  the share is 0.0 when no reference holds one."""
  pairs = [(h, r) for h, r in zip(hypotheses, references, strict=True) if copy_items(r)]
  if not pairs:
    return 0.0, 0
  return sum(copy_items(h) == copy_items(r) for h, r in pairs) / len(pairs), len(pairs)
