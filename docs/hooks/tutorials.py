"""The tutorials as pages of the site, showing what the test suite's run of each printed and drew.

Both halves of one record format (its writer, the subprocess, is `tutorial_cells.py`):

- Running. `run` executes a tutorial in a fresh subprocess and working directory with
  `MPLBACKEND=Agg` (`tests/test_tutorials.py` calls it; so does `python docs/hooks/tutorials.py
  [TUTORIAL ...]`). The subprocess (`tutorial_cells.py`, beside this file) runs the tutorial cell
  by cell in one namespace, as the script would run (`__name__ == '__main__'`, `__file__` the
  tutorial), and keeps what each code cell printed and each picture it saved (or drew and left
  unsaved). When every cell ran it writes an executed notebook, `runs/tutorials/NAME.ipynb`, with
  the source's SHA-256 in its metadata.
- Building. As a mkdocs hook (mkdocs.yml `hooks:`) it adds one page per tutorial,
  `tutorials/NAME/`, to the nav under Tutorials: the current source's markdown cells as text
  (their LaTeX turned into MathML at build time, no network), its code cells as code, each
  followed by the recorded output and figures when the record is of this very source. Without
  such a record the page shows the code and says which command records the outputs.
"""

import base64
import glob
import hashlib
import html
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TUTORIALS = sorted(glob.glob(os.path.join(ROOT, 'tutorials', '[0-9][0-9][0-9]_*.py')))
RECORDS = os.path.join(ROOT, 'runs', 'tutorials')  # git-ignored
COMMAND = '.venv/bin/python docs/hooks/tutorials.py'  # records every tutorial (from the root)
# The pictures a tutorial's cell may write, by extension, and how a notebook holds each.
MIME = {'.png': 'image/png', '.jpg': 'image/jpeg', '.jpeg': 'image/jpeg', '.svg': 'image/svg+xml'}
IMAGES = tuple(MIME)
CSS = """\
.md-typeset pre.tutorial-output { margin-top: -0.6em;
  border-left: 0.2rem solid var(--md-primary-fg-color); }
.md-typeset pre.tutorial-stderr { border-left-color: #c62828; }
"""


def name_of(path: str) -> str:
  return os.path.splitext(os.path.basename(path))[0]


def record_path(path: str, records: str = RECORDS) -> str:
  return os.path.join(records, name_of(path) + '.ipynb')


def source_sha256(path: str) -> str:
  with open(path, 'rb') as f:
    return hashlib.sha256(f.read()).hexdigest()


# Running.


def run(path: str, workdir: str, records: str = RECORDS, timeout: float = 240):
  """Executes the tutorial at `path` in a subprocess whose working directory is `workdir`; on
  success its executed notebook is `record_path(path, records)`. Returns the CompletedProcess
  (stdout and stderr as text: the cells' output, then any traceback)."""
  env = dict(os.environ, MPLBACKEND='Agg')
  # The tutorial finds the repository root itself; other entries (packages installed with
  # --target, as on a lent GPU machine) are kept.
  entries = env.pop('PYTHONPATH', '').split(os.pathsep)
  kept = [p for p in entries if p and os.path.abspath(p) != ROOT]
  if kept:
    env['PYTHONPATH'] = os.pathsep.join(kept)
  command = [
    sys.executable,
    os.path.join(HERE, 'tutorial_cells.py'),
    path,
    record_path(path, records),
  ]
  return subprocess.run(
    command, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
  )


def main(argv: list[str]) -> int:
  paths = [os.path.abspath(p) for p in argv] or TUTORIALS
  status = 0
  for path in paths:
    with tempfile.TemporaryDirectory(prefix=f'{name_of(path)}-') as workdir:
      result = run(path, workdir)
    if result.returncode:
      status = 1
      print(result.stdout[-3000:] + result.stderr[-5000:], file=sys.stderr)
    print(f'{name_of(path)}: ' + ('FAILED' if result.returncode else record_path(path)))
  return status


# Building.


def load_record(path: str, records: str = RECORDS):
  """The executed notebook recorded for this very source of the tutorial, or None."""
  import nbformat

  try:
    notebook = nbformat.read(record_path(path, records), as_version=4)
  except (OSError, ValueError):
    return None
  if notebook.metadata.get('attend', {}).get('source_sha256') != source_sha256(path):
    return None
  return notebook


_MATH = re.compile(
  r'(`+)(?:.|\n)*?\1'  # a code span: left alone
  r'|\$\$((?:.|\n)+?)\$\$'  # display math
  r'|(?<![\\$\w])\$(?=[^\s$])((?:[^$\n]|\n(?!\s*\n))+?)(?<=[^\s\\])\$(?![\w$])'  # inline math
)


def _protect_math(text: str, math: dict[str, str]) -> str:
  """Replaces the LaTeX in a markdown cell with placeholders that Markdown leaves alone (`*` and
  `_` would otherwise become emphasis); `on_page_content` puts MathML in their place."""

  def replace(match):
    if match.group(1):
      return match.group(0)
    display = match.group(2) is not None
    latex = match.group(2) if display else match.group(3)
    token = f'ATTENDMATH{len(math):05d}X'
    math[token] = _mathml(' '.join(latex.split()), display)
    return f'\n\n{token}\n\n' if display else token

  return _MATH.sub(replace, text)


def _mathml(latex: str, display: bool) -> str:
  try:
    from latex2mathml.converter import convert

    return convert(latex, display='block' if display else 'inline')
  except Exception:  # not installed, or LaTeX it does not know: show the source
    delimiter = '$$' if display else '$'
    return f'<code>{html.escape(delimiter + latex + delimiter)}</code>'


def render(path: str, records: str = RECORDS):
  """The page of the tutorial at `path` (Markdown), the files it links to ({name: bytes}: its
  figures and executed notebook, beside the page) and its math ({placeholder: MathML})."""
  import jupytext

  name = name_of(path)
  source = os.path.relpath(path, ROOT)
  cells = jupytext.read(path).cells
  record = load_record(path, records)
  if record is not None and [c.source for c in record.cells] != [c.source for c in cells]:
    record = None  # cannot happen with a matching SHA-256, unless jupytext reads differently
  files, math, parts = {}, {}, []
  if record is not None:
    meta = record.metadata['attend']
    with open(record_path(path, records), 'rb') as f:
      files[f'{name}.ipynb'] = f.read()
    note = (
      f'!!! success "Outputs recorded by a run of this source"\n\n'
      f'    The printed output and figures below are those of `{source}` run cell by cell '
      f'by the test suite (`tests/test_tutorials.py`) on {meta["recorded"]}, in '
      f'{meta["seconds"]:.0f} s, in a fresh working directory with `MPLBACKEND=Agg`. '
      f'The executed notebook: [{name}.ipynb]({name}.ipynb).\n'
    )
  else:
    note = (
      f'!!! warning "No recorded outputs for this version of the tutorial"\n\n'
      f'    This page shows `{source}` without its outputs: no run of this source is recorded '
      f'under `runs/tutorials/`. Record the outputs of every tutorial, then build the site '
      f'again:\n\n'
      f'    ```bash\n    {COMMAND}   # or: .venv/bin/python -m pytest tests/test_tutorials.py\n'
      f'    .venv/bin/mkdocs build --strict\n    ```\n'
    )
  for index, cell in enumerate(cells):
    if cell.cell_type == 'markdown':
      parts.append(_protect_math(cell.source, math))
      if index == 0:
        parts.append(note)
      continue
    if cell.cell_type != 'code':
      continue
    parts.append(f'```python\n{cell.source}\n```')
    for output in record.cells[index].outputs if record is not None else ():
      if output.output_type == 'stream':
        kind = 'output' if output.name == 'stdout' else 'output tutorial-stderr'
        text = html.escape(output.text.rstrip('\n'), quote=False)
        parts.append(f'<pre class="tutorial-{kind}"><code>{text}</code></pre>')
      elif output.output_type == 'display_data':
        filename = output.metadata.get('filename', f'cell{index}.png')
        mime = next(m for m in MIME.values() if m in output.data)
        payload = output.data[mime]
        data = payload.encode() if mime == 'image/svg+xml' else base64.b64decode(payload)
        files[f'{name}/{filename}'] = data
        parts.append(f'![{filename}]({name}/{filename})')
  if record is None and not any(p.startswith('!!!') for p in parts):
    parts.insert(0, note)
  return '\n\n'.join(parts) + '\n', files, math


def _title(path: str) -> str:
  import jupytext

  heading = jupytext.read(path).cells[0].source.splitlines()[0].lstrip('# ')
  return re.sub(r'^(?:Lecture|Tutorial) (\d+):\s*(.)', lambda m: f'{m[1]} {m[2].upper()}', heading)


_PAGE_MATH: dict[str, dict[str, str]] = {}


def on_config(config):
  """Turns the nav's `Tutorials: tutorials.md` into a section: that page, then one per tutorial."""
  pages = [{_title(p): f'tutorials/{name_of(p)}.md'} for p in TUTORIALS]
  for index, item in enumerate(config['nav'] or []):
    if isinstance(item, dict) and item.get('Tutorials') == 'tutorials.md':
      config['nav'][index] = {'Tutorials': [{'Overview': 'tutorials.md'}, *pages]}
  config['extra_css'].append('assets/tutorials.css')
  return config


def on_files(files, config):
  from mkdocs.structure.files import File

  _PAGE_MATH.clear()
  for path in TUTORIALS:
    page, linked, math = render(path)
    uri = f'tutorials/{name_of(path)}.md'
    _PAGE_MATH[uri] = math
    files.append(File.generated(config, uri, content=page))
    for filename, data in linked.items():
      files.append(File.generated(config, f'tutorials/{filename}', content=data))
  files.append(File.generated(config, 'assets/tutorials.css', content=CSS))
  return files


def on_page_content(html_text, page, config, files):
  for token, mathml in _PAGE_MATH.get(page.file.src_uri, {}).items():
    html_text = html_text.replace(f'<p>{token}</p>', mathml).replace(token, mathml)
  return html_text


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
