"""The repository root is the only import root: installing Attend installs its dependencies only."""

import os
import site
import subprocess
import sys

import pytest
from test_layering import PACKAGES  # the one list of Attend's packages

import sources

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_nothing_of_ours_is_installed_into_site_packages():
  for directory in site.getsitepackages():
    if not os.path.isdir(directory):  # listed but absent (some distributions' layouts)
      continue
    names = os.listdir(directory)
    assert not set(names) & set(PACKAGES), directory
    # An editable install adds a finder that maps our generic names to a checkout.
    assert not [name for name in names if name.startswith('__editable__') and 'attend' in name]


def test_packages_import_from_the_repository_root():
  for name in PACKAGES:
    module = __import__(name)
    assert os.path.dirname(os.path.dirname(os.path.abspath(module.__file__))) == ROOT, name


@pytest.mark.slow
def test_entry_points_ignore_a_users_own_packages_of_the_same_names(tmp_path):
  """A user's `data/` (or `attention/`) in the working directory cannot shadow Attend's."""
  for name in ('data', 'attention'):
    (tmp_path / name).mkdir()
    (tmp_path / name / '__init__.py').write_text('raise ImportError("the user\'s own package")\n')
  commands = {
    'train.py': [
      f'--config={ROOT}/configs/default.py',
      '--config.num_train_steps=0',
      '--workdir=run',
    ],
    'eval.py': ['--workdir=nowhere'],
  }
  expected = {
    'train.py': 'train.py: config.num_train_steps=0 must be a positive integer.',
    'eval.py': 'eval.py: ' + sources.unknown('--workdir', 'nowhere'),
  }
  for script, flags in commands.items():
    result = subprocess.run(
      [sys.executable, os.path.join(ROOT, script), *flags],
      cwd=tmp_path,
      capture_output=True,
      text=True,
    )
    # Attend's own one-sentence error, so every import (config file included) was Attend's.
    assert result.stderr.strip().splitlines()[-1] == expected[script], result.stderr[-2000:]


@pytest.mark.parametrize('command', ['prompt', 'generate', 'eval'])
def test_commands_that_read_a_language_model_import_no_dataset_library(command):
  """Importing a command imports no task's data until its config names one: TFDS, sacrebleu and
  the image readers (about a second on 2 CPU cores) load only for a dataset they read."""
  heavy = ('tensorflow_datasets', 'sacrebleu', 'PIL')
  code = f'import sys, {command}\nprint(*[name for name in {heavy!r} if name in sys.modules])'
  result = subprocess.run(
    [sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True, check=True
  )
  assert result.stdout.strip() == '', result.stdout
