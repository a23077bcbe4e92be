"""Writes a parallel corpus of software messages from this machine's gettext catalogs (English ->
LANGUAGE): a `source<TAB>target` file that configs/tsv.py reads (`--config.dataset.tsv_path`).

  python message_catalogs.py --language=de --output=runs/data/software_en_de.tsv

The pairs follow the rules of the shared English->French corpus (data/message_catalogs.py); on
the Debian 12 machine this project develops on, German gives 33,417 pairs from 81 catalogs
(docs/translation.md).
"""

import sys

from absl import app, flags

from data import message_catalogs

_LANGUAGE = flags.DEFINE_string('language', None, 'A locale directory name: de, es, pt_BR.')
_OUTPUT = flags.DEFINE_string('output', None, 'The TSV to write.')
_LOCALE_DIR = flags.DEFINE_string(
  'locale_dir', message_catalogs.LOCALE_DIR, 'Where the LANGUAGE/LC_MESSAGES/*.mo catalogs are.'
)
flags.mark_flags_as_required(['language', 'output'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  try:
    message_catalogs.write_corpus(_LANGUAGE.value, _OUTPUT.value, _LOCALE_DIR.value)
  except ValueError as error:  # a language without catalogs: one sentence, not a traceback
    sys.exit(f'message_catalogs.py: {error}')


if __name__ == '__main__':
  app.run(main)
