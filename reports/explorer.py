"""The attention explorer: one self-contained HTML page of the evaluated examples' attention.

`eval.py` writes `WORKDIR/eval/explorer.html` (open it in a web browser) from the records of the
task's `explore` hook. The page holds its data as JSON and its code (explorer.js, read from beside
this file) inline: it opens offline from the file system, with no network and no build step.
Users' text is data: the JSON is escaped so that no corpus line can close its script element, and
the page's code puts text into the document with `textContent` only.

A record (one per example) is `{'index', 'reference', 'prediction', 'correct' (bool or None),
'views': [view, ...]}`; a view is one of
  - `{'kind': 'attention', 'maps': [{'name', 'rows': [T tokens], 'cols': [S tokens],
    'weights': [L, N, T, S]}, ...], 'notes': [sentences] (optional)}`: head view, model view and
    matrix (alignment) view; a map with negative weights (a differential layer's `A_1 - λ A_2`,
    a delta rule's attention form) is drawn on a signed scale; a note says what is not a map
    (a layer that forms no weights);
  - `{'kind': 'document', 'tokens': [[words] per sentence], 'word': [[weights]], 'sentence':
    [weights] or None, 'key': [key sentence indices]}`: the HAN shading;
  - `{'kind': 'image', 'pixels': uint8 [H, W, C], 'maps': [(name, weights [gh, gw]), ...]}`:
    the image with one map at a time drawn over it as patches;
  - `{'kind': 'hops', 'sentences', 'weights': [K, M], 'supporting': [indices]}`;
  - `{'kind': 'time', 'panels': [(name, values [rows, T]), ...]}`: values over time (NTM);
  - `{'kind': 'kept', 'name', 'tokens': [S tokens], 'rows': [R names], 'kept': bool [R, S]}`:
    which context positions each key/value head kept under a press (KV-cache compression);
  - `{'kind': 'gate', 'name', 'tokens': [T tokens], 'layers': [(name, values [N, T]), ...]}`:
    each layer's output gate (gated attention), a heads x positions strip per layer;
  - `{'kind': 'selected', 'name', 'tokens': [T tokens], 'layers': [(name, bool [T, S]), ...]}`:
    the keys each query selected, per layer (DeepSeek Sparse Attention's indexer).
"""

import base64
from collections.abc import Sequence
import io
import json
import os
from typing import Any

import numpy as np

FILE = 'explorer.html'
SCALE = 1000  # weights are written as integers in thousandths (3 decimals)
DENSE_KEYS = 128  # rows with more keys than this keep only their TOP_K largest weights
TOP_K = 16
_HERE = os.path.dirname(os.path.abspath(__file__))
_CSS = """
body{font:13px system-ui,sans-serif;margin:0;display:flex;color:#222}
#side{width:260px;border-right:1px solid #ccc;height:100vh;overflow:auto;padding:6px;flex:none}
#main{padding:8px 14px;overflow:auto;height:100vh;flex:1}
.ex{cursor:pointer;padding:2px 4px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.ex.on{background:#dde8f5}.bad{color:#b00}.good{color:#070}
.meta td{padding:1px 8px 1px 0;vertical-align:top}.meta td:first-child{color:#666}
.controls{margin:6px 0}.controls>*{margin-right:10px}
.tok text{font:12px monospace}.note{color:#a50;margin:4px 0}.tok rect{fill:#1f77b4;fill-opacity:0}
.grid{display:grid;gap:4px}.grid canvas{border:1px solid #ccc;cursor:pointer}
.cbar{display:inline-block;width:120px;height:10px;vertical-align:middle;margin:0 4px}
.w{padding:1px 2px;margin:0 1px}.bar{display:inline-block;height:10px;background:#1f77b4}
table.hops td{padding:2px 6px}.readout{font:12px monospace;min-height:16px;margin:4px 0}
"""


def quantize(values) -> list[int]:
  """Weights as integers in thousandths (row-major), the page's compact encoding."""
  return np.rint(np.asarray(values, np.float64) * SCALE).astype(int).ravel().tolist()


def encode_map(name: str, rows: Sequence[str], cols: Sequence[str], weights) -> dict[str, Any]:
  """One attention map `weights [L, N, T, S]` for the page: dense thousandths, or for long keys
  (S > DENSE_KEYS) each row's TOP_K largest weights and their key positions (`idx`)."""
  weights = np.asarray(weights, np.float32)
  if weights.ndim != 4 or weights.shape[2:] != (len(rows), len(cols)):
    raise ValueError(
      f'Attention map {name!r}: weights of shape {weights.shape} do not match '
      f'{len(rows)} row and {len(cols)} column tokens as [L, N, T, S].'
    )
  if not np.isfinite(weights).all():
    raise ValueError(f'Attention map {name!r}: its weights are not all finite.')
  signed = bool((weights < 0).any())  # drawn on a signed scale; long rows keep their largest |w|
  encoded = dict(
    name=name,
    rows=[str(t) for t in rows],
    cols=[str(t) for t in cols],
    shape=list(weights.shape),
    topk=0,
    signed=signed,
  )
  if weights.shape[3] <= DENSE_KEYS:
    return dict(encoded, w=quantize(weights))
  size = np.abs(weights) if signed else weights
  idx = np.argsort(-size, axis=-1, kind='stable')[..., :TOP_K]  # [L, N, T, K]
  return dict(
    encoded,
    topk=TOP_K,
    idx=idx.ravel().tolist(),
    w=quantize(np.take_along_axis(weights, idx, axis=-1)),
  )


def _png(pixels) -> str:
  """A uint8 image [H, W, C] as a PNG data URI (grey for C = 1)."""
  from matplotlib import image  # pylint: disable=g-import-not-at-top

  pixels = np.asarray(pixels)
  buffer = io.BytesIO()
  if pixels.ndim == 3 and pixels.shape[-1] == 1:
    image.imsave(buffer, pixels[..., 0], cmap='gray', vmin=0, vmax=255, format='png')
  else:
    image.imsave(buffer, pixels, format='png')
  return 'data:image/png;base64,' + base64.b64encode(buffer.getvalue()).decode('ascii')


def encode_view(view: dict[str, Any]) -> dict[str, Any]:
  """A task's view (see the module docstring) with its arrays in the page's encoding."""
  kind = view['kind']
  if kind == 'attention':
    return dict(
      kind=kind,
      maps=[encode_map(m['name'], m['rows'], m['cols'], m['weights']) for m in view['maps']],
      notes=[str(note) for note in view.get('notes', ())],
    )
  if kind in ('gate', 'selected'):
    return _encode_layers(view)
  if kind == 'document':
    sentence = view.get('sentence')
    return dict(
      kind=kind,
      tokens=[[str(t) for t in s] for s in view['tokens']],
      word=[quantize(w) for w in view['word']],
      key=[int(k) for k in view['key']],
      sentence=None if sentence is None else quantize(sentence),
    )
  if kind == 'image':
    maps = [dict(name=str(name), grid=list(np.shape(w)), w=quantize(w)) for name, w in view['maps']]
    return dict(kind=kind, png=_png(view['pixels']), maps=maps)
  if kind == 'hops':
    weights = np.asarray(view['weights'])
    return dict(
      kind=kind,
      sentences=[str(s) for s in view['sentences']],
      shape=list(weights.shape),
      w=quantize(weights),
      supporting=[int(i) for i in view['supporting']],
    )
  if kind == 'time':
    return dict(
      kind=kind,
      panels=[
        dict(name=str(name), shape=list(np.shape(v)), w=quantize(v)) for name, v in view['panels']
      ],
    )
  if kind == 'kept':
    kept = np.asarray(view['kept'], bool)
    if kept.shape != (len(view['rows']), len(view['tokens'])):
      raise ValueError(
        f'Kept view {view["name"]!r}: kept of shape {kept.shape} does not match '
        f'{len(view["rows"])} rows and {len(view["tokens"])} tokens.'
      )
    return dict(
      kind=kind,
      name=str(view['name']),
      tokens=[str(t) for t in view['tokens']],
      rows=[str(r) for r in view['rows']],
      kept=[''.join('1' if k else '0' for k in row) for row in kept],  # a row: 1 kept, 0 dropped
    )
  raise ValueError(
    f'Explorer view kind {kind!r} is not one of attention, document, image, hops, time, kept, '
    'gate, selected.'
  )


def _encode_layers(view: dict[str, Any]) -> dict[str, Any]:
  """A gate view's `[N, T]` values per layer (thousandths), or a selected view's `[T, S]` keys
  per layer (a row a string, 1 selected, 0 not), each checked against the tokens."""
  kind, tokens = view['kind'], [str(t) for t in view['tokens']]
  layers = []
  for name, values in view['layers']:
    values = np.asarray(values, bool if kind == 'selected' else np.float64)
    wanted = len(tokens) if kind == 'selected' else values.shape[0]
    if values.ndim != 2 or values.shape != (wanted, len(tokens)):
      raise ValueError(
        f'{kind.capitalize()} view {view["name"]!r}, {name}: values of shape {values.shape} '
        f'do not match {len(tokens)} tokens.'
      )
    if kind == 'selected':
      encoded = [''.join('1' if k else '0' for k in row) for row in values]
    else:
      encoded = quantize(values)
    layers.append(dict(name=str(name), shape=list(values.shape), values=encoded))
  return dict(kind=kind, name=str(view['name']), tokens=tokens, layers=layers)


def encode_record(record: dict[str, Any]) -> dict[str, Any]:
  """A task's record for the page: text as strings, correctness as true/false/null."""
  correct = record.get('correct')
  return dict(
    index=int(record['index']),
    reference=str(record.get('reference', '')),
    prediction=str(record.get('prediction', '')),
    correct=None if correct is None else bool(correct),
    views=[encode_view(v) for v in record['views']],
  )


def safe_json(data: Any) -> str:
  """JSON that cannot end the script element it sits in, whatever text it carries: `<`, `>`
  and `&` become \\u escapes, which JSON.parse reads back as the same characters."""
  text = json.dumps(data, separators=(',', ':'), ensure_ascii=False, allow_nan=False)
  for char, escape in (
    ('&', '\\u0026'),
    ('<', '\\u003c'),
    ('>', '\\u003e'),
    ('\u2028', '\\u2028'),
    ('\u2029', '\\u2029'),
  ):
    text = text.replace(char, escape)
  return text


def page(
  records: Sequence[dict[str, Any]], *, title: str, metrics: dict[str, Any] | None = None
) -> str:
  """The explorer page: the encoded records and metrics as JSON, the page's code inline."""
  data = dict(
    title=title,
    metrics={k: v for k, v in (metrics or {}).items() if isinstance(v, (int, float, str))},
    examples=[encode_record(r) for r in records],
  )
  with open(os.path.join(_HERE, 'explorer.js'), encoding='utf-8') as f:
    script = f.read()
  return (
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
    '<meta name="viewport" content="width=device-width">'
    '<title>attention explorer</title>\n'
    f'<style>{_CSS}</style></head>\n<body><div id="side"></div><div id="main"></div>\n'
    f'<script type="application/json" id="explorer-data">{safe_json(data)}</script>\n'
    f'<script>\n{script}</script>\n</body></html>\n'
  )


def write(
  out_dir: str,
  records: Sequence[dict[str, Any]],
  *,
  title: str,
  metrics: dict[str, Any] | None = None,
) -> str:
  """Writes `out_dir/explorer.html`; returns its path."""
  path = os.path.join(out_dir, FILE)
  with open(path, 'w', encoding='utf-8') as f:
    f.write(page(records, title=title, metrics=metrics))
  return path
