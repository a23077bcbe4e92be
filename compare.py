"""Compares training runs: a table of final metrics per setting (mean ± std over seeds) and curves.

  python compare.py runs/study
  python compare.py runs/dot runs/additive --metrics=exact_match,bleu --out=runs/report
  python compare.py runs/study_recall --metrics=accuracy --against=dataset.builder_config

Each path is a training workdir or a folder of them; report.md and curves.png (and against.png)
go to --out. The figures label each setting only by the fields that tell it apart from the others
('positions=alibi'), with axes and metrics in words (docs/studies_classic.md).
"""

import sys

from absl import app, flags

from reports import compare

_METRICS = flags.DEFINE_list(
  'metrics', None, 'Eval metrics to compare (default: all in every final evaluation).'
)
_AGAINST = flags.DEFINE_string(
  'against',
  None,
  'Also draw against.png: the final metrics against this differing config '
  "field (e.g. dataset.builder_config), or across the metrics with 'metrics'.",
)
_EVAL = flags.DEFINE_bool(
  'eval',
  False,
  "Final metrics from each run's eval/metrics.json (eval.py's evaluation, with "
  'the config it evaluated) instead of its last validation.',
)
_OUT = flags.DEFINE_string(
  'out', None, 'Folder for report.md and curves.png (default: the first path).'
)


def main(argv):
  paths = argv[1:]
  if not paths:
    raise app.UsageError('Give one or more training workdirs, or folders of them.')
  try:
    print(
      compare.write_report(
        paths,
        _OUT.value or paths[0],
        metrics=_METRICS.value or None,
        against=_AGAINST.value,
        from_eval=_EVAL.value,
      ),
      end='',
    )
  except (ValueError, FileNotFoundError) as error:
    # Bad input is reported in one sentence naming the path or metric, not as a traceback.
    sys.exit(f'compare.py: {error}')


if __name__ == '__main__':
  app.run(main)
