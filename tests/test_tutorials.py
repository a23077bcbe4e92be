"""The tutorials: one per course lecture, each a jupytext percent-format notebook that runs top to
bottom as a plain script, in a fresh working directory, and draws its pictures there."""

import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUTORIALS = sorted(glob.glob(os.path.join(ROOT, 'tutorials', '[0-9][0-9][0-9]_*.py')))


def test_there_is_one_tutorial_per_lecture():
  assert [os.path.basename(path)[:3] for path in TUTORIALS] == ['000', '001', '002', '003', '004']


@pytest.mark.parametrize('path', TUTORIALS, ids=os.path.basename)
def test_the_tutorial_opens_as_a_notebook(path):
  jupytext = pytest.importorskip(
    'jupytext', reason='jupytext is not installed: pip install ".[docs]"'
  )
  notebook = jupytext.read(path)
  kinds = [cell.cell_type for cell in notebook.cells]
  assert kinds.count('markdown') >= 5 and kinds.count('code') >= 5
  title = notebook.cells[0].source
  assert title.startswith(f'# Lecture {os.path.basename(path)[:3]}:'), title


@pytest.mark.slow
@pytest.mark.parametrize('path', TUTORIALS, ids=os.path.basename)
def test_the_tutorial_runs_top_to_bottom(path, tmp_path):
  env = dict(os.environ, MPLBACKEND='Agg')
  env.pop('PYTHONPATH', None)  # the tutorial finds the repository root itself
  result = subprocess.run(
    [sys.executable, path], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
  )
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
  assert list(tmp_path.glob('*.png')), 'the tutorial draws at least one picture'
