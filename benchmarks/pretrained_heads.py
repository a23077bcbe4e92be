"""Moved to studies/pretrained_heads.py."""

if __name__ == '__main__':
  raise SystemExit(
    'python -m benchmarks.pretrained_heads is now python -m studies.pretrained_heads.'
  )
