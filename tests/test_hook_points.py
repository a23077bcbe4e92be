"""TransformerLens's hook points, as Attend's taps, equal the hidden values of transformers' model
under forward hooks, on tiny random Llama and Gemma 3 checkpoints (tests/tiny_decoders.py), in
float64 on both sides; a patched sublayer output is what the stream adds. (tests/
test_interventions.py checks that an edit of each stream tap drives what reads it.)"""

import sys

import float64
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_decoders import VOCAB, _model, write_checkpoint

from models import interventions, pretrained

pytest.importorskip('transformers', reason='the reference implementation (test extra)')
IDS = np.random.default_rng(3).integers(1, VOCAB, (2, 10))
# transformers computes its RMSNorms and rotary angles in float32 even in a float64 model (and
# Gemma's sqrt(D) embedding scale is a float32 number), so every value after its first norm
# carries float32 rounding, 2^-24 = 6e-8 relative per rounding, a few of them per layer, against
# Attend's float64 throughout. A tap agrees within RELATIVE times its largest magnitude (measured:
# 3.3e-7 at most, Gemma 3's last queries); a misplaced tap (before a sandwich norm rather than
# after it, the stream before a sublayer rather than after it) differs by order 1.
RELATIVE = 2e-6


@pytest.fixture(scope='module', params=['llama', 'gemma3_text'])
def checkpoint(request, tmp_path_factory):
  folder = write_checkpoint(request.param, str(tmp_path_factory.mktemp(request.param)))
  model, _ = pretrained.load_decoder(pretrained.read(folder))
  return folder, model


def _first(args, kwargs):
  """A hooked module's input: its first positional argument or `hidden_states`."""
  return args[0] if args else kwargs['hidden_states']


def _output(out):
  """A hooked module's output tensor (attention modules return `(output, weights)`)."""
  return out[0] if isinstance(out, tuple) else out


def _reference(folder: str, monkeypatch) -> dict[str, np.ndarray]:
  """transformers' hidden values of IDS under Attend's tap names, in Attend's layouts."""
  import torch

  model = _model(folder)
  config, layers = model.config, model.model.layers
  n, k, h = config.num_attention_heads, config.num_key_value_heads, config.head_dim
  gemma = config.model_type.startswith('gemma')
  found = {}

  def keep(name, read):
    return lambda module, args, kwargs, out=None: found.update({name: read(args, kwargs, out)})

  pre = lambda module, name, read: module.register_forward_pre_hook(
    keep(name, read), with_kwargs=True
  )
  post = lambda module, name, read: module.register_forward_hook(keep(name, read), with_kwargs=True)
  value = lambda args, kwargs, out: _output(out)
  given = lambda args, kwargs, out: _first(args, kwargs)

  def per_head(heads):
    """A projection's output, or o_proj's input, `[B, T, heads*H]` as `[B, heads, T, H]`."""
    split = lambda x: x.unflatten(-1, (heads, h)).transpose(1, 2)
    return lambda args, kwargs, out: split(_first(args, kwargs) if out is None else out)

  hooks = [post(model.model.embed_tokens, 'embeddings', value)]
  for i, layer in enumerate(layers):
    path, attn = f'layers/{i}', layer.self_attn
    hooks += [
      pre(layer, f'{path}/resid_pre', given),
      post(layer, f'{path}/residual', value),
      post(attn.v_proj, f'{path}/self_attn/values', per_head(k)),
      pre(attn.o_proj, f'{path}/self_attn/heads', per_head(n)),  # z, before W_O
    ]
    if gemma:  # the sandwich norms: the outputs as added to the stream, after their post-norms
      hooks += [
        post(layer.post_attention_layernorm, f'{path}/attn_out', value),
        pre(layer.pre_feedforward_layernorm, f'{path}/resid_mid', given),
        post(layer.post_feedforward_layernorm, f'{path}/mlp_out', value),
      ]
    else:
      hooks += [
        post(attn, f'{path}/attn_out', value),
        pre(layer.post_attention_layernorm, f'{path}/resid_mid', given),
        post(layer.mlp, f'{path}/mlp_out', value),
      ]
  # Queries and keys as scored, after rotary positions (and Gemma's qk-norm): what the attention
  # module's own rotary function returns, layer by layer.
  modeling = sys.modules[type(layers[0].self_attn).__module__]
  rotate, rotated = modeling.apply_rotary_pos_emb, []

  def recording(*args, **kwargs):
    rotated.append(rotate(*args, **kwargs))
    return rotated[-1]

  monkeypatch.setattr(modeling, 'apply_rotary_pos_emb', recording)
  with torch.no_grad():
    out = model(torch.tensor(IDS), output_attentions=True)
  for hook in hooks:
    hook.remove()
  for i, (q, key) in enumerate(rotated):
    found[f'layers/{i}/self_attn/queries'], found[f'layers/{i}/self_attn/keys'] = q, key
  for i, weights in enumerate(out.attentions):
    found[f'layers/{i}/self_attn/weights'] = weights
  return {name: value.numpy() for name, value in found.items()}


def test_every_hook_point_equals_transformers_hidden_values(checkpoint, monkeypatch):
  folder, model = checkpoint
  expected = _reference(folder, monkeypatch)
  with float64.model_in_float64(model) as model64:
    _, captured = interventions.capture(model64, jnp.asarray(IDS), method='token_logits')
  parts = ('resid_pre', 'attn_out', 'resid_mid', 'mlp_out', 'residual')
  parts += tuple(f'self_attn/{p}' for p in ('queries', 'keys', 'values', 'weights', 'heads'))
  names = {f'layers/{i}/{part}' for i in range(len(model.layers)) for part in parts}
  assert set(expected) == names | {'embeddings'} == set(captured)  # every tap of the model
  errors = {}
  for name, value in expected.items():
    ours = np.asarray(captured[name])
    assert ours.dtype == np.float64 and ours.shape == value.shape, name
    errors[name] = np.abs(ours - value).max() / np.abs(value).max()
  assert max(errors.values()) < RELATIVE, max(errors.items(), key=lambda item: item[1])
  # Grouped-query attention: query head i reads key/value head i // (N/K), as transformers'
  # repeat_kv has it (N/K = 2 in both checkpoints). Attend's own values, so float64 rounding.
  weights, values = (np.asarray(captured[f'layers/0/self_attn/{p}']) for p in ('weights', 'values'))
  group = weights.shape[1] // values.shape[1]
  z = np.einsum('bnts,bnsh->bnth', weights, np.repeat(values, group, axis=1))  # [B, N, T, H]
  assert group == 2
  np.testing.assert_allclose(captured['layers/0/self_attn/heads'], z, rtol=0, atol=float64.ATOL)


def test_a_patched_sublayer_output_is_what_is_added_to_the_stream(checkpoint):
  """Patched in from another prompt, `attn_out` and `mlp_out` are added to the stream as they are
  (after Gemma's post-norms, not through them), and the change reaches the logits."""
  _, model = checkpoint
  other = IDS[::-1]
  with float64.model_in_float64(model) as model64:
    run = lambda ids, edits=None: interventions.capture(
      model64, jnp.asarray(ids), method='token_logits', edits=edits
    )
    clean, _ = run(IDS)
    _, source = run(other)
    names = ('layers/0/attn_out', 'layers/0/mlp_out')
    patched, got = run(IDS, {name: source[name] for name in names})
  close = lambda a, b: np.testing.assert_allclose(a, b, rtol=0, atol=float64.ATOL)
  close(got['layers/0/resid_mid'], got['layers/0/resid_pre'] + source['layers/0/attn_out'])
  close(got['layers/0/residual'], got['layers/0/resid_mid'] + source['layers/0/mlp_out'])
  assert np.abs(np.asarray(patched) - np.asarray(clean)).max() > 0.1  # the edit reached the logits
