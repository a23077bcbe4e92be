"""Moved to studies/interventions_study.py."""

if __name__ == '__main__':
  raise SystemExit(
    'python -m benchmarks.interventions_study is now python -m studies.interventions_study.'
  )
