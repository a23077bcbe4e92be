"""Moved to studies/decoder_heads.py."""

if __name__ == '__main__':
  raise SystemExit('python -m benchmarks.decoder_heads is now python -m studies.decoder_heads.')
