"""Head ablation, patching and direct logit attribution on a prompt equal transformers with
forward hooks on the same tiny random checkpoints (Llama, and Gemma 3 with its sandwich norms),
in float64 on both sides; the batched sweep equals one edit at a time; sets, the logit lens and
faults."""

import float64
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_decoders import HOOKED_TOLERANCE, VOCAB, _model, written_and_converted

from interpret import attribution
from interpret import effects as effects_lib
from models import interventions
from models.attention_paths import attention_layers

pytest.importorskip('transformers', reason='the reference implementation (test extra)')
IDS = np.random.default_rng(1).integers(1, VOCAB, (1, 12))
SOURCE = np.random.default_rng(2).integers(1, VOCAB, (1, 12))
TARGET, VERSUS = 5, 17
TOLERANCE = HOOKED_TOLERANCE  # tests/tiny_decoders.py says why


@pytest.fixture(scope='module', params=['llama', 'gemma3_text'])
def checkpoint(request, tmp_path_factory):
  return written_and_converted(request.param, tmp_path_factory)


def _reference(folder: str, source: np.ndarray | None):
  """transformers with hooks: each head's input to o_proj replaced (zero, or the source run's),
  the logit difference's change; and each head's direct logit attribution."""
  import torch

  model = _model(folder)
  config, layers = model.config, model.model.layers
  n = config.num_attention_heads
  dv = config.head_dim
  metric = lambda logits: float(logits[0, -1, TARGET] - logits[0, -1, VERSUS])
  stored, outputs, final = {}, {}, {}

  def keep(l):
    def pre(module, args):
      stored[l] = args[0].clone()

    def post(module, args, out):
      outputs[l] = out.clone()

    return pre, post

  handles = []
  for l, layer in enumerate(layers):
    pre, post = keep(l)
    handles += [layer.self_attn.o_proj.register_forward_pre_hook(pre)]
    handles += [layer.self_attn.o_proj.register_forward_hook(post)]
  handles.append(model.model.norm.register_forward_pre_hook(lambda m, a: final.update(x=a[0])))
  with torch.no_grad():
    if source is not None:
      model(torch.tensor(source))
      from_source = dict(stored)
    clean = metric(model(torch.tensor(IDS)).logits)
    z, whole, x = dict(stored), dict(outputs), final['x']
    for handle in handles:
      handle.remove()
    effects = np.zeros((len(layers), n))
    for l, layer in enumerate(layers):
      for h in range(n):

        def replace(module, args, l=l, h=h):
          value = args[0].clone()
          part = slice(h * dv, (h + 1) * dv)
          value[..., part] = 0 if source is None else from_source[l][..., part]
          return (value,)

        handle = layer.self_attn.o_proj.register_forward_pre_hook(replace)
        effects[l, h] = metric(model(torch.tensor(IDS)).logits) - clean
        handle.remove()
    # Direct logit attribution at the last position, norms frozen at the clean run's scales.
    gemma = config.model_type.startswith('gemma')
    scale = lambda norm: (1.0 + norm.weight) if gemma else norm.weight
    rms = lambda v, eps: torch.sqrt(torch.mean(v * v) + eps)
    direction = model.lm_head.weight[TARGET] - model.lm_head.weight[VERSUS]
    eps = config.rms_norm_eps
    dla = np.zeros((len(layers), n))
    for l, layer in enumerate(layers):
      for h in range(n):
        part = slice(h * dv, (h + 1) * dv)
        share = layer.self_attn.o_proj.weight[:, part] @ z[l][0, -1, part]
        if gemma:
          share = share * scale(layer.post_attention_layernorm) / rms(whole[l][0, -1], eps)
        share = share * scale(model.model.norm) / rms(x[0, -1], eps)
        dla[l, h] = float(share @ direction)
  return clean, effects, dla


def test_ablation_patching_and_attribution_equal_transformers_hooks(checkpoint):
  folder, model = checkpoint
  metric = effects_lib.Metric('logit_diff', TARGET, VERSUS)
  direction = lambda logits: logits[..., TARGET] - logits[..., VERSUS]
  with float64.model_in_float64(model) as model64:
    clean, zeroed = effects_lib.head_effects(model64, IDS, metric)
    _, patched = effects_lib.head_effects(model64, IDS, metric, ablation='patch', other=SOURCE)
    dla = attribution.head_attributions(model64, IDS, direction)
  ref_clean, ref_zeroed, ref_dla = _reference(folder, None)
  _, ref_patched, _ = _reference(folder, SOURCE)
  np.testing.assert_allclose(clean, ref_clean, atol=TOLERANCE)
  np.testing.assert_allclose(zeroed, ref_zeroed, atol=TOLERANCE)
  np.testing.assert_allclose(patched, ref_patched, atol=TOLERANCE)
  np.testing.assert_allclose(dla, ref_dla, atol=TOLERANCE)
  assert np.abs(zeroed).max() > 0.05 and np.abs(dla).max() > 0.05  # the comparisons bite


def test_the_batched_sweep_is_one_edit_at_a_time_and_sets_add_up(checkpoint):
  """Each head's effect as `interventions.zero_head` gives it alone; mean ablation uses the
  reference's mean output; replacing every head of a set at once is `ablated_metric`."""
  _, model = checkpoint
  metric = effects_lib.Metric('loss')
  ids = jnp.asarray(IDS)
  clean, effects = effects_lib.head_effects(model, ids, metric, heads=[(0, 1), (1, 0)])
  paths = list(attention_layers(model))
  for layer, head in [(0, 1), (1, 0)]:
    edits = {f'{paths[layer]}/heads': interventions.zero_head(head)}
    logits, _ = interventions.capture(model, ids, edits=edits, method='token_logits')
    np.testing.assert_allclose(effects[layer, head], metric(logits, ids)[0] - clean, atol=1e-5)
  assert np.isnan(effects[0, 0]) and np.count_nonzero(~np.isnan(effects)) == 2
  _, captured = interventions.capture(model, jnp.asarray(SOURCE), method='token_logits')
  reference = captured[f'{paths[0]}/heads']
  edits = {f'{paths[0]}/heads': lambda v: v.at[:, 1].set(reference[:, 1].mean(axis=(0, 1)))}
  logits, _ = interventions.capture(model, ids, edits=edits, method='token_logits')
  _, mean = effects_lib.head_effects(
    model, ids, metric, ablation='mean', other=SOURCE, heads=[(0, 1)]
  )
  np.testing.assert_allclose(mean[0, 1], metric(logits, ids)[0] - clean, atol=1e-5)
  # Per position: the mean over a batch of reference prompts of the prompt's length.
  batch = np.concatenate([SOURCE, IDS[:, ::-1]])
  _, captured = interventions.capture(model, jnp.asarray(batch), method='token_logits')
  by_position = captured[f'{paths[1]}/heads'][:, 0].mean(axis=0)  # [T, H]
  edits = {f'{paths[1]}/heads': lambda v: v.at[:, 0].set(by_position)}
  logits, _ = interventions.capture(model, ids, edits=edits, method='token_logits')
  _, mean = effects_lib.head_effects(
    model, ids, metric, ablation='mean', other=batch, per_position=True, heads=[(1, 0)]
  )
  np.testing.assert_allclose(mean[1, 0], metric(logits, ids)[0] - clean, atol=1e-5)
  assert abs(mean[1, 0] - effects[1, 0]) > 1e-4  # not the zero ablation
  both = {f'{path}/heads': interventions.zero_head(0) for path in paths}
  logits, _ = interventions.capture(model, ids, edits=both, method='token_logits')
  together = effects_lib.ablated_metric(model, ids, metric, [(l, 0) for l in range(len(paths))])
  np.testing.assert_allclose(together, metric(logits, ids)[0], atol=1e-5)


def test_the_logit_lens_ends_at_the_models_own_output(checkpoint):
  _, model = checkpoint
  lens = attribution.logit_lens(model, IDS, TARGET)
  logits = np.asarray(model.token_logits(jnp.asarray(IDS)))[0, -1]
  log_probs = logits - np.log(np.sum(np.exp(logits - logits.max()))) - logits.max()
  assert [row['layer'] for row in lens] == list(range(len(lens)))
  np.testing.assert_allclose(lens[-1]['target_logprob'], log_probs[TARGET], atol=1e-4)
  assert lens[-1]['top'] == int(np.argmax(logits))
  assert lens[-1]['target_rank'] == int(np.sum(log_probs > log_probs[TARGET]))


@pytest.mark.parametrize(
  'call, message',
  [
    (lambda m: effects_lib.Metric('logprob'), '--metric=logprob needs --target'),
    (lambda m: effects_lib.Metric('logit_diff', 3), 'needs --versus'),
    (lambda m: effects_lib.Metric('accuracy'), '--metric must be one of'),
    (
      lambda m: effects_lib.head_effects(m, IDS, effects_lib.Metric('loss'), heads=[(9, 0)]),
      'layer 9, head 0 is not in the model',
    ),
    (
      lambda m: effects_lib.head_effects(
        m, IDS, effects_lib.Metric('loss'), ablation='patch', other=SOURCE[:, :5]
      ),
      '--source encodes to 5 tokens and --prompt to 12',
    ),
    (
      lambda m: effects_lib.head_effects(m, IDS, effects_lib.Metric('loss'), ablation='mean'),
      '--ablation=mean needs --reference',
    ),
  ],
)
def test_faults_are_one_sentence(checkpoint, call, message):
  _, model = checkpoint
  with pytest.raises(ValueError, match=message):
    call(model)
