"""The test sentence whose word order changes most between source and reference, by a stated rule
that ignores the model, and the eval.py command that draws its alignment.

  python reordering.py --workdir=runs/gru_fr     # test example 1966: 12 crossings, 9 links

The workdir is a translation run on a parallel TSV that eval.py evaluated; the rule (links from a
word-for-word table of the training pairs, the most crossing links among sources of --min_words
to --max_words words) is reports/reordering.py's.
"""

import sys

from absl import app, flags

from reports import reordering

_WORKDIR = flags.DEFINE_string('workdir', None, 'A translation run that eval.py evaluated.')
_MIN_WORDS = flags.DEFINE_integer('min_words', 5, 'The shortest source considered, in words.')
_MAX_WORDS = flags.DEFINE_integer('max_words', 10, 'The longest source considered, in words.')
flags.mark_flag_as_required('workdir')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  try:
    reordering.report(_WORKDIR.value, _MIN_WORDS.value, _MAX_WORDS.value)
  except (ValueError, FileNotFoundError) as error:  # one sentence naming the run, no traceback
    sys.exit(f'reordering.py: {error}')


if __name__ == '__main__':
  app.run(main)
