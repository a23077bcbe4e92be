"""Every family's pictures, explorer page, hit rates and head ablation read the same numbers as
when they were pinned (`tests/attention_readings.py` says what is read and how to re-pin)."""

import json
import os

from attention_readings import FIXTURES, assert_close, readings
import pytest
from test_tasks import PAIRS


@pytest.mark.parametrize('task_name, model', PAIRS)
def test_each_family_reads_its_attention_as_pinned(task_name, model, tfds_dir):
  with open(os.path.join(FIXTURES, f'{task_name}-{model}.json'), encoding='utf-8') as f:
    expected = json.load(f)
  assert_close(readings(task_name, model, tfds_dir), expected)
