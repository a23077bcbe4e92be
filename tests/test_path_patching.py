"""Path patching (interpret.patching) equals transformers with forward hooks, in float64, on tiny
random Llama (grouped-query: 4 query heads, 2 key/value) and Gemma 3 (qk-norm, sandwich norms)
checkpoints: senders' outputs from a corrupted prompt, every other head frozen at its clean
output, the receivers' queries, keys or values recorded, then put into a clean run."""

import float64
import numpy as np
import pytest
from tiny_decoders import HOOKED_TOLERANCE, VOCAB, _model, written_and_converted

from interpret import effects, patching

pytest.importorskip('transformers', reason='the reference implementation (test extra)')
IDS = np.random.default_rng(3).integers(1, VOCAB, (2, 10))
OTHER = np.random.default_rng(4).integers(1, VOCAB, (2, 10))
TARGET, VERSUS = 5, 17
TOLERANCE = HOOKED_TOLERANCE  # tests/tiny_decoders.py says why


@pytest.fixture(scope='module', params=['llama', 'gemma3_text'])
def checkpoint(request, tmp_path_factory):
  return written_and_converted(request.param, tmp_path_factory)


def _reference(folder, senders, receiver_layer, receiver_head, tap):
  """transformers with hooks: each sender's path-patched logit difference less the clean one."""
  import torch

  model = _model(folder)
  config, layers = model.config, model.model.layers
  dv = config.head_dim
  groups = config.num_attention_heads // config.num_key_value_heads
  metric = lambda logits: float((logits[:, -1, TARGET] - logits[:, -1, VERSUS]).mean())
  z, stored = {}, {}

  def record_z(l):
    return lambda module, args: z.__setitem__(l, args[0].clone())

  with torch.no_grad():
    handles = [
      lay.self_attn.o_proj.register_forward_pre_hook(record_z(l)) for l, lay in enumerate(layers)
    ]
    model(torch.tensor(OTHER))
    corrupted = dict(z)
    clean = metric(model(torch.tensor(IDS)).logits)
    clean_z = dict(z)
    for handle in handles:
      handle.remove()
    projection = {'queries': 'q_proj', 'keys': 'k_proj', 'values': 'v_proj'}[tap]
    index = receiver_head if tap == 'queries' else receiver_head // groups
    part = slice(index * dv, (index + 1) * dv)
    receiver = getattr(layers[receiver_layer].self_attn, projection)
    out = []
    for sender_layer, sender_head in senders:

      def frozen(module, args, l):
        value = clean_z[l].clone()
        if l == sender_layer:
          sent = slice(sender_head * dv, (sender_head + 1) * dv)
          value[..., sent] = corrupted[l][..., sent]
        return (value,)

      handles = [
        lay.self_attn.o_proj.register_forward_pre_hook(lambda m, a, l=l: frozen(m, a, l))
        for l, lay in enumerate(layers)
      ]
      handles.append(receiver.register_forward_hook(lambda m, a, o: stored.update(x=o.clone())))
      model(torch.tensor(IDS))
      for handle in handles:
        handle.remove()

      def patched(module, args, output):
        output = output.clone()
        output[..., part] = stored['x'][..., part]
        return output

      handle = receiver.register_forward_hook(patched)
      out.append(metric(model(torch.tensor(IDS)).logits) - clean)
      handle.remove()
  return clean, np.array(out)


@pytest.mark.parametrize('tap', ['queries', 'keys'])
def test_path_patching_equals_transformers_hooks(checkpoint, tap):
  folder, model = checkpoint
  last = len(model.layers) - 1
  receiver = (last, 1)
  senders = [(layer, head) for layer in range(last) for head in range(2)]
  metric = effects.Metric('logit_diff', TARGET, VERSUS)
  with float64.model_in_float64(model) as model64:
    clean, found = patching.path_patching(
      model64, IDS, OTHER, metric, [receiver], into=(tap,), senders=senders
    )
  ref_clean, reference = _reference(folder, senders, *receiver, tap)
  np.testing.assert_allclose(clean, ref_clean, atol=TOLERANCE)
  np.testing.assert_allclose([found[s] for s in senders], reference, atol=TOLERANCE)
  assert np.abs(reference).max() > 1e-3  # the comparison bites
  assert np.isnan(found[last]).all()  # not a sender


def test_direct_paths_and_faults(checkpoint):
  """Without receivers, a sender's effect is its direct path to the logits (every other head
  frozen): in the last layer, nothing lies between it and the logits but the MLP and norms,
  so it differs from the ordinary patch, which also lets later heads react; faults are one
  sentence."""
  _, model = checkpoint
  metric = effects.Metric('logit_diff', TARGET, VERSUS)
  last = len(model.layers) - 1
  clean, direct = patching.path_patching(model, IDS, OTHER, metric, senders=[(last, 0), (0, 0)])
  _, patched = effects.head_effects(model, IDS, metric, ablation='patch', other=OTHER)
  np.testing.assert_allclose(direct[last, 0], patched[last, 0], atol=1e-5)
  assert np.count_nonzero(~np.isnan(direct)) == 2
  with pytest.raises(ValueError, match='is not before the receivers'):
    patching.path_patching(model, IDS, OTHER, metric, [(0, 0)], senders=[(0, 1)])
  with pytest.raises(ValueError, match='give some of queries, keys, values'):
    patching.path_patching(model, IDS, OTHER, metric, [(last, 0)], into=('scores',))
  with pytest.raises(ValueError, match='--source encodes to 4 tokens'):
    patching.path_patching(model, IDS, OTHER[:, :4], metric)
