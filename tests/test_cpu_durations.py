"""`--cpu-durations=N` (tests/conftest.py) lists the tests that cost the most CPU, counting the
processes they start, and not the time they spend waiting."""

import pathlib
import re

pytest_plugins = ['pytester']

_TESTS = """
import subprocess
import sys
import time

def test_sleeps():
  time.sleep(0.3)

def test_spins():
  end = time.process_time() + 0.3
  while time.process_time() < end:
    pass

def test_starts_a_spinning_process():
  spin = 'import time\\nend = time.process_time() + 0.3\\nwhile time.process_time() < end: pass'
  subprocess.run([sys.executable, '-c', spin], check=True)
"""


def test_cpu_durations_rank_by_cpu_with_child_processes(pytester):
  pytester.makeconftest(pathlib.Path(__file__).with_name('conftest.py').read_text())
  pytester.makepyfile(test_cpu=_TESTS)
  result = pytester.runpytest_inprocess('--cpu-durations=3', '-p', 'no:cacheprovider')
  result.assert_outcomes(passed=3)
  heading = next(i for i, line in enumerate(result.outlines) if 'most CPU time' in line)
  lines = result.outlines[heading + 1 : heading + 5]
  seconds = {
    name: float(cpu)
    for cpu, name in (re.match(r'\s*([\d.]+)s .*::(\w+)', line).groups() for line in lines[:3])
  }
  assert seconds['test_spins'] >= 0.29
  assert seconds['test_starts_a_spinning_process'] >= 0.29  # the child's CPU counts
  assert seconds['test_sleeps'] < 0.1  # waiting costs nothing
  assert list(seconds)[-1] == 'test_sleeps'
  assert re.match(r'\s*[\d.]+s in all, over 3 tests', lines[3])
