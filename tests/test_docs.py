"""The documentation: the config reference matches the schema, the site builds strictly, and the
README stays short with every link pointing at a file that exists."""

import importlib.util
import os
import re
import subprocess
import sys
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _reference_module():
  spec = importlib.util.spec_from_file_location(
    'config_reference', os.path.join(ROOT, 'docs', 'config_reference.py')
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_every_config_field_is_documented_and_the_page_is_current():
  reference = _reference_module()
  assert reference.undocumented() == [], 'give these fields a comment or docstring entry'
  assert reference.redundant_supplement() == []
  with open(reference.PAGE, encoding='utf-8') as f:
    committed = f.read()
  assert committed == reference.generate(), 'stale: run python docs/config_reference.py'


def test_the_reference_finds_comments_and_docstring_entries():
  reference = _reference_module()

  def schema():  # read, never run
    c = types.SimpleNamespace()
    c.a = 1  # the line's own comment
    # a block above
    # over two lines
    c.b = 2
    c.c = 3
    return c

  assert reference.assignment_comments(schema) == {
    'a': "the line's own comment",
    'b': 'a block above over two lines',
    'c': '',
  }
  doc = """Summary.

  Args:
    size: the size,
      continued.
    rate (float): a rate.

  Returns:
    not: an argument.
  """
  assert reference.docstring_entries(doc) == {'size': 'the size, continued.', 'rate': 'a rate.'}


def test_the_site_builds_strictly(tmp_path):
  pytest.importorskip('mkdocs', reason='mkdocs is not installed: pip install ".[docs]"')
  pytest.importorskip('material', reason='mkdocs-material is not installed: pip install ".[docs]"')
  env = dict(os.environ, NO_MKDOCS_2_WARNING='1')
  result = subprocess.run(
    [
      sys.executable,
      '-m',
      'mkdocs',
      'build',
      '--strict',
      '--config-file',
      os.path.join(ROOT, 'mkdocs.yml'),
      '--site-dir',
      str(tmp_path / 'site'),
    ],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 0, result.stdout + result.stderr
  assert (tmp_path / 'site' / 'config_reference' / 'index.html').exists()


def test_the_readme_is_short_and_its_links_resolve():
  with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
    text = f.read()
  assert len(text.splitlines()) <= 250
  targets = re.findall(r'\]\(([^)\s]+)\)', text)
  local = [t.split('#')[0] for t in targets if not re.match(r'[a-z]+://|#', t)]
  assert 'docs/config_reference.md' in local
  missing = [t for t in local if not os.path.exists(os.path.join(ROOT, t))]
  assert missing == []
