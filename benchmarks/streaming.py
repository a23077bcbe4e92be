"""Moved to studies/streaming.py."""

if __name__ == '__main__':
  raise SystemExit('python -m benchmarks.streaming is now python -m studies.streaming.')
