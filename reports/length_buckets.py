"""Test BLEU by source length, one line per model: Bahdanau et al. (2015)'s Figure 2 on your runs.

    python length_buckets.py runs/tsv runs/gru runs/gru0 --out=docs/assets/lengths.png

Each run is a workdir that `eval.py` evaluated (its `eval/samples.jsonl`). The test sentences are
put into `--buckets` buckets of (about) equal size by the number of words of their source, the
same buckets for every run (the runs must have evaluated the same sentences), and each bucket's
corpus BLEU (sacreBLEU, 13a, against the raw references) is drawn at its mean source length. The
table printed beside the figure has each bucket's range, size, BLEU and chrF per run.
"""

import json
import os

from matplotlib.figure import Figure
import numpy as np

from tasks.translation import text_scores
from training import layout


def read_samples(workdir: str) -> list[dict]:
  """The predicted examples of `workdir`'s last evaluation, in index order."""
  path = layout.eval_file(workdir, layout.SAMPLES_JSONL)
  if not os.path.exists(path):
    raise FileNotFoundError(
      f'{workdir}: no {layout.EVAL_DIR}/{layout.SAMPLES_JSONL}; run eval.py --workdir={workdir}'
    )
  with open(path, encoding='utf-8') as f:
    return sorted((json.loads(line) for line in f), key=lambda s: s['index'])


def bucket_edges(lengths: np.ndarray, buckets: int) -> list[tuple[int, int]]:
  """`buckets` ranges `[low, high]` of source lengths holding about equal shares of `lengths`
  (quantiles; a length never straddles two buckets, so sizes may differ)."""
  cuts = np.quantile(lengths, np.linspace(0, 1, buckets + 1))
  edges, low = [], int(lengths.min())
  for cut in cuts[1:-1]:
    high = int(np.floor(cut))
    if high >= low:
      edges.append((low, high))
      low = high + 1
  edges.append((low, int(lengths.max())))
  return edges


def by_length(runs: dict[str, list[dict]], buckets: int) -> list[dict]:
  """One row per bucket: its length range, size, mean source length and each run's scores."""
  first = next(iter(runs.values()))
  for name, samples in runs.items():
    if [s['source'] for s in samples] != [s['source'] for s in first]:
      raise ValueError(f'{name} evaluated other sentences than {next(iter(runs))}.')
  lengths = np.array([len(s['source'].split()) for s in first])
  rows = []
  for low, high in bucket_edges(lengths, buckets):
    chosen = np.flatnonzero((lengths >= low) & (lengths <= high))
    row = dict(low=low, high=high, size=len(chosen), mean_length=float(lengths[chosen].mean()))
    for name, samples in runs.items():
      hypotheses = [samples[i]['hypothesis'] for i in chosen]
      row[name] = text_scores(hypotheses, [samples[i]['reference'] for i in chosen])
    rows.append(row)
  return rows


def figure(rows: list[dict], names: list[str]) -> Figure:
  fig = Figure(figsize=(6.4, 4.2), layout='constrained')
  ax = fig.add_subplot()
  x = [row['mean_length'] for row in rows]
  for name in names:
    ax.plot(x, [row[name]['bleu'] for row in rows], marker='o', label=name)
  ax.set_xticks(x, [f'{r["low"]}-{r["high"]}\n({r["size"]})' for r in rows], fontsize=8)
  ax.set_xlabel('source length in words (sentences in the bucket)')
  ax.set_ylabel('test BLEU')
  ax.set_ylim(bottom=0)  # from zero, so gaps read as the share of the score they are
  ax.set_title('BLEU by source length')
  ax.grid(alpha=0.3)
  ax.legend(loc='lower right')
  return fig


def report(runs: list[str], buckets: int = 3, out: str = '') -> list[dict]:
  """Prints each bucket's BLEU / chrF per run as a Markdown table and, given `out`, draws the
  figure there; returns `by_length`'s rows.

  Args:
    runs: evaluated workdirs; NAME=WORKDIR names a line (else the folder's name does).
    buckets: how many buckets of source lengths.
    out: the PNG to write ('' for none).
  """
  named = [run.split('=', 1) if '=' in run else (os.path.basename(run), run) for run in runs]
  samples = {name: read_samples(path) for name, path in named}
  rows = by_length(samples, buckets)
  print('| source words | sentences | ' + ' | '.join(f'{n} BLEU / chrF' for n in samples) + ' |')
  print('|---|---|' + '---|' * len(samples))
  for row in rows:
    scores = ' | '.join(f'{row[n]["bleu"]:.1f} / {row[n]["chrf"]:.1f}' for n in samples)
    print(f'| {row["low"]}-{row["high"]} | {row["size"]} | {scores} |')
  if out:
    figure(rows, list(samples)).savefig(out, dpi=150)
    print(f'Wrote {out}.')
  return rows


if __name__ == '__main__':
  raise SystemExit(
    'python -m reports.length_buckets is now python length_buckets.py, with the same flags.'
  )
