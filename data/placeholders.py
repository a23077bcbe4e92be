"""Items a translation must carry over intact, and numbered tags that protect them.

Software messages hold items a translator copies rather than translates, and often moves: printf
placeholders (`%s`, `%1$s`, `%.250s`, `%lu`, binutils' `%pB`), command-line options (`--output`,
`-v`), autoconf-style `@NAME@` substitutions, identifiers with an underscore or an inner dot
(`max_wal_size`, `core.editor`) and upper-case ASCII words (`SELECT`, `WAL`). `ITEMS` finds them;
`tasks.copy_metric` scores a translation by them.

Protection (`config.dataset.protect_items`) is the localisation industry's placeholder masking:
each item of a source becomes a numbered tag, `⟪0⟫`, `⟪1⟫`, ... in order, one per occurrence
(`%s ... %s` is `⟪0⟫ ... ⟪1⟫`), and the same item in its target becomes the same tag, so a model
moves one atomic piece instead of spelling `--exclude-libs` or `STARTTLS` piece by piece, and
keeps count of repeated items as of distinct ones; a tag in an output is replaced by its
source's item again, and a picture labels a tag token with its item (`⟪0:%s⟫`). An item the
target lacks (a metavariable the translator translated, `NAME` -> `NOM`) stays a tag in the source
and is text in the target: the model can learn that a tag is sometimes dropped, but not which
word it stood for.
"""

import re

# One alternative per kind of item. Placeholders first, so that `%s` is not read as anything else;
# `%%` (a literal percent sign) is an item too: dropping it changes the printed text.
ITEMS = re.compile(
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

# Sources in the French software messages hold at most 10 items; past 16, no new tags.
TAGS = tuple(f'⟪{i}⟫' for i in range(16))
_TAG = re.compile('⟪([0-9]+)⟫')


def source_items(source: str) -> list[str]:
  """The items of `source` in order, one per occurrence, at most one per tag."""
  return [match.group(0) for match in ITEMS.finditer(source)][: len(TAGS)]


def protect(text: str, items: list[str]) -> str:
  """`text` with its items (as `ITEMS` reads `text`) replaced by their tags in `items`: the k-th
  occurrence of an item takes the tag of its k-th occurrence in `items` (the last one when
  `items` holds fewer); an item `items` lacks stays text."""
  tags: dict[str, list[str]] = {}
  for name, item in zip(TAGS, items):
    tags.setdefault(item, []).append(name)
  seen: dict[str, int] = {}

  def tag(match: re.Match) -> str:
    item = match.group(0)
    if item not in tags:
      return item
    seen[item] = seen.get(item, 0) + 1
    return tags[item][min(seen[item], len(tags[item])) - 1]

  return ITEMS.sub(tag, text)


def protect_pair(source: str, target: str) -> tuple[str, str]:
  """A source and its target with the source's items as tags on both sides."""
  items = source_items(source)
  return protect(source, items), protect(target, items)


def _item_of(tag: re.Match, items: list[str]) -> str | None:
  """The item a matched tag stands for; None where the source has fewer items than its number."""
  index = int(tag[1])
  return items[index] if index < len(items) else None


def restore(text: str, items: list[str]) -> str:
  """`text` with each tag replaced by its item; a tag the source has no item for is dropped."""
  return _TAG.sub(lambda tag: _item_of(tag, items) or '', text)


def label_tags(text: str, items: list[str]) -> str:
  """`text` (a token, for a picture's axis) with each tag showing the item it stands for,
  `⟪0:%s⟫`; a tag the source has no item for stays as it is."""

  def label(tag: re.Match) -> str:
    item = _item_of(tag, items)
    return tag[0] if item is None else f'⟪{tag[1]}:{item}⟫'

  return _TAG.sub(label, text)
