"""Copy accuracy: whether a translation carries the source's untranslatable items over intact.

Software messages hold items a translator must copy, not translate, and often move: printf
placeholders (`%s`, `%1$s`, `%.250s`, `%lu`, binutils' `%pB`), command-line options (`--output`,
`-v`), autoconf-style `@NAME@` substitutions, identifiers with an underscore or an inner dot
(`max_wal_size`, `core.editor`) and upper-case ASCII words (`SELECT`, `WAL`). A placeholder is data
the model must move by attention: `%s` reordered wrongly, or split into `% s`, breaks the program
that prints the message.

`copy_items(text)` is the multiset of such items; an output copies correctly when its multiset
equals the reference's. `copy_accuracy` is the share of outputs that do, over the examples whose
reference holds at least one item (the others have nothing to copy).
"""

import collections
import re

# One alternative per kind of item. Placeholders first, so that `%s` is not read as anything else;
# `%%` (a literal percent sign) is an item too: dropping it changes the printed text.
_ITEMS = re.compile(
  r'|'.join(
    (
      r'%%',
      r"%(?:\d+\$)?[-+ #0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|ll|[hlLqjzt])?(?:p[A-Za-z]|[A-Za-z])",
      r'(?<![\w-])--?[A-Za-z][A-Za-z0-9_-]*',  # options, up to '=' (their METAVAR is translated)
      r'@[A-Za-z_]+@',
      r'\b[A-Za-z][A-Za-z0-9]*(?:[._][A-Za-z0-9]+)*_[A-Za-z0-9_.]*\b',  # with an underscore
      r'\b[A-Za-z][A-Za-z0-9]+(?:\.[A-Za-z0-9]{2,})+\b',  # with an inner dot: core.editor
      r'(?<!\w)[A-Z][A-Z0-9]+(?!\w)',  # SELECT, WAL, GPG; not CHAÎNE, whose Î is a letter
    )
  )
)


def copy_items(text: str) -> collections.Counter:
  """The multiset of placeholders and literal identifiers in `text`."""
  return collections.Counter(match.group(0) for match in _ITEMS.finditer(text))


def copy_accuracy(hypotheses: list[str], references: list[str]) -> tuple[float, int]:
  """(share of outputs whose items equal their reference's, how many references hold items);
  the share is 0.0 when no reference holds one."""
  pairs = [(h, r) for h, r in zip(hypotheses, references, strict=True) if copy_items(r)]
  if not pairs:
    return 0.0, 0
  return sum(copy_items(h) == copy_items(r) for h, r in pairs) / len(pairs), len(pairs)
