"""data/message_catalogs.py and message_catalogs.py: the shared corpus's pair rules, on .mo
files written here, and the command that writes the corpus."""

import os
import struct
import subprocess
import sys

from data import message_catalogs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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


def _command(*args, cwd):
  return subprocess.run(
    [sys.executable, *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=60
  )


def test_the_command_writes_a_parallel_tsv_and_refuses_an_empty_language(tmp_path):
  write_mo(tmp_path / 'xx' / 'LC_MESSAGES' / 'aa.mo', {'Disk is full': 'Disque plein'})
  out = tmp_path / 'out' / 'pairs.tsv'
  command = [os.path.join(ROOT, 'message_catalogs.py'), f'--output={out}']
  done = _command(*command, '--language=xx', f'--locale_dir={tmp_path}', cwd=tmp_path)
  assert done.returncode == 0, done.stderr
  assert done.stdout == f'{out}: 1 English->xx pairs from 1 catalogs\n'
  assert out.read_text(encoding='utf-8') == 'Disk is full\tDisque plein\n'
  refused = _command(*command, '--language=yy', f'--locale_dir={tmp_path}', cwd=tmp_path)
  assert refused.returncode == 1
  assert refused.stderr == (
    f'message_catalogs.py: --language=yy: no message catalog under {tmp_path}/yy/LC_MESSAGES '
    'holds a pair; install translated packages or choose another language.\n'
  )
  assert out.read_text(encoding='utf-8') == 'Disk is full\tDisque plein\n'  # left as it was


def test_the_old_module_command_names_the_new_one(tmp_path):
  old = _command('-m', 'data.message_catalogs', '--language=xx', '--output=x.tsv', cwd=ROOT)
  assert old.returncode == 1 and old.stdout == ''
  assert old.stderr == (
    'python -m data.message_catalogs is now python message_catalogs.py, with the same flags.\n'
  )
  assert not os.path.exists(os.path.join(ROOT, 'x.tsv'))
