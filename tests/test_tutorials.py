"""The tutorials: one per course lecture, each a jupytext percent-format notebook that runs top to
bottom, in a fresh working directory, and draws its pictures there. Each run is recorded (what
every cell printed and drew, runs/tutorials/NAME.ipynb) for the docs site's tutorial pages; the
site is built after these runs, on the same pytest-xdist worker (the group `tutorials_site`, with
`--dist loadgroup`: tests/test_docs.py's build checks their outputs are on the pages)."""

import glob
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUTORIALS = sorted(glob.glob(os.path.join(ROOT, 'tutorials', '[0-9][0-9][0-9]_*.py')))


def tutorials_hook():
  """docs/hooks/tutorials.py: runs a tutorial cell by cell and records it; the site's hook."""
  spec = importlib.util.spec_from_file_location(
    'tutorials_hook', os.path.join(ROOT, 'docs', 'hooks', 'tutorials.py')
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _number(path: str) -> str:
  return os.path.basename(path)[:3]


def test_there_is_one_tutorial_per_lecture():
  """000-099: one per course note; 100 and up: topics beyond the notes (a trained model's
  insides)."""
  lectures = [_number(path) for path in TUTORIALS if int(_number(path)) < 100]
  assert lectures == ['000', '001', '002', '003', '004']


@pytest.mark.parametrize('path', TUTORIALS, ids=os.path.basename)
def test_the_tutorial_opens_as_a_notebook(path):
  jupytext = pytest.importorskip(
    'jupytext', reason='jupytext is not installed: pip install ".[docs]"'
  )
  notebook = jupytext.read(path)
  kinds = [cell.cell_type for cell in notebook.cells]
  assert kinds.count('markdown') >= 5 and kinds.count('code') >= 5
  title = notebook.cells[0].source
  kind = 'Lecture' if int(_number(path)) < 100 else 'Tutorial'
  assert title.startswith(f'# {kind} {_number(path)}:'), title


@pytest.mark.slow
@pytest.mark.xdist_group('tutorials_site')
@pytest.mark.parametrize('path', TUTORIALS, ids=os.path.basename)
def test_the_tutorial_runs_top_to_bottom(path, tmp_path):
  pytest.importorskip('jupytext', reason='jupytext is not installed: pip install ".[docs]"')
  recorder = tutorials_hook()
  record = recorder.record_path(path)
  # A fresh subprocess (MPLBACKEND=Agg, the repository root not on PYTHONPATH) runs the cells in
  # one namespace, as the script runs, in the fresh working directory tmp_path; it records only
  # when every cell ran.
  result = recorder.run(path, tmp_path, timeout=240)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
  assert list(tmp_path.glob('*.png')), 'the tutorial draws at least one picture'
  notebook = recorder.load_record(path)
  assert notebook is not None, f'{record}: not written, or not of this source'
  outputs = [o for cell in notebook.cells if cell.cell_type == 'code' for o in cell.outputs]
  assert any(o.output_type == 'stream' and o.name == 'stdout' for o in outputs)
  figures = {o.metadata['filename'] for o in outputs if o.output_type == 'display_data'}
  assert {p.name for p in tmp_path.glob('*.png')} <= figures, 'every picture drawn is recorded'
