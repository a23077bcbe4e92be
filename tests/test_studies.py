"""studies/: the decoder studies' flags of comma-separated integers."""

import pytest

from studies.decoder_runs import integers


def test_comma_separated_integers_and_the_flag_named_when_they_are_not():
  assert integers('0,2,8', '--kept', zero=True) == (0, 2, 8)
  assert integers('4', '--ablate', zero=False) == (4,)
  with pytest.raises(ValueError, match=r"^--ablate must be positive integers .*, got '0,2'\.$"):
    integers('0,2', '--ablate', zero=False)
  for text in ('', '1,,2', '1.5', '-1'):
    with pytest.raises(ValueError, match='--kept must be non-negative integers separated by'):
      integers(text, '--kept', zero=True)
