"""data/message_catalogs.py: the shared corpus's pair rules, on .mo files written here."""

import struct

from data import message_catalogs

HEADER = 'Content-Type: text/plain; charset=UTF-8\n'


def write_mo(path, messages: dict[str, str]) -> None:
  """A gettext .mo file (GNU format, little-endian, no hash table) holding `messages`."""
  entries = sorted({'': HEADER, **messages}.items())
  sources = [s.encode() for s, _ in entries]
  targets = [t.encode() for _, t in entries]
  count, start = len(entries), 7 * 4
  strings_at = start + 2 * count * 8
  tables, blob = [], b''
  for texts in (sources, targets):
    table = []
    for text in texts:
      table.append((len(text), strings_at + len(blob)))
      blob += text + b'\0'
    tables.append(table)
  header = struct.pack('<7I', 0x950412DE, 0, count, start, start + count * 8, 0, 0)
  cells = b''.join(struct.pack('<2I', *cell) for table in tables for cell in table)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(header + cells + blob)


def test_pairs_follow_the_corpus_rules(tmp_path):
  messages = tmp_path / 'xx' / 'LC_MESSAGES'
  write_mo(
    messages / 'aa.mo',
    {
      'Cannot open file %s ': 'Impossible d’ouvrir le fichier %s',  # kept, ends stripped
      'File not found': 'Fichier introuvable',
      'Quit': 'Quitter',  # one word: left out
      'a b': 'x y',  # no run of three letters: left out
      'Same text here': 'Same text here',  # unchanged: left out
      'menu\x04Open the file': 'Ouvrir le fichier',  # a context: left out
      'two\nlines here': 'deux\nlignes',  # a line break: left out
      'Untranslated message here': '',
    },
  )
  write_mo(messages / 'bb.mo', {'File not found': 'Pas de fichier', 'Disk is full': 'Disque plein'})
  write_mo(messages / 'iso_639-3.mo', {'Old Turkic language': 'Turc ancien'})
  pairs, catalogs = message_catalogs.build('xx', str(tmp_path))
  assert catalogs == 2  # the ISO catalog is left out
  assert sorted(pairs) == [
    ('Cannot open file %s', 'Impossible d’ouvrir le fichier %s'),
    ('Disk is full', 'Disque plein'),
    ('File not found', 'Fichier introuvable'),  # the first catalog's translation
  ]
  again, _ = message_catalogs.build('xx', str(tmp_path))
  assert again == pairs  # a fixed shuffle


def test_the_file_is_a_parallel_tsv_and_an_empty_language_refused(tmp_path, capsys):
  write_mo(tmp_path / 'xx' / 'LC_MESSAGES' / 'aa.mo', {'Disk is full': 'Disque plein'})
  out = tmp_path / 'out' / 'pairs.tsv'
  message_catalogs.main(['--language=xx', f'--output={out}', f'--locale_dir={tmp_path}'])
  assert out.read_text(encoding='utf-8') == 'Disk is full\tDisque plein\n'
  try:
    message_catalogs.main(['--language=yy', f'--output={out}', f'--locale_dir={tmp_path}'])
  except SystemExit as e:
    assert '--language=yy' in str(e)
  else:
    raise AssertionError('an empty language was not refused')
  assert out.read_text(encoding='utf-8') == 'Disk is full\tDisque plein\n'  # left as it was
