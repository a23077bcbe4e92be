"""studies/: a moved study's old command names the new one, and the decoder studies' flags of
comma-separated integers."""

import os
import subprocess
import sys

import pytest

from studies.decoder_runs import integers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_moved_study_names_its_new_command_and_exits():
  run = subprocess.run(
    [sys.executable, '-m', 'benchmarks.streaming', '--checkpoint=x'],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert run.returncode != 0
  assert run.stderr == 'python -m benchmarks.streaming is now python -m studies.streaming.\n'
  assert run.stdout == ''


def test_comma_separated_integers_and_the_flag_named_when_they_are_not():
  assert integers('0,2,8', '--kept', zero=True) == (0, 2, 8)
  assert integers('4', '--ablate', zero=False) == (4,)
  with pytest.raises(ValueError, match=r"^--ablate must be positive integers .*, got '0,2'\.$"):
    integers('0,2', '--ablate', zero=False)
  for text in ('', '1,,2', '1.5', '-1'):
    with pytest.raises(ValueError, match='--kept must be non-negative integers separated by'):
      integers(text, '--kept', zero=True)
