"""A document's attention as the hierarchical attention network's paper shows it (Yang et al. 2016):
one row per sentence with a bar for its sentence weight, each word shaded by its word weight, as a
PNG (`save_document_attention`) and as a small HTML page (`document_attention_html`)."""

from tasks.pictures import new_figure


def _shades(
  word_weights: list[list[float]], sentence_weights: list[float] | None
) -> list[list[float]]:
  """Per word, its weight times the square root of its sentence's (the HAN paper's display, so
  words of unimportant sentences stay pale), rescaled to [0, 1] by the document's largest."""
  scales = (
    [1.0] * len(word_weights) if sentence_weights is None else [s**0.5 for s in sentence_weights]
  )
  shades = [[w * scale for w in words] for words, scale in zip(word_weights, scales)]
  peak = max((w for words in shades for w in words), default=0.0)
  return [[w / peak if peak > 0 else 0.0 for w in words] for words in shades]


def save_document_attention(
  path: str,
  tokens: list[list[str]],
  word_weights: list[list[float]],
  sentence_weights: list[float] | None,
  key_sentences: list[int],
  title: str,
) -> None:
  """The HAN paper's figure as a PNG: one row per sentence, a bar for its sentence weight on the
  left, each word on a background as dark as its weight (see `_shades`); key sentences marked
  '*'."""
  import matplotlib
  from matplotlib.patches import Patch

  rows = len(tokens)
  figure = new_figure(figsize=(11, 0.38 * rows + 1.0))
  axes = figure.add_axes((0, 0, 1, 1))
  axes.set_xlim(0, 1)
  axes.set_ylim(rows + 1, 0)
  axes.axis('off')
  axes.text(0.01, 0.5, title, fontsize=9, va='center')
  renderer = figure.canvas.get_renderer()
  to_data = axes.transData.inverted()
  bar_width = 0.12
  for i, (words, shades) in enumerate(zip(tokens, _shades(word_weights, sentence_weights))):
    y = i + 1.5
    if sentence_weights is not None:
      axes.barh(y, bar_width * sentence_weights[i], height=0.6, left=0.01, color='tab:blue')
      axes.text(0.015 + bar_width, y, f'{sentence_weights[i]:.2f}', fontsize=7, va='center')
    marker = '*' if i in key_sentences else ' '
    x = 0.03 + bar_width + 0.04
    axes.text(x - 0.015, y, marker, fontsize=9, va='center')
    for word, shade in zip(words, shades):
      # White on the darker shades, black on the lighter ones: readable on every background.
      text = axes.text(
        x,
        y,
        word,
        fontsize=8,
        va='center',
        color='white' if shade > 0.55 else 'black',
        bbox=dict(
          boxstyle='square,pad=0.15',
          linewidth=0,
          facecolor=matplotlib.colormaps['Reds'](0.85 * shade),
        ),
      )
      extent = text.get_window_extent(renderer).transformed(to_data)
      x = extent.x1 + 0.008
  legend = [
    Patch(color=matplotlib.colormaps['Reds'](0.85 * v), label=f'{v:g}') for v in (0.25, 0.5, 1.0)
  ]
  legend.insert(0, Patch(color='tab:blue', label='bar: sentence weight'))
  legend.append(Patch(color='white', label='* key sentence (from the data)'))
  axes.legend(
    handles=legend,
    loc='upper right',
    fontsize=7,
    ncol=5,
    frameon=False,
    title='word shade (weight x sqrt(sentence weight), of the largest)',
    title_fontsize=7,
  )
  figure.savefig(path, dpi=100)


def document_attention_html(
  tokens: list[list[str]],
  word_weights: list[list[float]],
  sentence_weights: list[float] | None,
  key_sentences: list[int],
  title: str,
) -> str:
  """The same figure as a small self-contained HTML page (no scripts, no external files)."""
  import html  # pylint: disable=g-import-not-at-top

  lines = [
    '<!doctype html><meta charset="utf-8"><title>attention</title>',
    '<style>body{font:14px sans-serif} .row{display:flex;align-items:center;margin:3px 0}'
    ' .bar{height:12px;background:#1f77b4;margin-right:6px} .w{padding:1px 2px}'
    ' .bars{width:130px;display:flex;align-items:center} .key{width:14px}</style>',
    f'<p>{html.escape(title)}</p>',
  ]
  shades = _shades(word_weights, sentence_weights)
  for i, (words, weights) in enumerate(zip(tokens, word_weights)):
    bar = ''
    if sentence_weights is not None:
      bar = (
        f'<span class="bar" style="width:{100 * sentence_weights[i]:.0f}px"></span>'
        f'<small>{sentence_weights[i]:.2f}</small>'
      )
    spans = ''.join(
      f'<span class="w" style="background:rgba(214,39,40,{0.85 * shade:.2f})" '
      f'title="{weight:.3f}">{html.escape(word)}</span> '
      for word, weight, shade in zip(words, weights, shades[i])
    )
    key = '*' if i in key_sentences else ''
    lines.append(
      f'<div class="row"><span class="bars">{bar}</span><span class="key">{key}'
      f'</span><span>{spans}</span></div>'
    )
  return '\n'.join(lines) + '\n'
