"""The documentation: the config reference matches the schema, the site builds strictly with a
page per tutorial showing what the tutorial printed and drew, lists and tables are written so
that they render, the README stays short with every link pointing at a file that exists and
every figure it reports stated on a docs page, and a table that names its JSON file (a line
"Figures: docs/results/NAME.json" above it) shows only numbers that file holds."""

import bisect
import glob
import html
import importlib.util
import json
import os
import re
import subprocess
import sys
import types

import pytest
from test_tutorials import tutorials_hook

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


def _tutorials_run_first(request) -> set[str]:
  """The tutorials whose run (tests/test_tutorials.py, which records its outputs) this session
  holds and has run before this test: all that were selected when the order is known (one
  process, where tests/conftest.py puts that file first; or `--dist loadgroup`, where they share
  this test's group and worker), none under other xdist modes."""
  if (
    os.environ.get('PYTEST_XDIST_WORKER') and request.config.getoption('dist', 'no') != 'loadgroup'
  ):
    return set()
  return {
    item.callspec.params['path']
    for item in request.session.items
    if item.originalname == 'test_the_tutorial_runs_top_to_bottom'
  }


@pytest.mark.xdist_group('tutorials_site')  # after the tutorials' runs, on their worker
def test_the_site_builds_strictly(tmp_path, request):
  pytest.importorskip('mkdocs', reason='mkdocs is not installed: pip install ".[docs]"')
  pytest.importorskip('material', reason='mkdocs-material is not installed: pip install ".[docs]"')
  jupytext = pytest.importorskip(
    'jupytext', reason='jupytext is not installed: pip install ".[docs]"'
  )
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
  site = tmp_path / 'site'
  assert (site / 'config_reference' / 'index.html').exists()

  # Each tutorial is a page with its code and, when a run of its source is recorded (always for
  # those this session ran first), what each cell printed and the figures it drew.
  hook = tutorials_hook()
  ran = _tutorials_run_first(request)
  overview = (site / 'tutorials' / 'index.html').read_text(encoding='utf-8')
  for path in hook.TUTORIALS:
    name = hook.name_of(path)
    assert f'href="{name}/"' in overview, f'docs/tutorials.md does not link to {name}'
    page_dir = site / 'tutorials' / name
    page = (page_dir / 'index.html').read_text(encoding='utf-8')
    notebook = hook.load_record(path)
    assert notebook is not None or path not in ran, f'{name}: the site was built without its run'
    cells = (notebook or jupytext.read(path)).cells
    code = [c for c in cells if c.cell_type == 'code']
    last_line = max(code[-1].source.splitlines(), key=len)
    text = html.unescape(re.sub(r'<[^>]+>', '', page))  # highlighted code is split in spans
    assert last_line in text, f'{name}: code missing'
    if notebook is None:
      assert hook.COMMAND in text, f'{name}: says neither its outputs nor how to record them'
      continue
    printed = [o.text for c in code for o in c.outputs if o.output_type == 'stream']
    first_line = printed[0].splitlines()[0]
    assert html.escape(first_line, quote=False) in page, f'{name}: printed output missing'
    figures = [
      o.metadata['filename'] for c in code for o in c.outputs if o.output_type == 'display_data'
    ]
    images = re.findall(r'<img [^>]*src="([^"]+)"', page)
    for figure in figures:
      src = next((s for s in images if s.endswith(figure)), None)
      assert src is not None, f'{name}: no <img> of {figure}'
      assert (page_dir / src).is_file(), f'{name}: {src} is not in the site'
    assert (site / 'tutorials' / f'{name}.ipynb').is_file()


def _markdown_blocks():
  """(where, lines) of every Markdown text the site renders: docs/*.md and the tutorials'
  markdown cells."""
  for path in sorted(glob.glob(os.path.join(ROOT, 'docs', '*.md'))):
    with open(path, encoding='utf-8') as f:
      yield os.path.relpath(path, ROOT), f.read().splitlines()
  for path in sorted(glob.glob(os.path.join(ROOT, 'tutorials', '[0-9][0-9][0-9]_*.py'))):
    with open(path, encoding='utf-8') as f:
      cells = re.findall(r'^# %% \[markdown\]\n((?:#.*\n?)+)', f.read(), flags=re.M)
    for cell in cells:
      lines = [line[2:] if line.startswith('# ') else line[1:] for line in cell.splitlines()]
      yield os.path.relpath(path, ROOT), lines


def test_lists_and_tables_start_a_block():
  """Python-Markdown needs a blank line before a list or a table that follows a paragraph;
  without it the items run on as the paragraph's text."""
  starts = re.compile(r'(?:[-*+] |\d+[.)] |\|)')
  found = []
  for where, lines in _markdown_blocks():
    fenced = False
    for before, line in zip(lines, lines[1:]):
      if line.lstrip().startswith(('```', '~~~')):
        fenced = not fenced
      if fenced or not starts.match(line) or not before.strip():
        continue
      if before.startswith((' ', '#', '|', '!!!')) or starts.match(before):
        continue  # an item's continuation, a heading, a table's rows, a list's items
      found.append(f'{where}: {before.strip()[:60]!r} then {line[:40]!r}')
  assert found == [], 'add a blank line before each'


def test_the_tutorial_pages_turn_latex_into_mathml():
  """Their markdown cells' LaTeX becomes MathML at build time (no script, no network); Markdown
  never sees it, so its `_` and `*` stay math."""
  pytest.importorskip('latex2mathml', reason='latex2mathml is not installed: pip install ".[docs]"')
  hook = tutorials_hook()
  math = {}
  text = hook._protect_math('a $x_i^2$ b `$PATH` c $$\\sum_i a_i * b_i$$ d', math)
  assert '`$PATH`' in text and '$' not in text.replace('`$PATH`', '')
  inline, display = math.values()
  assert inline.startswith('<math') and 'display="inline"' in inline and '<msubsup>' in inline
  assert display.startswith('<math') and 'display="block"' in display and '<munder>' in display


# A command as the docs and docstrings spell it: `python -m a.b`, `python name.py`, and the
# configs it is given (`configs/name.py`). A placeholder in capitals (NAME, MODULE) or a wildcard
# (`benchmarks.*`) names no module.
_MODULE_COMMAND = re.compile(r'python3? -m ([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)\b(?!\.?[*\w])')
_SCRIPT_COMMAND = re.compile(r'python3? ([a-z_]\w*\.py)\b')
_CONFIG_FILE = re.compile(r'\bconfigs/([a-z_]\w*\.py)\b')
# The one config path the docs name to show train.py's error for a missing one.
_MISSING_ON_PURPOSE = ('configs/nope.py',)


def _command_texts():
  """(file, text) of README.md, every docs page and every project Python file but the tests
  (whose texts are made-up trees), where commands are written for users."""
  paths = [os.path.join(ROOT, 'README.md'), os.path.join(ROOT, 'Makefile')]
  paths += glob.glob(os.path.join(ROOT, 'docs', '**', '*.md'), recursive=True)
  for path in glob.glob(os.path.join(ROOT, '**', '*.py'), recursive=True):
    relative = os.path.relpath(path, ROOT)
    if not relative.startswith(('tests', '.venv', 'runs', 'build', 'site')):
      paths.append(path)
  for path in sorted(paths):
    with open(path, encoding='utf-8') as f:
      yield os.path.relpath(path, ROOT), f.read()


def _module_exists(name: str) -> bool:
  """Whether `python -m name` finds a module: the repository's own by its file, any other
  (pip, venv, pytest, ...) by the import system."""
  parts = name.split('.')
  if os.path.isdir(os.path.join(ROOT, parts[0])):
    path = os.path.join(ROOT, *parts)
    return os.path.isfile(path + '.py') or os.path.isfile(os.path.join(path, '__main__.py'))
  return importlib.util.find_spec(parts[0]) is not None


def test_every_command_in_the_docs_names_a_module_that_exists():
  """A module moved to another folder leaves no command behind that names its old place."""
  missing, seen = [], 0
  for where, text in _command_texts():
    for name in _MODULE_COMMAND.findall(text):
      seen += 1
      if not _module_exists(name.rstrip('.')):
        missing.append(f'{where}: python -m {name}')
    for script in _SCRIPT_COMMAND.findall(text):
      seen += 1
      if not os.path.isfile(os.path.join(ROOT, script)):
        missing.append(f'{where}: python {script}')
    for config in _CONFIG_FILE.findall(text):
      seen += 1
      if f'configs/{config}' in _MISSING_ON_PURPOSE:
        continue
      if not os.path.isfile(os.path.join(ROOT, 'configs', config)):
        missing.append(f'{where}: configs/{config}')
  assert seen > 300, seen  # the checker reads the commands at all
  assert missing == [], '\n'.join(missing)


def test_the_command_check_finds_a_moved_module():
  text = 'Run python -m benchmarks.timing. Then python -m benchmarks.* or python -m studies.NAME.'
  assert _MODULE_COMMAND.findall(text) == ['benchmarks.timing']  # no wildcard, no placeholder
  assert _module_exists('benchmarks.timing') and _module_exists('pytest')
  assert not _module_exists('benchmarks.no_such_bench') and not _module_exists('models.nothing')


# A figure as the README reports a measurement: a number with a decimal point, an exponent or
# thousands separators (99.6, 2.4e-5, 9,200), a number or range with a unit (30 min, 1.01-1.08x,
# 87.0%, 4,219-4,252 MiB), or a bold headline number (**797-921**). A sign belongs to it
# (-2.00); a number glued to a word (SmolLM2, Llama-2-7B, qa16), a flag's value (-9, =0.5) or a
# version (0.1.2, Python 3.11) is none, and neither is anything in code, in a link's target or in
# an HTML tag.
_NUMBER = r'\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:e-?\d+)?'
_UNIT = r'%|[x×](?!\w)|\s?(?:ms|s|min|h|MiB|GiB|GB|MB|tokens/s|GFLOP/s|bits/char)(?![\w/])'
_FIGURE = re.compile(
  rf'(?<![\w.,/=+\-−])(?P<figure>(?P<number>[-−]?(?:{_NUMBER})(?:-(?:{_NUMBER}))?)(?P<unit>{_UNIT})?)'
  r'(?!\d|[.,]\d)'
)
_NOT_PROSE = (
  re.compile(r'^(```|~~~).*?^\1', flags=re.M | re.S),  # fenced code
  re.compile(r'`[^`\n]*`'),  # code spans: commands and their flags' values
  re.compile(r'\]\([^)\n]*\)'),  # a link's or an image's target
  re.compile(r'<[^>\n]*>'),  # HTML tags (an image's width="49%")
  re.compile(r'https?://\S+'),
)
_VERSIONED = re.compile(r'(?:Python|torch|transformers|jax|version|v)\s?$')


def _readme_figures(text: str) -> list[tuple[int, str]]:
  """(line, figure) of every measured figure in a README's Markdown `text`, in order."""
  for pattern in _NOT_PROSE:  # blanked, not removed: the line numbers stay
    text = pattern.sub(lambda m: re.sub(r'[^\n]', ' ', m.group()), text)
  bold = [m.span() for m in re.finditer(r'\*\*[^*\n]+\*\*', text)]
  found = []
  for m in _FIGURE.finditer(text):
    number = m.group('number')
    if re.fullmatch(r'\d+\.\d+\.\d+', number) or _VERSIONED.search(
      text[max(0, m.start() - 14) : m.start()]
    ):
      continue
    in_bold = any(start < m.start() < end for start, end in bold)
    if re.search(r'[.e,]', number) or m.group('unit') or in_bold:
      found.append((text.count('\n', 0, m.start()) + 1, re.sub(r'\s+', ' ', m.group('figure'))))
  return found


def _docs_prose() -> str:
  """Every docs page (docs/ and the folders in it) as one text: bold marks off, runs of
  whitespace (a wrapped line) one space."""
  texts = []
  for path in sorted(glob.glob(os.path.join(ROOT, 'docs', '**', '*.md'), recursive=True)):
    with open(path, encoding='utf-8') as f:
      texts.append(f.read())
  return re.sub(r'\s+', ' ', '\n'.join(texts).replace('**', ''))


def _stated(figure: str, prose: str) -> bool:
  """Whether `prose` states `figure` as a whole number with its unit (1.0 is not in 1.08, nor
  4.3 GB in 4.3 GiB)."""
  whole = re.compile(rf'(?<![\w.,]){re.escape(figure)}(?!\w|[.,]\d)')
  start = prose.find(figure)
  while start >= 0:  # str.find first: a regex search through every page is much slower
    if whole.match(prose, start):  # the lookbehind still sees the character before `start`
      return True
    start = prose.find(figure, start + 1)
  return False


def test_every_figure_in_the_readme_is_stated_on_a_docs_page():
  """The README only repeats what a page reports with its command, shape and machine: a figure
  no page states was measured nowhere the reader can check."""
  with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
    figures = _readme_figures(f.read())
  assert len(figures) > 80, figures  # the check reads the README's results at all
  prose = _docs_prose()
  missing = [
    f'README.md:{line}: {figure}' for line, figure in figures if not _stated(figure, prose)
  ]
  assert missing == [], (
    'no docs page states these: give each its page entry (with the command, the shape and the '
    'machine) or take it out of the README\n' + '\n'.join(missing)
  )


def test_the_figure_check_tells_measurements_from_settings():
  text = (
    'BLEU **45.5** in 30 min; 1.01-1.08x its speed (4.2 against 4.3 GB), 27-29 tokens/s,\n'
    'from 5.07 to -2.00 (−0.5), within 2.4e-5, **797-921** tokens back,\n'
    '9,200 against 8,683 ms, 87.0%;\n'
    'SmolLM2 on Llama-2-7B, Python 3.11, torch 2.13, version 0.1.2, Kim 2014, 4 x 256 tokens,\n'
    'layers 17-18, xz -9e, `--config.dropout=0.5` [a page](docs/a.md#v1.5) <img width="49%">\n'
    '```bash\npython train.py --config.learning_rate=3.5e-4   # 1.5 s\n```\n'
  )
  assert _readme_figures(text) == [
    (1, '45.5'),
    (1, '30 min'),
    (1, '1.01-1.08x'),
    (1, '4.2'),
    (1, '4.3 GB'),
    (1, '27-29 tokens/s'),
    (2, '5.07'),
    (2, '-2.00'),
    (2, '−0.5'),
    (2, '2.4e-5'),
    (2, '797-921'),
    (3, '9,200'),
    (3, '8,683 ms'),
    (3, '87.0%'),
  ]
  prose = 'peaks at 4.3 GiB; ratio 1.08, 19.0 and 4.3 GB; from 5.07 to -2.00.'
  assert _stated('4.3 GB', prose) and _stated('-2.00', prose) and _stated('5.07', prose)
  assert not _stated('1.0', prose) and not _stated('9.0', prose) and not _stated('4.3 MiB', prose)
  assert not _stated('1.01-1.08x', prose)


# A table's figures read from a committed JSON file. The convention, one line on its own in a
# docs page, a blank line, then the table (nothing but blank lines between):
#
#     Figures: docs/results/NAME.json
#
# The path is relative to the repository root and ends in .json. Any other line that starts with
# "Figures:" or "Figure:" (any case) is a misspelling and fails, as does a Figures line with no
# table under it.
_FIGURES_LINE = re.compile(r'Figures: (?P<path>[\w./-]+\.json)')
_FIGURES_LOOSE = re.compile(r'\s*figures?\s*:', flags=re.I)
# A number as a table or a JSON string prints it: a sign, thousands separators, decimals, an
# exponent (-0.88, +0.16, 1,075, 2.4e-5, the 1.78 of 1.78x, the 92 of 92%). A digit glued to a
# word (SmolLM2) is none, and a range's hyphen is no sign (0.98-1.11: 0.98 and 1.11).
_TABLE_NUMBER = re.compile(
  r'(?<![\w.])(?P<sign>[-−+]?)(?P<digits>\d+(?:,\d{3})*)(?P<decimals>\.\d+)?(?P<exp>e[-+]?\d+)?'
)


def _table_numbers(text: str) -> list[tuple[str, float, float]]:
  """(as printed, value, half its last printed unit) of every number in `text`."""
  found = []
  for m in _TABLE_NUMBER.finditer(text):
    sign = '-' if m.group('sign') in ('-', '−') else ''
    decimals = m.group('decimals') or ''
    exponent = int(m.group('exp')[1:]) if m.group('exp') else 0
    value = float(f'{sign}{m.group("digits").replace(",", "")}{decimals}e{exponent}')
    half_unit = 0.5 * 10.0 ** (exponent - max(len(decimals) - 1, 0))
    found.append((m.group(), value, half_unit))
  return found


def _json_numbers(data) -> list[float]:
  """Every number in a JSON document, sorted: its values (booleans are none), and the numbers
  its keys and strings print (a study's JSON may hold its printed tables)."""
  out = []

  def walk(node):
    if isinstance(node, bool) or node is None:
      return
    if isinstance(node, (int, float)):
      out.append(float(node))
    elif isinstance(node, str):
      out.extend(value for _, value, _ in _table_numbers(node))
    elif isinstance(node, dict):
      for key, value in node.items():
        walk(key)
        walk(value)
    else:
      for value in node:
        walk(value)

  walk(data)
  return sorted(v for v in out if v == v)  # NaN matches nothing


def _in_json(value: float, half_unit: float, numbers: list[float]) -> bool:
  """Whether a JSON number prints as `value` at its precision (within half its last unit), as
  it is or as a share of 1 printed per cent."""
  tolerance = half_unit * (1 + 1e-9)
  for low, high in (
    (value - tolerance, value + tolerance),
    ((value - tolerance) / 100, (value + tolerance) / 100),
  ):
    at = bisect.bisect_left(numbers, low)
    if at < len(numbers) and numbers[at] <= high:
      return True
  return False


def _figures_problems(
  pages: list[tuple[str, str]], root: str, committed=None
) -> tuple[int, list[str]]:
  """(tables checked, problems) of every `Figures: PATH.json` line in `pages` ((name, Markdown
  text) pairs), PATH read under `root`: a misspelt line, a line with no table under it, a file
  that is missing, not committed (`committed(path)` false, when given) or not JSON, a table with
  no number, and each number of the table (code spans, links and HTML tags aside) that no number
  of the file prints."""
  checked, problems = 0, []
  for page, text in pages:
    lines, fenced = text.splitlines(), False
    for index, line in enumerate(lines):
      if line.lstrip().startswith(('```', '~~~')):
        fenced = not fenced
      if fenced or not _FIGURES_LOOSE.match(line):
        continue
      where = f'{page}:{index + 1}'
      spelled = _FIGURES_LINE.fullmatch(line.rstrip())
      if not spelled:
        problems.append(f'{where}: write the line as "Figures: docs/results/NAME.json": {line!r}')
        continue
      path = spelled.group('path')
      after = index + 1
      while after < len(lines) and not lines[after].strip():
        after += 1
      table = []
      while after + len(table) < len(lines) and lines[after + len(table)].startswith('|'):
        table.append(lines[after + len(table)])
      if not table:
        problems.append(f'{where}: no table under the Figures line (a blank line, then the table)')
        continue
      full = os.path.join(root, path)
      if not os.path.isfile(full):
        problems.append(f'{where}: {path} does not exist')
        continue
      if committed is not None and not committed(path):
        problems.append(f'{where}: {path} is not committed')
        continue
      try:
        with open(full, encoding='utf-8') as f:
          numbers = _json_numbers(json.load(f))
      except ValueError as error:
        problems.append(f'{where}: {path} is not JSON ({error})')
        continue
      checked += 1
      cells = '\n'.join(table)
      for pattern in _NOT_PROSE:
        cells = pattern.sub(' ', cells)
      printed = _table_numbers(cells)
      if not printed:
        problems.append(f'{where}: the table under the Figures line has no number')
      for shown, value, half_unit in printed:
        if not _in_json(value, half_unit, numbers):
          problems.append(f'{where}: the table shows {shown}, which {path} does not hold')
  return checked, problems


def _committed(path: str) -> bool:
  """Whether git tracks `path` in this checkout."""
  result = subprocess.run(
    ['git', 'ls-files', '--error-unmatch', path], cwd=ROOT, capture_output=True, text=True
  )
  return result.returncode == 0


def test_every_table_that_names_its_json_is_in_it():
  """A table whose figures a command wrote names that command's JSON on the line above it:

      Figures: docs/results/NAME.json

  (one line on its own, the path from the repository root, a blank line, then the table). Every
  number in that table, its header included (code spans, links and HTML tags aside), must be one
  the JSON holds at the precision the table prints it (within half its last printed unit), as it
  is or, for a share of 1, per cent; the JSON's numbers are its values and those its keys and
  strings print. The file must exist and, in a git checkout, be committed: only the commands of
  studies/ and benchmarks/ write these files, from their runs. Nothing is skipped: a misspelt
  Figures line, one with no table under it, a missing or unreadable file, or a table without a
  number fails."""
  pages = []
  for path in sorted(glob.glob(os.path.join(ROOT, 'docs', '**', '*.md'), recursive=True)):
    with open(path, encoding='utf-8') as f:
      pages.append((os.path.relpath(path, ROOT), f.read()))
  git = os.path.isdir(os.path.join(ROOT, '.git'))
  _, problems = _figures_problems(pages, ROOT, committed=_committed if git else None)
  assert problems == [], '\n'.join(problems)


def test_the_json_check_finds_a_figure_the_file_does_not_hold(tmp_path):
  results = tmp_path / 'docs' / 'results'
  results.mkdir(parents=True)
  (results / 'study.json').write_text(
    json.dumps(
      {
        'ratios': [0.25, 0.5],
        'share': {'knorm': [0.9166, 0.5], 'tova': [1.0, 0.4166]},
        'seconds': 1075.4,
        'ratio': [1.0987, 0.98, 1.11],
        'effect': -0.0012,
        'tiny': 2.43e-5,
        'ok': True,
        'table': '| head | 23.3 |',
      }
    ),
    encoding='utf-8',
  )
  good = (
    'Intro.\n\nFigures: docs/results/study.json\n\n'
    '| press (`--ratio=9`) | 0.25 | 0.5 |\n|---|---|---|\n'
    '| knorm | 92% | 50 |\n| tova | 100 | 42 |\n'
    '| time | 1,075 s | 1.10 (0.98-1.11), -0.00, 2.4e-5, head 23.3 |\n'
  )
  assert _figures_problems([('good.md', good)], str(tmp_path)) == (1, [])
  bad = good.replace('| 42 |', '| 43 |').replace('1.10 (', '1.09 (')
  checked, problems = _figures_problems([('bad.md', bad)], str(tmp_path))
  assert checked == 1 and len(problems) == 2, problems
  assert 'shows 43' in problems[0] and 'shows 1.09' in problems[1]
  assert _table_numbers('0.98-1.11, −0.5, +0.16, SmolLM2, 1,075, 2.4e-5') == [
    ('0.98', 0.98, pytest.approx(0.005)),
    ('1.11', 1.11, pytest.approx(0.005)),
    ('−0.5', -0.5, pytest.approx(0.05)),
    ('+0.16', 0.16, pytest.approx(0.005)),
    ('1,075', 1075.0, pytest.approx(0.5)),
    ('2.4e-5', pytest.approx(2.4e-5), pytest.approx(5e-7)),
  ]
  nothing_skipped = [
    ('a.md', 'figures: docs/results/study.json\n\n| 1 |\n'),  # misspelt
    ('b.md', 'Figures: docs/results/study.json\n\nNo table.\n'),
    ('c.md', 'Figures: docs/results/missing.json\n\n| 1 |\n'),
    ('d.md', 'Figures: docs/results/study.json\n\n| press | knorm |\n'),  # no number
  ]
  checked, problems = _figures_problems(nothing_skipped, str(tmp_path))
  assert checked == 1 and len(problems) == 4, problems
  assert [p.split(':')[0] for p in problems] == ['a.md', 'b.md', 'c.md', 'd.md']
  _, problems = _figures_problems([('good.md', good)], str(tmp_path), committed=lambda p: False)
  assert problems == ['good.md:3: docs/results/study.json is not committed']
