"""Moved to studies/attention_distance.py."""

if __name__ == '__main__':
  raise SystemExit(
    'python -m benchmarks.attention_distance is now python -m studies.attention_distance.'
  )
