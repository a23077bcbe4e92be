"""Test BLEU by source length, one line per model: Bahdanau et al. (2015)'s Figure 2 on your runs.

  python length_buckets.py runs/tsv runs/gru runs/gru0 --out=docs/assets/lengths.png
  python length_buckets.py Transformer=runs/tsv GRU=runs/gru --buckets=4

Each run is a workdir that eval.py evaluated; NAME=WORKDIR names its line. The test sentences go
into --buckets buckets of about equal size by source length, the same for every run; the table
printed has each bucket's BLEU and chrF per run, and --out draws BLEU against the buckets' mean
length (reports/length_buckets.py).
"""

import sys

from absl import app, flags

from reports import length_buckets

_BUCKETS = flags.DEFINE_integer('buckets', 3, 'How many buckets of source lengths.')
_OUT = flags.DEFINE_string('out', '', 'The PNG to write (none if empty).')


def main(argv):
  if len(argv) < 2:
    raise app.UsageError(
      'Give one or more workdirs that eval.py evaluated (NAME=WORKDIR names one).'
    )
  try:
    length_buckets.report(argv[1:], _BUCKETS.value, _OUT.value)
  except (ValueError, FileNotFoundError) as error:  # one sentence naming the run, no traceback
    sys.exit(f'length_buckets.py: {error}')


if __name__ == '__main__':
  app.run(main)
