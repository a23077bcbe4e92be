// The attention explorer's page code (inlined by reports/explorer.py). Plain DOM, no library.
// Text from the data goes into the page with textContent only: it is never parsed as markup.
'use strict';
const DATA = JSON.parse(document.getElementById('explorer-data').textContent);
const SVGNS = 'http://www.w3.org/2000/svg';
const MAX_LINES = 2000;   // lines drawn without a hovered token, the strongest first
const HOVER_LINES = 64;   // lines drawn from or to a hovered token
const state = {example: 0, map: 0, layer: 0, head: -1, tab: null, errorsFirst: false,
               image: 0, threshold: 0.1, keptRow: -1, selectedLayer: 0};

function el(tag, attrs, text, ns) {
  const e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = String(text);
  return e;
}
function add(parent, ...children) { children.forEach(c => parent.appendChild(c)); return parent; }
function child(parent, c) { parent.appendChild(c); return c; }  // returns the child
function colour(w) {  // white to dark blue
  return `rgb(${Math.round(255 - 224 * w)},${Math.round(255 - 136 * w)},${Math.round(255 - 75 * w)})`;
}
function colourBar(label) {
  const bar = el('span', {class: 'cbar', style: `background:linear-gradient(to right,${colour(0)},${colour(1)})`});
  return add(el('span', {class: 'legend'}), el('span', {}, `${label} 0`), bar, el('span', {}, '1'));
}
// Signed maps (a differential layer's A1 - λ A2, a delta rule's attention form): red below 0,
// blue above, as strong as |w| over the map's peak.
function signedRgb(w, peak) {
  const v = Math.min(1, Math.abs(w) / peak);
  return w < 0 ? [255 - 41 * v, 255 - 216 * v, 255 - 215 * v] : [255 - 224 * v, 255 - 136 * v, 255 - 75 * v];
}
function signedBar(peak) {
  const [lo, hi] = [signedRgb(-peak, peak), signedRgb(peak, peak)].map(c => `rgb(${c.map(Math.round)})`);
  const bar = el('span', {class: 'cbar', style: `background:linear-gradient(to right,${lo},#fff,${hi})`});
  return add(el('span', {class: 'legend'}), el('span', {}, `signed weight ${(-peak).toFixed(3)}`), bar,
             el('span', {}, peak.toFixed(3)));
}
function peakOf(m) { return Math.max(1e-9, ...m.w.map(w => Math.abs(w) / 1000)); }

// A map's row t (layer l, head h; h < 0 = mean over heads) as S weights.
function row(m, l, h, t) {
  const [, N, T, S] = m.shape, k = m.topk || S, out = new Float64Array(S);
  const heads = h < 0 ? [...Array(N).keys()] : [h];
  for (const hh of heads) {
    const base = ((l * N + hh) * T + t) * k;
    for (let j = 0; j < k; j++) out[m.topk ? m.idx[base + j] : j] += m.w[base + j] / 1000 / heads.length;
  }
  return out;
}
function matrix(m, l, h) { return [...Array(m.shape[2]).keys()].map(t => row(m, l, h, t)); }

function order() {
  const idx = DATA.examples.map((_, i) => i);
  if (state.errorsFirst) idx.sort((a, b) => (DATA.examples[a].correct === false ? 0 : 1) - (DATA.examples[b].correct === false ? 0 : 1) || a - b);
  return idx;
}

function sidebar() {
  const side = document.getElementById('side');
  side.textContent = '';
  add(side, el('h3', {}, 'attention explorer'), el('div', {}, DATA.title));
  const box = el('input', {type: 'checkbox', id: 'errors-first'});
  box.checked = state.errorsFirst;
  box.onchange = () => { state.errorsFirst = box.checked; sidebar(); };
  add(side, add(el('label', {}), box, document.createTextNode(' errors first')));
  const list = child(side, el('div', {id: 'examples'}));
  for (const i of order()) {
    const ex = DATA.examples[i], mark = ex.correct === null ? '·' : ex.correct ? '✓' : '✗';
    const item = el('div', {class: 'ex' + (i === state.example ? ' on' : ''), 'data-example': i},
                    `${mark} #${ex.index} ${ex.prediction}`);
    if (ex.correct !== null) item.classList.add(ex.correct ? 'good' : 'bad');
    item.onclick = () => select(i);
    list.appendChild(item);
  }
  const metrics = el('table', {class: 'meta'});
  for (const [k, v] of Object.entries(DATA.metrics))
    add(metrics, add(el('tr'), el('td', {}, k), el('td', {}, typeof v === 'number' ? +v.toFixed(4) : v)));
  add(side, el('h4', {}, 'metrics'), metrics);
}

function select(i) {
  Object.assign(state, {example: i, map: 0, layer: 0, head: -1, tab: null, image: 0, keptRow: -1, selectedLayer: 0});
  render();
}

function render() {
  sidebar();
  const main = document.getElementById('main');
  main.textContent = '';
  const ex = DATA.examples[state.example];
  if (!ex) { main.appendChild(el('p', {}, 'No examples were evaluated.')); return; }
  const meta = el('table', {class: 'meta'});
  const verdict = ex.correct === null ? 'not scored' : ex.correct ? 'correct' : 'wrong';
  const tone = ex.correct === null ? '' : ex.correct ? 'good' : 'bad';  // as the sidebar marks it
  for (const [k, v] of [['example', ex.index], ['reference', ex.reference], ['prediction', ex.prediction], ['', verdict]])
    add(meta, add(el('tr'), el('td', {}, k), el('td', {class: k === '' ? tone : ''}, v)));
  main.appendChild(meta);
  if (!ex.views.length) main.appendChild(el('p', {}, 'This model has no attention to show.'));
  for (const view of ex.views) main.appendChild(VIEWS[view.kind](view));
}

function picker(label, id, options, value, onchange) {
  const s = el('select', {id});
  options.forEach(([v, text]) => { const o = el('option', {value: v}, text); o.selected = v === value; s.appendChild(o); });
  s.onchange = () => onchange(+s.value);
  return add(el('label', {}, label + ' '), s);
}

function attentionView(view) {
  const box = el('div', {class: 'attention'});
  (view.notes || []).forEach(note => box.appendChild(el('div', {class: 'note'}, note)));
  if (!view.maps.length) return box;
  const m = view.maps[Math.min(state.map, view.maps.length - 1)], [L, N, T, S] = m.shape;
  m.peak = m.signed ? peakOf(m) : 1;
  state.tab = state.tab || (L * N === 1 ? 'matrix' : 'head');
  const controls = child(box, el('div', {class: 'controls'}));
  const rerender = () => render();
  controls.appendChild(picker('attention', 'map', view.maps.map((x, i) => [i, x.name]), state.map,
                              v => { Object.assign(state, {map: v, layer: 0, head: -1}); rerender(); }));
  controls.appendChild(picker('layer', 'layer', [...Array(L).keys()].map(l => [l, String(l)]), state.layer,
                              v => { state.layer = v; rerender(); }));
  controls.appendChild(picker('head', 'head', [[-1, 'mean'], ...[...Array(N).keys()].map(h => [h, String(h)])],
                              state.head, v => { state.head = v; rerender(); }));
  for (const tab of ['head', 'model', 'matrix']) {
    const b = el('button', {id: 'tab-' + tab}, tab + ' view');
    b.disabled = tab === state.tab;
    b.onclick = () => { state.tab = tab; rerender(); };
    controls.appendChild(b);
  }
  if (m.topk) controls.appendChild(el('span', {}, `(${S} keys: each row keeps its ${m.topk} largest weights)`));
  if (m.signed) controls.appendChild(el('span', {id: 'signed'}, '(signed weights: red below 0, blue above)'));
  const body = child(box, el('div', {id: 'view-' + state.tab}));
  if (state.tab === 'head') headView(body, m);
  else if (state.tab === 'model') modelView(body, m);
  else matrixView(body, m);
  return box;
}

// bertviz's head view: queries left, keys right, lines as opaque as the weight.
function headView(box, m) {
  const [, , T, S] = m.shape, RH = 16, X0 = 170, X1 = 400;
  const weights = matrix(m, state.layer, state.head);
  const svg = el('svg', {width: 580, height: RH * Math.max(T, S) + 8, id: 'headview'}, undefined, SVGNS);
  const lines = child(svg, el('g', {}, undefined, SVGNS));
  const token = (text, x, i, side) => {
    const g = el('g', {class: 'tok', 'data-side': side, 'data-i': i, 'data-w': '0'}, undefined, SVGNS);
    add(g, el('rect', {x: side === 'row' ? x - 160 : x, y: i * RH + 2, width: 160, height: RH - 2}, undefined, SVGNS),
        el('text', {x: side === 'row' ? x - 4 : x + 4, y: i * RH + 13, 'text-anchor': side === 'row' ? 'end' : 'start'}, text, SVGNS));
    g.onmouseenter = () => hover(side, i);
    g.onmouseleave = () => hover(null);
    svg.appendChild(g);
    return g;
  };
  const left = m.rows.map((t, i) => token(t, X0, i, 'row'));
  const right = m.cols.map((t, j) => token(t, X1, j, 'col'));
  const readout = el('div', {class: 'readout', id: 'readout'});
  function hover(side, i) {
    lines.textContent = '';
    [...left, ...right].forEach(g => { g.setAttribute('data-w', '0'); g.firstChild.style.fillOpacity = 0; });
    let pairs = [];
    if (side === 'row') weights[i].forEach((w, s) => pairs.push([i, s, w]));
    else if (side === 'col') weights.forEach((r, t) => pairs.push([t, i, r[i]]));
    else weights.forEach((r, t) => r.forEach((w, s) => { if (Math.abs(w) / m.peak >= state.threshold) pairs.push([t, s, w]); }));
    if (side) (side === 'row' ? left : right)[i].firstChild.style.fillOpacity = 0.3;  // the hovered
    if (side) (side === 'row' ? right : left).forEach((g, j) => {
      const w = side === 'row' ? weights[i][j] : weights[j][i];
      g.setAttribute('data-w', w.toFixed(3)); g.firstChild.style.fillOpacity = Math.min(1, Math.abs(w) / m.peak);
      g.firstChild.style.fill = w < 0 ? '#d62728' : '';
    });
    pairs.sort((a, b) => Math.abs(b[2]) - Math.abs(a[2]));
    pairs = pairs.slice(0, side ? HOVER_LINES : MAX_LINES).filter(p => Math.abs(p[2]) / m.peak >= 0.005);
    for (const [t, s, w] of pairs)
      lines.appendChild(el('line', {x1: X0, y1: t * RH + 9, x2: X1, y2: s * RH + 9, stroke: w < 0 ? '#d62728' : '#1f77b4',
                                    'stroke-width': 2, 'stroke-opacity': Math.min(1, Math.abs(w) / m.peak).toFixed(3)}, undefined, SVGNS));
    readout.textContent = side ? `${side === 'row' ? 'from' : 'to'} ${(side === 'row' ? m.rows : m.cols)[i]}: ` +
      (side === 'row' ? weights[i] : weights.map(r => r[i])).map(w => w.toFixed(3)).join(' ') : '';
    readout.setAttribute('data-hover', side ? `${side}:${i}` : '');
  }
  const slider = el('input', {type: 'range', min: 0, max: 0.5, step: 0.01, value: state.threshold, id: 'threshold'});
  slider.oninput = () => { state.threshold = +slider.value; hover(null); };
  add(box, add(el('div', {class: 'controls'}), document.createTextNode('lines above '), slider,
               el('span', {}, 'hover a token: what it attends to (left) or what attends to it (right)')),
      readout, svg);
  box.hover = hover;
  window.explorer.hover = hover;
  hover(null);
}

// A [T][S] matrix of weights into a canvas of T x S pixels; `peak` > 0: signed, over that peak.
function paint(canvas, rows, peak) {
  const T = rows.length, S = rows[0] ? rows[0].length : 0;
  canvas.width = S; canvas.height = T;
  if (!T || !S) return;
  const ctx = canvas.getContext('2d'), img = ctx.createImageData(S, T);
  rows.forEach((r, t) => r.forEach((w, s) => {
    const k = 4 * (t * S + s), v = Math.min(1, w);
    img.data.set(peak ? [...signedRgb(w, peak), 255] : [255 - 224 * v, 255 - 136 * v, 255 - 75 * v, 255], k);
  }));
  ctx.putImageData(img, 0, 0);
}

// Every layer x head as a thumbnail, painted when scrolled into view; a click opens it.
function modelView(box, m) {
  const [L, N, T, S] = m.shape, size = 90;
  const grid = child(box, el('div', {class: 'grid', style: `grid-template-columns:repeat(${N},${size + 2}px)`}));
  const lazy = 'IntersectionObserver' in window ? new IntersectionObserver(entries => entries.forEach(e => {
    if (e.isIntersecting) { e.target.draw(); lazy.unobserve(e.target); }
  })) : null;
  for (let l = 0; l < L; l++) for (let h = 0; h < N; h++) {
    const c = el('canvas', {title: `layer ${l}, head ${h}`, 'data-layer': l, 'data-head': h,
                            style: `width:${size}px;height:${Math.round(size * Math.min(2, T / S))}px;image-rendering:pixelated`});
    c.draw = () => { paint(c, matrix(m, l, h), m.signed && m.peak); c.setAttribute('data-drawn', '1'); };
    c.onclick = () => { Object.assign(state, {layer: l, head: h, tab: 'head'}); render(); };
    grid.appendChild(c);
    if (lazy) lazy.observe(c); else c.draw();
  }
  box.prepend(el('div', {}, 'rows: layers, columns: heads; click one to open it'), m.signed ? signedBar(m.peak) : colourBar('weight'));
}

// The matrix (a Seq2Seq's alignment): queries down, keys across; hover a cell.
function matrixView(box, m) {
  const [, , T, S] = m.shape, weights = matrix(m, state.layer, state.head);
  const cell = Math.max(1, Math.min(22, Math.floor(520 / Math.max(T, S))));
  const canvas = el('canvas', {id: 'matrix', style: `width:${S * cell}px;height:${T * cell}px;image-rendering:pixelated`});
  paint(canvas, weights, m.signed && m.peak);
  const readout = el('div', {class: 'readout', id: 'readout'}, 'hover a cell');
  const show = (t, s) => {
    readout.textContent = `${m.rows[t]} → ${m.cols[s]}: ${weights[t][s].toFixed(3)}; row: ` +
      weights[t].map(w => w.toFixed(3)).join(' ');
    readout.setAttribute('data-hover', `${t}:${s}`);
  };
  canvas.onmousemove = e => show(Math.min(T - 1, Math.floor(e.offsetY / cell)), Math.min(S - 1, Math.floor(e.offsetX / cell)));
  window.explorer.hover = (side, i) => show(side === 'row' ? i : 0, side === 'col' ? i : 0);
  const labels = (tokens, id) => add(el('ol', {id, start: 0, style: 'font:11px monospace;max-height:200px;overflow:auto'}),
                                     ...tokens.map(t => el('li', {}, t)));
  add(box, add(el('div', {}), m.signed ? signedBar(m.peak) : colourBar('weight')), readout, canvas,
      add(el('details', {}), el('summary', {}, `rows (${T}) and columns (${S})`), labels(m.rows, 'rows'), labels(m.cols, 'cols')));
}

function documentView(view) {
  const box = el('div', {class: 'document'});
  box.appendChild(add(el('div', {class: 'controls'}), el('span', {}, 'bar: sentence weight; ★: a key sentence (the data marks it); word background: word weight × √sentence weight'), colourBar('shade')));
  const scales = view.word.map((_, i) => view.sentence ? Math.sqrt(view.sentence[i] / 1000) : 1);
  const peak = Math.max(1e-9, ...view.word.flatMap((ws, i) => ws.map(w => w / 1000 * scales[i])));
  view.tokens.forEach((words, i) => {
    const line = child(box, el('div', {class: 'sentence', 'data-i': i}));
    if (view.sentence) add(line, el('span', {class: 'bar', style: `width:${view.sentence[i] / 10}px`}),
                           el('small', {}, ` ${(view.sentence[i] / 1000).toFixed(2)} `));
    line.appendChild(el('span', {style: 'display:inline-block;width:14px'}, view.key.includes(i) ? '★' : ''));
    words.forEach((word, j) => {
      const shade = view.word[i][j] / 1000 * scales[i] / peak;
      line.appendChild(el('span', {class: 'w', title: (view.word[i][j] / 1000).toFixed(3),
                                   style: `background:${colour(shade)};color:${shade > 0.55 ? '#fff' : '#000'}`}, word));
    });
  });
  return box;
}

// The image with one map drawn over it as its patches (no smoothing), scaled to its maximum.
function imageView(view) {
  const box = el('div', {class: 'image'}), map = view.maps[state.image], [gh, gw] = map.grid;
  const controls = child(box, el('div', {class: 'controls'}));
  controls.appendChild(picker('map', 'image-map', view.maps.map((x, i) => [i, `${i}: ${x.name}`]), state.image,
                              v => { state.image = v; render(); }));
  for (const [text, step] of [['◀', -1], ['▶', 1]]) {
    const b = child(controls, el('button', {}, text));
    b.onclick = () => { state.image = (state.image + step + view.maps.length) % view.maps.length; render(); };
  }
  const peak = Math.max(1, ...map.w);
  controls.appendChild(colourBar(`share of the peak (${(peak / 1000).toFixed(3)})`));
  const size = 280, canvas = child(box, el('canvas', {id: 'image', width: size, height: size}));
  const ctx = canvas.getContext('2d'), img = new Image();
  img.onload = () => {
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(img, 0, 0, size, size);
    map.w.forEach((w, k) => {
      const v = w / peak, x = (k % gw) * size / gw, y = Math.floor(k / gw) * size / gh;
      ctx.fillStyle = `rgba(255,${Math.round(200 * (1 - v))},0,${(0.7 * v).toFixed(3)})`;
      ctx.fillRect(x, y, size / gw, size / gh);
    });
    canvas.setAttribute('data-drawn', map.name);
  };
  img.src = view.png;
  const words = child(box, el('div', {class: 'readout'}));
  view.maps.forEach((x, i) => words.appendChild(el('span', {class: 'w', style: i === state.image ? 'background:#fd0' : ''}, x.name)));
  return box;
}

function hopsView(view) {
  const [K, M] = view.shape, table = el('table', {class: 'hops', id: 'hops'});
  add(table, add(el('tr'), el('th', {}, 'story'), el('th', {}, 'support'),
                 ...[...Array(K).keys()].map(k => el('th', {}, `hop ${k + 1}`))));
  view.sentences.forEach((s, i) => {
    const tr = child(table, add(el('tr'), el('td', {}, s), el('td', {}, view.supporting.includes(i) ? 'yes' : '')));
    for (let k = 0; k < K; k++) {
      const w = view.w[k * M + i] / 1000;
      tr.appendChild(el('td', {style: `background:${colour(w)};color:${w > 0.55 ? '#fff' : '#000'}`}, w.toFixed(3)));
    }
  });
  return add(el('div', {class: 'hops'}), colourBar('weight'), table);
}

// Values over time (NTM): one canvas per panel; hovering a step names its strongest slot.
function timeView(view) {
  const box = el('div', {class: 'time'}), readout = el('div', {class: 'readout', id: 'readout'}, 'hover a time step');
  add(box, colourBar('value'), readout);
  for (const p of view.panels) {
    const [R, T] = p.shape, cell = Math.max(3, Math.min(14, Math.floor(640 / T)));
    const rows = [...Array(R).keys()].map(r => [...Array(T).keys()].map(t => p.w[r * T + t] / 1000));
    const canvas = el('canvas', {style: `width:${T * cell}px;height:${R * cell}px;image-rendering:pixelated;display:block`});
    paint(canvas, rows);
    canvas.onmousemove = e => {
      const t = Math.min(T - 1, Math.floor(e.offsetX / cell)), col = rows.map(r => r[t]);
      const slot = col.indexOf(Math.max(...col));
      readout.textContent = `${p.name}, step ${t}: strongest row ${slot} (${col[slot].toFixed(3)})`;
      paint(canvas, rows);
      const ctx = canvas.getContext('2d');
      ctx.fillStyle = 'rgba(255,0,0,0.8)'; ctx.fillRect(t, slot, 1, 1);
    };
    add(box, el('div', {}, p.name), canvas);
  }
  return box;
}

// A press's kept positions: rows are the layers' key/value heads, columns the context's tokens,
// dark = kept; the tokens below are shaded by the share of heads that kept them, or, with a head
// picked (or its row clicked), that head's kept tokens dark and its dropped ones struck through.
function keptView(view) {
  const box = el('div', {class: 'kept'}), R = view.rows.length, S = view.tokens.length;
  const kept = view.kept.map(r => [...r].map(c => c === '1' ? 1 : 0));
  const share = view.tokens.map((_, s) => kept.reduce((n, r) => n + r[s], 0) / Math.max(1, R));
  const total = kept.reduce((n, r) => n + r.reduce((a, b) => a + b, 0), 0);
  const pick = v => { state.keptRow = v; render(); };
  add(box, el('div', {id: 'kept-summary'}, `${view.name}: ${total} of ${R * S} head positions kept ` +
                                           `(${(100 * total / Math.max(1, R * S)).toFixed(1)}%)`),
      add(el('div', {class: 'controls'}),
          picker('head', 'kept-row', [[-1, 'share of heads'], ...view.rows.map((n, i) => [i, n])], state.keptRow, pick),
          colourBar('kept')));
  const cell = Math.max(1, Math.min(12, Math.floor(900 / Math.max(1, S))));
  const height = Math.max(2, Math.min(12, Math.floor(480 / Math.max(1, R))));
  const canvas = el('canvas', {id: 'kept', style: `width:${S * cell}px;height:${R * height}px;image-rendering:pixelated;display:block`});
  paint(canvas, kept);
  const readout = el('div', {class: 'readout', id: 'readout'}, 'hover a cell: the head, the position and its token; click: that head');
  const at = e => [Math.min(R - 1, Math.floor(e.offsetY / height)), Math.min(S - 1, Math.floor(e.offsetX / cell))];
  canvas.onmousemove = e => {
    const [r, s] = at(e);
    readout.textContent = `${view.rows[r]}, position ${s} ${JSON.stringify(view.tokens[s])}: ` +
      `${kept[r][s] ? 'kept' : 'dropped'}; kept by ${Math.round(100 * share[s])}% of heads`;
  };
  canvas.onclick = e => pick(at(e)[0]);
  // Row names down the left, each at least 12 px below the last one shown; positions below.
  const labels = el('div', {style: `position:relative;width:130px;height:${R * height}px;font:10px monospace;flex:none`});
  let last = -12;
  view.rows.forEach((name, r) => {
    if (r * height - last < 12) return;
    labels.appendChild(el('div', {style: `position:absolute;top:${r * height}px;right:6px`}, name));
    last = r * height;
  });
  const axis = el('div', {style: 'margin-left:130px;font:10px monospace;color:#666'}, `positions 0 .. ${S - 1}, left to right`);
  const text = el('div', {id: 'kept-tokens', style: 'font:12px monospace;white-space:pre-wrap;margin-top:8px;line-height:1.6'});
  view.tokens.forEach((t, s) => {
    const w = state.keptRow < 0 ? share[s] : kept[state.keptRow][s];
    const style = state.keptRow >= 0 && !w ? 'color:#999;text-decoration:line-through'
      : `background:${colour(w)};color:${w > 0.55 ? '#fff' : '#000'}`;
    text.appendChild(el('span', {style, 'data-kept': state.keptRow < 0 ? share[s].toFixed(3) : String(w),
                                 title: `position ${s}: kept by ${Math.round(100 * share[s])}% of heads`}, t));
  });
  add(box, readout, add(el('div', {style: 'display:flex'}), labels, canvas), axis, text);
  return box;
}

// The output gate (gated attention): per layer a strip of heads (rows) x positions (columns),
// dark = open (the gate's mean over d_v); hovering a cell reads out the head, token and value.
function gateView(view) {
  const box = el('div', {class: 'gate'}), T = view.tokens.length;
  const readout = el('div', {class: 'readout', id: 'gate-readout'}, 'hover a cell: the head, the position and its gate');
  const cell = Math.max(3, Math.min(18, Math.floor(760 / Math.max(1, T))));
  add(box, el('div', {}, `${view.name}: rows heads, columns positions`), colourBar('gate'), readout);
  for (const layer of view.layers) {
    const [N] = layer.shape, rows = [...Array(N).keys()].map(h => layer.values.slice(h * T, (h + 1) * T).map(v => v / 1000));
    const canvas = el('canvas', {class: 'gate-strip', 'data-layer': layer.name,
                                 style: `width:${T * cell}px;height:${N * cell}px;image-rendering:pixelated;display:block`});
    paint(canvas, rows);
    canvas.onmousemove = e => {
      const h = Math.min(N - 1, Math.floor(e.offsetY / cell)), t = Math.min(T - 1, Math.floor(e.offsetX / cell));
      readout.textContent = `${layer.name}, head ${h}, position ${t} ${JSON.stringify(view.tokens[t])}: gate ${rows[h][t].toFixed(3)}`;
    };
    const mean = rows.map(r => r.reduce((a, b) => a + b, 0) / Math.max(1, T));
    add(box, el('div', {style: 'margin-top:8px'}, `${layer.name} (mean gate per head: ${mean.map(v => v.toFixed(2)).join(' ')})`), canvas);
  }
  return box;
}

// DeepSeek Sparse Attention: the keys each query selected, one layer at a time (queries down,
// keys across, dark = selected); hovering a query lists its selected keys.
function selectedView(view) {
  const box = el('div', {class: 'selected'}), T = view.tokens.length;
  const layer = view.layers[Math.min(state.selectedLayer, view.layers.length - 1)];
  const picked = layer.values.map(r => [...r].map(c => c === '1' ? 1 : 0));
  const counts = picked.map(r => r.reduce((a, b) => a + b, 0));
  add(box, add(el('div', {class: 'controls'}),
               picker('layer', 'selected-layer', view.layers.map((x, i) => [i, x.name]), state.selectedLayer,
                      v => { state.selectedLayer = v; render(); }), colourBar('selected')),
      el('div', {id: 'selected-summary'}, `${view.name}: each query selected ${Math.min(...counts)} to ${Math.max(...counts)} keys`));
  const cell = Math.max(2, Math.min(16, Math.floor(520 / Math.max(1, T))));
  const canvas = el('canvas', {id: 'selected', style: `width:${T * cell}px;height:${T * cell}px;image-rendering:pixelated;display:block`});
  paint(canvas, picked);
  const readout = el('div', {class: 'readout', id: 'selected-readout'}, 'hover a query (row): the keys it selected');
  canvas.onmousemove = e => {
    const t = Math.min(T - 1, Math.floor(e.offsetY / cell));
    const keys = picked[t].map((k, s) => k ? JSON.stringify(view.tokens[s]) : null).filter(x => x);
    readout.textContent = `query ${t} ${JSON.stringify(view.tokens[t])} selected ${keys.length}: ${keys.join(' ')}`;
  };
  add(box, readout, canvas);
  return box;
}

const VIEWS = {attention: attentionView, document: documentView, image: imageView, hops: hopsView, time: timeView,
               kept: keptView, gate: gateView, selected: selectedView};
window.explorer = {state, render, select, row,
                   set(changes) { Object.assign(state, changes); render(); }};
document.title = `attention explorer: ${DATA.title}`;
render();
