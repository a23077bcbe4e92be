"""The mechanisms study's table and figure (studies/mechanisms.py writes the JSON they read)."""

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
import numpy as np

# (JSON key, column title, format) of the table, in order.
COLUMNS = (
  ('bits_per_character', 'held-out bits/char', '{:.3f}'),
  ('recall_4', 'MQAR 4 pairs', '{:.1%}'),
  ('recall_8', 'MQAR 8 pairs', '{:.1%}'),
  ('sink_share', 'first-token share', '{:.1%}'),
  ('largest_activation', 'largest activation', '{:.1f}'),
  ('cache_bytes_per_token', 'cache bytes/token', '{:,.0f}'),
  ('train_tokens_per_second', 'train tokens/s', '{:,.0f}'),
  ('decode_tokens_per_second', 'decode tokens/s at 2,048', '{:.1f}'),
  ('parameters', 'parameters', '{:,}'),
)


def _cell(row: dict, key: str, form: str) -> str:
  value = row.get(key)
  if value is None or (isinstance(value, float) and np.isnan(value)):
    return 'n/a'
  return form.format(value)


def row_line(row: dict, seconds: float) -> str:
  """One progress line of a finished mechanism."""
  cells = ', '.join(f'{title} {_cell(row, key, form)}' for key, title, form in COLUMNS)
  return f'{row["name"]}: {cells} ({seconds:.0f} s)'


def markdown(result: dict) -> str:
  """The table, one row per mechanism."""
  lines = [
    '| mechanism | ' + ' | '.join(title for _, title, _ in COLUMNS) + ' |',
    '|---|' + '---|' * len(COLUMNS),
  ]
  lines += [
    f'| {row["name"]} | ' + ' | '.join(_cell(row, key, form) for key, _, form in COLUMNS) + ' |'
    for row in result['rows']
  ]
  return '\n'.join(lines)


def save_figure(path: str, result: dict) -> None:
  """Four panels, one mark or bar per mechanism: held-out bits per character against cache bytes
  per token (log), MQAR accuracy at both pair counts, the first-token share, decoding tokens/s."""
  rows = result['rows']
  names = [row['name'] for row in rows]
  figure = Figure(figsize=(13, 9), dpi=110)
  quality, recall, sink, speed = figure.subplots(2, 2).ravel()
  for row in rows:
    quality.scatter(row['cache_bytes_per_token'], row['bits_per_character'], s=30)
    quality.annotate(
      row['name'],
      (row['cache_bytes_per_token'], row['bits_per_character']),
      textcoords='offset points',
      xytext=(4, 3),
      fontsize=8,
    )
  quality.set_xscale('log')
  quality.set(
    xlabel=f'cache bytes per token of context ({result["decode_context"]:,} tokens, log scale)',
    ylabel='held-out bits per character (lower is better)',
    title='Quality against cache size',
  )
  positions = np.arange(len(rows))
  pairs = result['recall_pairs']
  width = 0.8 / len(pairs)
  for k, count in enumerate(pairs):
    values = [100 * row.get(f'recall_{count}', np.nan) for row in rows]
    recall.bar(positions + k * width, values, width, label=f'{count} key-value pairs')
  recall.set(ylabel='MQAR answer accuracy (%)', title='Associative recall', ylim=(0, 100))
  recall.legend(fontsize=8)
  shares = np.array([100 * row['sink_share'] for row in rows])
  sink.bar(positions, np.nan_to_num(shares), color='tab:purple')
  for x in positions[np.isnan(shares)]:  # no softmax-like weights: a delta-rule stack
    sink.text(x, 0, 'n/a', ha='center', va='bottom', fontsize=8)
  sink.set(ylabel='attention on the first position (%)', title='The attention sink')
  speed.bar(positions, [row['decode_tokens_per_second'] for row in rows], color='tab:green')
  speed.set(
    ylabel='tokens/s (one row)',
    title=f'Decoding after a {result["decode_context"]:,}-token context',
  )
  for axes in (recall, sink, speed):
    axes.set_xticks(positions + (width * (len(pairs) - 1) / 2 if axes is recall else 0))
    axes.set_xticklabels(names, rotation=35, ha='right', fontsize=8)
  for axes in (quality, recall, sink, speed):
    axes.grid(True, alpha=0.3)
  model = result['model']
  figure.suptitle(
    f'Attention mechanisms from scratch: {model["num_layers"]} layers, width {model["d_model"]}, '
    f'{model["num_heads"]} heads; {result["book_steps"]} steps of {result["batch"]} x '
    f'{result["seq_length"]} characters; MQAR {result["recall_steps"]} steps'
  )
  figure.tight_layout()
  FigureCanvasAgg(figure).print_png(path)
