"""The attention explorer (reports/explorer.py): its data encoding against NumPy, and its page in
headless Chromium: a tiny trained translation run end to end (no JavaScript errors, layer/head
pickers change the lines, hovering a token shows its row of the weights eval wrote), every view
kind rendered with a screenshot, a long GPT-sized map, and users' markup shown as text."""

import html
import json
import os
import re
import shutil
import subprocess
import time

import numpy as np
import pytest
from test_training import get_config, tiny

from reports import explorer, run_eval
import training

CHROMIUM = next(
  (
    shutil.which(name)
    for name in ('chromium', 'chromium-browser', 'google-chrome')
    if shutil.which(name)
  ),
  None,
)
needs_chromium = pytest.mark.skipif(
  CHROMIUM is None,
  reason='no Chromium binary found (Debian: apt-get install chromium); the '
  'explorer is tested in a real browser',
)
XSS = ('<img src=x onerror=alert(1)>', '</script><script>alert(2)</script>', 'a & b')


# `make test` runs the suite under mimalloc (training/allocator.py preloads it), and Chromium's
# own allocator traps (SIGTRAP) when another one is preloaded: the browser gets the environment
# without it.
BROWSER_ENV = {
  key: value
  for key, value in os.environ.items()
  if key not in ('LD_PRELOAD', 'MIMALLOC_PURGE_DELAY')
}


def _load(page: str, tmp_path, name: str, script: str) -> tuple[list[str], str]:
  """Writes `page` with `script` appended as its last element; returns Chromium's common
  arguments and the page's URL."""
  if script:
    page = page.replace('</body>', f'<script>{script}</script></body>')
  path = tmp_path / f'{name}.html'
  path.write_text(page, encoding='utf-8')
  return [
    CHROMIUM,
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--hide-scrollbars',
    f'--user-data-dir={tmp_path / "profile"}',
    '--virtual-time-budget=5000',
  ], path.as_uri()


def screenshot(page: str, tmp_path, name: str, script: str = '') -> None:
  """Saves a screenshot of `page` (after `script`) as tmp_path/NAME.png."""
  common, url = _load(page, tmp_path, name, script)
  subprocess.run(
    common + ['--window-size=1100,800', f'--screenshot={tmp_path / name}.png', url],
    capture_output=True,
    timeout=60,
    check=True,
    env=BROWSER_ENV,
  )
  assert os.path.getsize(f'{tmp_path / name}.png') > 5000


def browse(page: str, tmp_path, name: str, script: str = '', shot: bool = False):
  """Loads `page` (HTML text, `script` appended as the last element) in headless Chromium.

  Returns:
    (the document after the scripts ran, its console messages, the test script's JSON output
    from `<pre id="test-out">` or None).
  """
  common, url = _load(page, tmp_path, name, script)
  run = subprocess.run(
    common + ['--enable-logging=stderr', '--v=0', '--dump-dom', url],
    capture_output=True,
    text=True,
    timeout=60,
    check=True,
    env=BROWSER_ENV,
  )
  if shot:
    screenshot(page, tmp_path, name, script)
  console = [line for line in run.stderr.splitlines() if ':CONSOLE' in line]
  found = re.search(r'<pre id="test-out">(.*?)</pre>', run.stdout, re.S)
  return run.stdout, console, json.loads(html.unescape(found.group(1))) if found else None


def page_data(page: str) -> dict:
  """The JSON a page carries, as the page's own code reads it."""
  found = re.search(
    r'<script type="application/json" id="explorer-data">(.*?)</script>', page, re.S
  )
  return json.loads(found.group(1))


def test_maps_are_rounded_and_long_rows_keep_their_largest_weights(rng):
  weights = rng.dirichlet(np.ones(5), size=(2, 3, 4))  # [L, N, T, S]
  dense = explorer.encode_map('m', list('abcd'), list('vwxyz'), weights)
  assert dense['shape'] == [2, 3, 4, 5] and dense['topk'] == 0
  np.testing.assert_array_equal(dense['w'], np.rint(weights * 1000).ravel())
  long = rng.dirichlet(np.ones(300), size=(1, 2, 3))  # S > DENSE_KEYS
  sparse = explorer.encode_map('m', ['q'] * 3, ['k'] * 300, long)
  idx = np.asarray(sparse['idx']).reshape(1, 2, 3, explorer.TOP_K)
  np.testing.assert_array_equal(np.sort(idx, -1), np.sort(np.argsort(-long, -1)[..., :16], -1))
  np.testing.assert_array_equal(
    sparse['w'], np.rint(np.take_along_axis(long, idx, -1) * 1000).ravel()
  )
  with pytest.raises(ValueError, match="'m'.*do not match 4 row and 5 column"):
    explorer.encode_map('m', list('abcd'), list('vwxyz'), weights[..., :4])


def test_users_text_cannot_end_the_script_element_and_reads_back_unchanged():
  text = explorer.safe_json({'tokens': list(XSS)})
  assert '<' not in text and '>' not in text and '&' not in text
  assert json.loads(text) == {'tokens': list(XSS)}


def _records(rng):
  """One record per view kind, two of them wrong, users' markup in the text."""
  attention = [
    dict(
      name='cross-attention',
      rows=[XSS[0], 'b', 'c'],
      cols=[XSS[1], 'y'],
      weights=rng.dirichlet(np.ones(2), size=(2, 2, 3)),
    )
  ]
  pixels = rng.integers(0, 255, (16, 16, 1), dtype=np.uint8)
  return [
    dict(
      index=0,
      reference=XSS[0],
      prediction=XSS[1],
      correct=True,
      views=[dict(kind='attention', maps=attention)],
    ),
    dict(
      index=1,
      reference='sports',
      prediction='food (0.61)',
      correct=False,
      views=[
        dict(
          kind='document',
          tokens=[[XSS[0], 'x'], ['y']],
          word=[[0.9, 0.1], [1.0]],
          sentence=[0.7, 0.3],
          key=[0],
        )
      ],
    ),
    dict(
      index=2,
      reference='7',
      prediction='7 (0.90)',
      correct=True,
      views=[
        dict(
          kind='image',
          pixels=pixels,
          maps=[('rollout', rng.random((4, 4))), ('word', rng.random((4, 4)))],
        )
      ],
    ),
    dict(
      index=3,
      reference='where? garden',
      prediction='kitchen',
      correct=False,
      views=[
        dict(
          kind='hops',
          sentences=['John went to the garden.', XSS[0]],
          weights=[[0.8, 0.2], [0.4, 0.6]],
          supporting=[0],
        )
      ],
    ),
    dict(
      index=4,
      reference='0101',
      prediction='0101',
      correct=True,
      views=[
        dict(
          kind='time',
          panels=[('inputs', rng.integers(0, 2, (4, 9))), ('write weightings', rng.random((8, 9)))],
        )
      ],
    ),
    dict(
      index=5,
      reference='3453889',
      prediction='34',
      correct=False,
      views=[
        dict(
          kind='kept',
          name='snapkv at ratio 0.5',
          tokens=[XSS[0], ' the', ' needle', ' is', ' 345'],
          rows=['layer 0 kv head 0', 'layer 0 kv head 1'],
          kept=[[1, 0, 0, 1, 1], [1, 1, 0, 0, 0]],
        )
      ],
    ),
  ]


VIEW_SCRIPT = """
const out = {kinds: [], errorsFirst: null};
for (let i = 0; i < 6; i++) {
  explorer.select(i);
  out.kinds.push(document.querySelector('#main > div:last-child').className);
}
const shades = () => [...document.querySelectorAll('#kept-tokens span')].map(e => e.dataset.kept);
out.keptShares = shades();  // the share of heads that kept each token
explorer.set({keptRow: 1});
out.keptRow = shades();
out.struck = document.querySelectorAll('#kept-tokens span[style*="line-through"]').length;
out.keptSummary = document.getElementById('kept-summary').textContent;
explorer.select(1);
out.sentences = document.querySelectorAll('.sentence').length;
const box = document.getElementById('errors-first');
box.checked = true; box.dispatchEvent(new Event('change'));
out.errorsFirst = [...document.querySelectorAll('#examples .ex')].map(e => +e.dataset.example);
out.alerted = window.alerted || 0;
document.body.appendChild(Object.assign(document.createElement('pre'),
                                        {id: 'test-out', textContent: JSON.stringify(out)}));
"""


@needs_chromium
def test_every_view_kind_renders_and_users_markup_stays_text(rng, tmp_path):
  page = explorer.page(_records(rng), title=XSS[1], metrics=dict(accuracy=0.6, split=XSS[0]))
  # An alert that ran would count itself; a page that ran the markup would hold an <img>.
  spy = 'window.alert = () => { window.alerted = (window.alerted || 0) + 1; };'
  page = page.replace('<script>\n', f'<script>{spy}\n', 1)
  dom, console, out = browse(page, tmp_path, 'views', VIEW_SCRIPT, shot=True)
  assert console == []
  assert out['kinds'] == ['attention', 'document', 'image', 'hops', 'time', 'kept']
  assert out['keptShares'] == ['1.000', '0.500', '0.000', '0.500', '0.500']
  assert out['keptRow'] == ['1', '1', '0', '0', '0'] and out['struck'] == 3
  assert out['keptSummary'] == 'snapkv at ratio 0.5: 5 of 10 head positions kept (50.0%)'
  assert out['sentences'] == 2 and out['errorsFirst'] == [1, 3, 5, 0, 2, 4]
  assert out['alerted'] == 0
  assert '<img' not in dom and 'alert(2)</script>' not in dom
  assert html.escape(XSS[0], quote=False) in dom  # shown, as text
  for kind in range(1, 6):  # a screenshot per view kind
    screenshot(page, tmp_path, f'view_{kind}', f'explorer.select({kind});')


@pytest.fixture(scope='module')
def translation_run(tmp_path_factory) -> str:
  """A tiny Transformer trained 2 steps on a corpus of markup, evaluated as eval.py does."""
  root = tmp_path_factory.mktemp('run')
  corpus = root / 'corpus.tsv'
  corpus.write_text(
    ''.join(f'{XSS[0]} go {i}\t{XSS[1]} geh {i}\tattribution\n' for i in range(40)),
    encoding='utf-8',
  )
  config = tiny(get_config('tsv'), root / 'tfds', num_train_steps=2)
  # Word vocabularies: the markup stays one token ('<img'), which the page must escape. Tags and
  # the pointer need one SentencePiece vocabulary, so they are off.
  config.dataset.update(
    tsv_path=str(corpus),
    source_vocab='word',
    target_vocab='word',
    shared_vocab=False,
    protect_items=False,
  )
  config.model.copy_source = False
  workdir = str(root / 'workdir')
  training.train_and_evaluate(config, workdir)
  run_eval.evaluate(run_eval.Request(workdir, max_examples=4, num_heatmaps=1, explorer_examples=3))
  return workdir


def test_eval_writes_the_explorer_with_every_attention_of_its_examples(translation_run):
  page = open(os.path.join(translation_run, 'eval', 'explorer.html'), encoding='utf-8').read()
  data = page_data(page)
  assert len(data['examples']) == 2 and data['metrics']['examples'] == 2  # the test split
  samples = open(os.path.join(translation_run, 'eval', 'samples.txt')).read().splitlines()[1:]
  for example, line in zip(data['examples'], samples):
    source, reference, hypothesis = line.split(' | ')
    assert (example['reference'], example['prediction']) == (reference, hypothesis)
    assert example['correct'] == (reference == hypothesis)
    maps = {m['name']: m for m in example['views'][0]['maps']}
    assert set(maps) == {'cross-attention', 'encoder self-attention', 'decoder self-attention'}
    cross = maps['cross-attention']
    assert cross['rows'] == maps['decoder self-attention']['rows']
    assert cross['cols'] == maps['encoder self-attention']['rows']
    assert cross['shape'] == [1, 2, len(cross['rows']), len(cross['cols'])]
    # Every query's weights sum to one (within the rounding of each weight).
    sums = np.asarray(cross['w']).reshape(cross['shape']).sum(-1)
    assert np.all(np.abs(sums - 1000) <= len(cross['cols']))
    assert '<img' in cross['cols'] and example['reference'].startswith(XSS[1])
  assert os.path.getsize(os.path.join(translation_run, 'eval', 'explorer.html')) < 200_000


HEAD_SCRIPT = """
const out = {};
const lines = () => [...document.querySelectorAll('#headview line')]
  .map(l => l.getAttribute('stroke-opacity')).join();
explorer.set({map: 0, layer: 0, head: 0, tab: 'head'});
out.head0 = lines();
document.getElementById('head').value = '1';
document.getElementById('head').dispatchEvent(new Event('change'));
out.head1 = lines();
const token = document.querySelector('#headview g[data-side=row][data-i="1"]');
token.dispatchEvent(new MouseEvent('mouseenter'));
out.hovered = [...document.querySelectorAll('#headview g[data-side=col]')].map(g => +g.dataset.w);
out.hoverLines = document.querySelectorAll('#headview line').length;
document.getElementById('tab-model').click();
out.thumbnails = document.querySelectorAll('#view-model canvas').length;
document.querySelector('#view-model canvas[data-head="0"]').click();
out.opened = [explorer.state.tab, explorer.state.head];
document.body.appendChild(Object.assign(document.createElement('pre'),
                                        {id: 'test-out', textContent: JSON.stringify(out)}));
"""


@needs_chromium
def test_the_head_view_follows_the_pickers_and_the_hovered_token(translation_run, tmp_path):
  page = open(os.path.join(translation_run, 'eval', 'explorer.html'), encoding='utf-8').read()
  started = time.perf_counter()
  dom, console, out = browse(page, tmp_path, 'translation', HEAD_SCRIPT, shot=True)
  print(f'explorer: {len(page)} bytes, loaded and driven in {time.perf_counter() - started:.2f} s')
  assert console == []
  assert '<img' not in dom and html.escape(XSS[1], quote=False) in dom  # the corpus, as text
  assert out['head0'] != out['head1']  # another head draws other lines
  cross = page_data(page)['examples'][0]['views'][0]['maps'][0]
  weights = np.asarray(cross['w']).reshape(cross['shape']) / 1000
  np.testing.assert_allclose(out['hovered'], weights[0, 1, 1], atol=5e-4)  # layer 0, head 1
  assert 0 < out['hoverLines'] <= len(cross['cols'])
  assert out['thumbnails'] == 2 and out['opened'] == ['head', 0]


LONG_SCRIPT = """
const started = performance.now();
explorer.set({tab: 'head', layer: 1, head: 3});
const token = document.querySelector('#headview g[data-side=row][data-i="1000"]');
token.dispatchEvent(new MouseEvent('mouseenter'));
const out = {ms: performance.now() - started,
             lines: document.querySelectorAll('#headview line').length,
             top: +document.querySelector('#headview g[data-side=col][data-i="7"]').dataset.w};
document.body.appendChild(Object.assign(document.createElement('pre'),
                                        {id: 'test-out', textContent: JSON.stringify(out)}));
"""


@needs_chromium
def test_a_1024_token_gpt_map_stays_small_and_draws_few_lines(tmp_path):
  length = 1024
  weights = np.full((2, 4, length, length), 0.0, np.float32)
  weights[..., 7] = 0.5  # every query: half on token 7
  weights[..., np.arange(length), np.arange(length)] += 0.5
  tokens = [f't{i}' for i in range(length)]
  page = explorer.page(
    [
      dict(
        index=0,
        views=[
          dict(
            kind='attention',
            maps=[dict(name='self-attention', rows=tokens, cols=tokens, weights=weights)],
          )
        ],
      )
    ],
    title='long',
  )
  assert len(page) < 1_500_000  # top-16 per row, not 8 M weights
  _, console, out = browse(page, tmp_path, 'long', LONG_SCRIPT, shot=True)
  assert console == []
  assert out['top'] == 0.5 and out['lines'] == 2  # token 7 and itself
  print(f'1024-token map: {len(page)} bytes; head view and hover in {out["ms"]:.0f} ms')


def test_prompt_attention_reads_a_typed_source_through_a_translation_run(
  translation_run, tmp_path, capsys
):
  """prompt.py attention on a run of translation: the typed source is decoded, drawn and
  explored as an example is, with no reference; a refused request writes nothing."""
  from reports import prompt_commands

  out = tmp_path / 'prompt'
  typed = f'{XSS[0]} go 7'
  request = prompt_commands.Request('attention', translation_run, prompt=typed, out=str(out))
  result = prompt_commands.run_attention(request)
  assert sorted(os.listdir(out)) == ['attention_0000.png', 'explorer.html']
  [example] = page_data((out / 'explorer.html').read_text(encoding='utf-8'))['examples']
  assert example['correct'] is None and example['reference'] == ''
  assert example['prediction'] == result['sample']['hypothesis']
  maps = {m['name']: m for m in example['views'][0]['maps']}
  assert set(maps) == {'cross-attention', 'encoder self-attention', 'decoder self-attention'}
  assert maps['encoder self-attention']['rows'][0] == '<img'  # the typed source, as a token
  assert f'Prediction: {result["sample"]["hypothesis"]}' in capsys.readouterr().out
  refused = tmp_path / 'refused'
  with pytest.raises(ValueError, match='draws one layer'):
    prompt_commands.run_attention(
      prompt_commands.Request('attention', translation_run, typed, out=str(refused), layers='0,-1')
    )
  with pytest.raises(ValueError, match=f'--workdir={translation_run} holds a translation run'):
    prompt_commands.run_attention(
      prompt_commands.Request('attention', translation_run, typed, out=str(refused), press='knorm')
    )
  assert not refused.exists()


def test_the_page_to_open_is_one_file_in_the_eval_folder(translation_run, tmp_path):
  # What a user opens in a browser (docs/explorer.md): WORKDIR/eval/explorer.html, which loads no
  # file or URL beside it.
  assert explorer.write(str(tmp_path), [], title='none') == str(tmp_path / explorer.FILE)
  page = open(os.path.join(translation_run, 'eval', explorer.FILE), encoding='utf-8').read()
  assert not re.search(r'<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=', page)


def test_a_negative_explorer_examples_is_one_sentence_naming_the_flag(tmp_path):
  with pytest.raises(ValueError, match=r'^--explorer_examples=-1 must be >= 0'):
    run_eval.evaluate(run_eval.Request(str(tmp_path), explorer_examples=-1))


MECHANISM_SCRIPT = """
const out = {maps: [...document.querySelectorAll('#map option')].map(o => o.textContent)};
out.notes = [...document.querySelectorAll('.note')].map(e => e.textContent);
out.signed = !!document.getElementById('signed');
const c = document.querySelector('.gate-strip');
c.dispatchEvent(new MouseEvent('mousemove', {clientX: c.getBoundingClientRect().left + 1,
                                             clientY: c.getBoundingClientRect().top + 1}));
out.gate = document.getElementById('gate-readout').textContent;
out.selected = document.getElementById('selected-summary').textContent;
document.body.appendChild(Object.assign(document.createElement('pre'),
                                        {id: 'test-out', textContent: JSON.stringify(out)}));
"""


@needs_chromium
def test_a_hybrid_stacks_maps_gate_and_selected_keys_render(rng, tmp_path):
  """Layers of other head counts (a differential pair, signed), a layer without weights (a note),
  a gate strip and a sparse attention's selected keys (tests/test_mechanism_views.py checks the
  data against the models' taps)."""
  tokens = ['a', 'b', 'c']
  pair = rng.dirichlet(np.ones(3), size=(1, 1, 3)) - 0.5 * rng.dirichlet(np.ones(3), size=(1, 1, 3))
  maps = [
    dict(name='layer 0: differential', rows=tokens, cols=tokens, weights=pair),
    dict(
      name='layer 1: softmax',
      rows=tokens,
      cols=tokens,
      weights=rng.dirichlet(np.ones(3), (1, 2, 3)),
    ),
  ]
  gate = np.asarray([[0.25, 0.5, 0.75], [1.0, 0.0, 0.5]])
  views = [
    dict(
      kind='attention', maps=maps, notes=['layer 2: gated_deltanet forms no attention weights.']
    ),
    dict(kind='gate', name='output gate', tokens=tokens, layers=[('layer 1', gate)]),
    dict(
      kind='selected',
      name='keys selected',
      tokens=tokens,
      layers=[('layer 0', np.tril(np.ones((3, 3))))],
    ),
  ]
  page = explorer.page([dict(index=0, views=views)], title='mechanisms')
  _, console, out = browse(page, tmp_path, 'mechanisms', MECHANISM_SCRIPT, shot=True)
  assert console == []
  assert out['maps'] == ['layer 0: differential', 'layer 1: softmax'] and out['signed']
  assert out['notes'] == ['layer 2: gated_deltanet forms no attention weights.']
  assert out['gate'] == 'layer 1, head 0, position 0 "a": gate 0.250'
  assert out['selected'] == 'keys selected: each query selected 1 to 3 keys'
