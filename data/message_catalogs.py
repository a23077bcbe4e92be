"""A parallel corpus of software messages from a machine's gettext catalogs (English -> LANGUAGE).

    python message_catalogs.py --language=de --output=runs/data/software_en_de.tsv

Builds, for another language, a corpus of the same kind as the English->French one in
../shared/data/translation, by the rules its README states: the catalogs under
/usr/share/locale/LANGUAGE/LC_MESSAGES/*.mo, read with Python's gettext (msgid -> msgstr); the ISO
code catalogs (country, language, currency and script names) left out; message contexts and
plural forms dropped; spaces at either end stripped; a pair kept when the English side has 2-12
words with a run of at least 3 letters, the translation at most 18 words, neither side a tab or
line break, and the two sides differ; one translation per distinct English message (the first
catalog's, in name order); lines shuffled with a fixed seed. Text is otherwise as in the
catalogs. On the Debian 12 machine this project develops on, `--language=fr` gives 40,506 pairs,
40,500 of them in the shared corpus (40,827 pairs: a few catalogs differ). The output is a
`source<TAB>target` file that `configs/tsv.py` reads (`--config.dataset.tsv_path`).
"""

import gettext
import glob
import os
import random
import re

LOCALE_DIR = '/usr/share/locale'
ISO_CATALOG = re.compile(r'iso_?\d')  # iso_3166-1.mo, iso_639_3.mo, iso_4217.mo, iso_15924.mo
THREE_LETTERS = re.compile(r'[^\W\d_]{3}')
SEED = 0


def keep(source: str, target: str) -> bool:
  """The pair rules of the shared English->French corpus."""
  if any(c in text for text in (source, target) for c in '\t\n\r'):
    return False
  return (
    2 <= len(source.split()) <= 12
    and THREE_LETTERS.search(source) is not None
    and len(target.split()) <= 18
    and source != target
  )


def catalog_pairs(path: str) -> list[tuple[str, str]]:
  """The singular messages of one .mo file, without contexts, ends stripped of spaces; none
  where gettext cannot read the file (a header not in UTF-8, as some old catalogs have)."""
  try:
    with open(path, 'rb') as f:
      catalog = gettext.GNUTranslations(f)._catalog  # gettext's only public view is lookup
  except (UnicodeDecodeError, OSError) as e:
    print(f'{path}: left out, gettext cannot read it ({type(e).__name__})')
    return []
  return [
    (source.strip(), target.strip())
    for source, target in catalog.items()
    if isinstance(source, str) and source.strip() and '\x04' not in source and target.strip()
  ]


def build(language: str, locale_dir: str = LOCALE_DIR) -> tuple[list[tuple[str, str]], int]:
  """The shuffled pairs for `language`, and how many catalogs they came from."""
  paths = sorted(glob.glob(os.path.join(locale_dir, language, 'LC_MESSAGES', '*.mo')))
  paths = [p for p in paths if not ISO_CATALOG.match(os.path.basename(p))]
  chosen: dict[str, str] = {}
  for path in paths:
    for source, target in catalog_pairs(path):
      if source not in chosen and keep(source, target):
        chosen[source] = target
  pairs = sorted(chosen.items())  # the dict's order depends on the catalogs' hash tables
  random.Random(SEED).shuffle(pairs)
  return pairs, len(paths)


def write_corpus(language: str, output: str, locale_dir: str = LOCALE_DIR) -> str:
  """Writes `build(language)`'s pairs to `output`, one `source<TAB>target` line each, and says how
  many; ValueError, writing nothing, when no catalog of `language` holds a pair."""
  pairs, catalogs = build(language, locale_dir)
  if not pairs:
    raise ValueError(
      f'--language={language}: no message catalog under {locale_dir}/{language}/'
      'LC_MESSAGES holds a pair; install translated packages or choose another language.'
    )
  os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
  with open(output, 'w', encoding='utf-8') as f:
    f.writelines(f'{source}\t{target}\n' for source, target in pairs)
  print(f'{output}: {len(pairs)} English->{language} pairs from {catalogs} catalogs')
  return output


if __name__ == '__main__':
  raise SystemExit(
    'python -m data.message_catalogs is now python message_catalogs.py, with the same flags.'
  )
