"""The 2025 mechanisms in the explorer and the head engine, on tiny random DecoderLMs: a hybrid
stack (a Gated DeltaNet layer of 4 heads, then a softmax layer of 2 with an output gate), a
differential layer (1 pair of heads) before a softmax one, and latent attention with DeepSeek
Sparse Attention. The explorer's data holds each layer's map with its own heads, the gate's
strips and the selected keys, equal to the taps; head ablation zeroes a pair or a head as an
edit of the tap does; what is refused is one sentence naming the layer."""

import types

from conftest import build_model
from flax import nnx
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from attention import get_press
from interpret import effects, patching
from interpret import heads as heads_lib
from models import compression, interventions
from reports import explorer, prompt_commands
from tasks import language_attention as lm

SMALL = dict(vocab_size=13, pad_id=0, num_layers=2, d_model=16, num_heads=2, d_ff=16)
MODELS = {
  'hybrid': dict(layer_pattern='gated_deltanet,softmax', delta_heads=4, output_gate=True),
  'differential': dict(layer_pattern='differential,softmax'),
  'sparse': dict(kv_lora_rank=8, rope_head_dim=4, index_topk=3, index_heads=2, index_head_dim=8),
}
IDS = np.asarray([[3, 5, 7, 2, 9, 4]])
TOKENS = [f't{i}' for i in IDS[0]]


@pytest.fixture(scope='module', params=list(MODELS))
def case(request):
  model = build_model(
    'decoder_lm',
    **SMALL,
    positions='rope',
    max_length=16,
    **MODELS[request.param],
    rngs=nnx.Rngs(0),
  )
  _, captured = interventions.capture(model, IDS, method='token_logits')
  return request.param, model, {k: np.asarray(v[0], np.float64) for k, v in captured.items()}


def _page_views(model) -> list[dict]:
  """The explorer's views of the prompt as eval.py writes them (the task's hook), read back
  from the page's JSON."""
  sample = dict(index=0, reference='', prediction='', correct=None, inputs=IDS[0])
  tokenizer = types.SimpleNamespace(pad_id=0, tokens=lambda ids: TOKENS)
  readings = lm.mechanism_readings(model, [sample], tokenizer)
  weights = [np.asarray(lm.self_attention(model, IDS)[0])]
  records = lm.explorer_records([sample], weights, tokenizer.tokens, readings)
  return [explorer.encode_view(view) for view in records[0]['views']]


def _thousandths(values) -> list[int]:
  return np.rint(np.asarray(values) * 1000).astype(int).ravel().tolist()


def test_the_explorer_shows_each_layer_with_its_heads_and_the_taps_values(case):
  name, model, taps = case
  views = {view['kind']: view for view in _page_views(model)}
  maps = views['attention']['maps']
  if name == 'sparse':  # every layer alike: one map, its layers and heads the taps'
    stacked = np.stack([taps[f'layers/{l}/self_attn/weights'] for l in range(2)])
    assert [m['shape'] for m in maps] == [[2, 2, 6, 6]] and maps[0]['name'] == 'self-attention'
    assert maps[0]['w'] == _thousandths(stacked)
    for layer, chosen in zip(views['selected']['layers'], range(2)):
      selected = taps[f'layers/{chosen}/self_attn/selected'].astype(bool)
      assert layer['values'] == [''.join('1' if k else '0' for k in row) for row in selected]
      assert selected.sum(-1).tolist() == [1, 2, 3, 3, 3, 3]  # index_topk=3 of the visible keys
    return
  heads = {'hybrid': (4, 2), 'differential': (1, 2)}[name]
  assert [m['shape'] for m in maps] == [[1, n, 6, 6] for n in heads]
  for layer, m in enumerate(maps):
    assert m['w'] == _thousandths(taps[f'layers/{layer}/self_attn/weights'])
  assert maps[0]['signed']  # a delta rule's attention form, a differential map: signed
  assert (
    maps[0]['name']
    == {
      'hybrid': 'self-attention, layer 0: gated_deltanet, 4 heads',
      'differential': 'self-attention, layer 0: differential, 1 pair of heads',
    }[name]
  )
  if name == 'hybrid':  # the gate's strip: the softmax layer's, heads x positions
    (strip,) = views['gate']['layers']
    assert strip['name'] == 'layer 1: softmax with output gate, 2 heads'
    assert strip['values'] == _thousandths(taps['layers/1/self_attn/gate'].mean(-1))
  else:
    assert set(views) == {'attention'}


def test_a_layer_without_weights_is_a_note_not_a_silent_gap():
  weights = np.full((2, 2, 3, 3), np.nan)
  weights[1] = 1 / 3
  view = lm.attention_view(weights, list('abc'), [0, 1], ['gated_deltanet, 2 heads'] * 2, [2, 2])
  assert [m['name'] for m in view['maps']] == ['self-attention, layer 1: gated_deltanet, 2 heads']
  assert view['notes'] == [
    'layer 0: gated_deltanet, 2 heads forms no attention weights (no map of queries over keys).'
  ]


def test_head_ablation_zeroes_a_pair_a_delta_head_or_a_latent_head(case):
  name, model, _ = case
  counts = {'hybrid': [4, 2], 'differential': [1, 2], 'sparse': [2, 2]}[name]
  assert list(heads_lib.heads_per_layer(model).values()) == counts
  metric = effects.Metric('loss')
  clean, changes = effects.head_effects(model, IDS, metric, heads=[(0, 0)], progress=print)
  # The same edit by hand: the head's (a differential layer's pair's) output zeroed at its tap.
  edits = {'layers/0/self_attn/heads': interventions.zero_head(0)}
  logits, _ = interventions.capture(model, IDS, edits=edits, method='token_logits')
  ablated = float(metric(logits, jnp.asarray(IDS))[0])
  # float32 passes, vmapped or not: the same computation to a few ulps of a loss near 2.6.
  np.testing.assert_allclose(changes[0, 0], ablated - clean, atol=2e-5)
  assert np.isnan(changes[1]).all() and changes.shape == (2, max(counts))


def test_a_head_a_layer_lacks_is_one_sentence_naming_the_layer(case):
  name, model, _ = case
  if name == 'sparse':
    heads_lib.check_model_heads(model, [(1, 1)])  # a latent layer's heads are its own
    return
  bad = {'hybrid': (1, 2), 'differential': (0, 1)}[name]
  what = {
    'hybrid': 'softmax with output gate, 2 heads, numbered 0 .. 1',
    'differential': 'differential, 1 pair of heads, numbered 0 .. 0',
  }[name]
  what = f'layer {bad[0]} (layers/{bad[0]}/self_attn) is {what}'
  with pytest.raises(
    ValueError, match=rf'^--heads: layer {bad[0]}, head {bad[1]} is not in the model: '
  ):
    heads_lib.check_model_heads(model, [bad])
  with pytest.raises(ValueError, match=what.replace('(', r'\(').replace(')', r'\)')):
    heads_lib.check_model_heads(model, [bad])


def test_what_is_refused_names_the_layer_and_why(case):
  name, model, _ = case
  press = get_press('knorm')
  layer = {
    'hybrid': 'layers/0/self_attn is a DeltaNet',
    'sparse': 'layers/0/self_attn is a LatentAttention',
  }
  if name in layer:
    with pytest.raises(
      ValueError, match=f'^press: {layer[name]}.*whose cache holds no per-head keys'
    ):
      compression.check_press(model, press, IDS.shape[1])
  if name == 'differential':
    metric = effects.Metric('loss')
    with pytest.raises(
      ValueError, match=r'^path patching: receiver layer 0 \(layers/0/self_attn\) is differential'
    ):
      patching.path_patching(model, IDS, IDS, metric, receivers=[(0, 0)], senders=[])


def test_prompt_attention_shows_each_layer_and_the_gate(case, tmp_path):
  """prompt.py attention on a prompt (a stand-in for a workdir's source: its config, word
  tokenizer and model): a map per chosen layer with its own heads, and the gate's strip."""
  name, model, taps = case
  if name != 'hybrid':
    pytest.skip('the hybrid stack has both: layers of other heads, and a gate')
  words = {f't{i}': i for i in range(1, 13)}
  tokenizer = types.SimpleNamespace(
    pad_id=0,
    encode=lambda text: [words[w] for w in text.split()],
    tokens=lambda ids: [f't{int(i)}' for i in ids],
  )
  config = ml_collections.ConfigDict(dict(model=dict(num_layers=2, max_length=16)))
  source = types.SimpleNamespace(config=config, tokenizer=tokenizer, model=lambda: model)
  request = prompt_commands.Request('attention', 'w', ' '.join(TOKENS), str(tmp_path), layers='all')
  attention, gate = prompt_commands._token_attention(request, source)['views']
  assert [(m['name'], m['weights'].shape) for m in attention['maps']] == [
    ('layer 0: gated_deltanet, 4 heads', (1, 4, 6, 6)),
    ('layer 1: softmax with output gate, 2 heads', (1, 2, 6, 6)),
  ]
  # Another compiled float32 pass than the taps': equal to a few ulps of weights at most 1.
  np.testing.assert_allclose(
    attention['maps'][1]['weights'][0], taps['layers/1/self_attn/weights'], atol=1e-6
  )
  np.testing.assert_allclose(
    gate['layers'][0][1], taps['layers/1/self_attn/gate'].mean(-1), atol=1e-6
  )
