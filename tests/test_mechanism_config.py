"""The 2025 mechanisms' fields (`models.mechanism_config`) and hybrid stacks' layer pattern
(`StackConfig.layer_pattern`): each layer's variant, and a wrong field refused in one sentence
when the configuration is made, before any parameter or compilation."""

import pytest

from models.stack_config import StackConfig


def test_a_layer_pattern_gives_the_layers_their_variants_in_turn_with_their_depth():
  stack = StackConfig(num_layers=5, layer_pattern='linear, linear,softmax')
  layers = [stack.layer_config(i) for i in range(5)]
  assert [layer.attention for layer in layers] == [
    'linear',
    'linear',
    'softmax',
    'linear',
    'linear',
  ]
  assert [layer.layer_index for layer in layers] == [0, 1, 2, 3, 4]
  assert all(layer.layer_pattern == '' for layer in layers)
  assert StackConfig(num_layers=2).layer_config(1) == StackConfig(num_layers=2)  # no pattern


@pytest.mark.parametrize(
  'fields, sentence',
  [
    (dict(layer_pattern='softmax,mamba'), "names 'mamba', which is not an attention variant"),
    (dict(layer_pattern='linear', attention='sigmoid'), 'leave attention at its default'),
    # a kind of layer whose fields the pattern's variant cannot take: refused when the stack is
    # made, not when its layer is built
    (dict(layer_pattern='softmax,linear', window=4), "attention='linear' cannot take window=4"),
    (dict(kv_lora_rank=512, d_model=512), 'kv_lora_rank=512 must be smaller than the width'),
    (dict(rope_head_dim=16), 'rope_head_dim=16 is a field of multi-head latent attention'),
    (
      dict(kv_lora_rank=32, positions='rope', rope_head_dim=8, index_topk=600, max_length=512),
      'index_topk=600 must be at most the context, 512 positions',
    ),
    (dict(kv_lora_rank=32, positions='rope'), 'rope_head_dim=0 is the decoupled rotary key'),
    (dict(rope_dims=3, positions='rope'), 'rope_dims=3 rotates the first features'),
    (dict(output_gate='yes'), "output_gate must be one of False, True; got 'yes'"),
  ],
)
def test_a_wrong_mechanism_field_is_one_sentence_naming_it(fields, sentence):
  with pytest.raises(ValueError, match='^[^\n]*$') as error:
    StackConfig(**fields)
  assert sentence in str(error.value)
