"""The tensor tables of the pretrained decoders (decoders.py's `Architecture.rows`): for a number
of layers and a config.json, each Attend parameter with the checkpoint tensor it is read from and
written back to, and the transform between them (`tables.py`; `{i}` runs over the layers).

Torch `Linear` weights are `[out, in]` and are transposed; GPT-2's `Conv1D` weights are stored
input-major and are not, and its fused `c_attn` is split into queries, keys and values.
"""

from typing import Any

from models.pretrained.tables import SAME, TRANSPOSED, Part, Row


def gpt2_rows(num_layers: int, config: dict[str, Any]) -> list[Row]:
  del config
  layer = [
    ('norms.0.scale', 'ln_1.weight', SAME),
    ('norms.0.bias', 'ln_1.bias', SAME),
    *[
      (f'self_attn.w_{part}.{kind}', f'attn.c_attn.{name}', Part(k, 3))
      for k, part in enumerate('qkv')
      for kind, name in (('kernel', 'weight'), ('bias', 'bias'))
    ],
    ('self_attn.w_o.kernel', 'attn.c_proj.weight', SAME),
    ('self_attn.w_o.bias', 'attn.c_proj.bias', SAME),
    ('norms.1.scale', 'ln_2.weight', SAME),
    ('norms.1.bias', 'ln_2.bias', SAME),
    ('ffn.w_1.kernel', 'mlp.c_fc.weight', SAME),
    ('ffn.w_1.bias', 'mlp.c_fc.bias', SAME),
    ('ffn.w_2.kernel', 'mlp.c_proj.weight', SAME),
    ('ffn.w_2.bias', 'mlp.c_proj.bias', SAME),
  ]
  return [
    ('embed.embed.embedding', 'transformer.wte.weight', SAME),
    ('positions.embed.embedding', 'transformer.wpe.weight', SAME),
    *[
      (f'layers.{i}.{ours}', f'transformer.h.{i}.{theirs}', t)
      for i in range(num_layers)
      for ours, theirs, t in layer
    ],
    ('final_norm.scale', 'transformer.ln_f.weight', SAME),
    ('final_norm.bias', 'transformer.ln_f.bias', SAME),
  ]


def llama_block(attention: list[Row]) -> list[Row]:
  """A Llama-layout layer's rows: the input RMSNorm, `attention`'s rows, the post-attention
  RMSNorm and the SwiGLU feed-forward (Llama's layers, DeepSeek's dense ones, Qwen3-Next's)."""
  return [
    ('norms.0.scale', 'input_layernorm.weight', SAME),
    *attention,
    ('norms.1.scale', 'post_attention_layernorm.weight', SAME),
    ('ffn.w_gate.kernel', 'mlp.gate_proj.weight', TRANSPOSED),
    ('ffn.w_1.kernel', 'mlp.up_proj.weight', TRANSPOSED),
    ('ffn.w_2.kernel', 'mlp.down_proj.weight', TRANSPOSED),
  ]


def llama_rows(num_layers: int, config: dict[str, Any], *, qkv_bias: bool = False) -> list[Row]:
  biases = ('q', 'k', 'v') if qkv_bias or config.get('attention_bias') else ()
  layer = llama_block(
    [
      *[(f'self_attn.w_{p}.kernel', f'self_attn.{p}_proj.weight', TRANSPOSED) for p in 'qkv'],
      *[(f'self_attn.w_{p}.bias', f'self_attn.{p}_proj.bias', SAME) for p in biases],
      ('self_attn.w_o.kernel', 'self_attn.o_proj.weight', TRANSPOSED),
    ]
  )
  if config.get('attention_bias'):
    layer.append(('self_attn.w_o.bias', 'self_attn.o_proj.bias', SAME))
  if config.get('mlp_bias'):
    layer += [
      (f'ffn.{w}.bias', f'mlp.{n}.bias', SAME)
      for w, n in (('w_gate', 'gate_proj'), ('w_1', 'up_proj'), ('w_2', 'down_proj'))
    ]
  tied = config.get('tie_word_embeddings', False)
  return model_rows([layer] * num_layers, tied=tied)


def model_rows(layers: list[list[Row]], *, tied: bool) -> list[Row]:
  """A `model.`-prefixed checkpoint's table (Llama's layout, which Gemma 3, DeepSeek and
  Qwen3-Next share): the token embeddings, layer i's rows `layers[i]`, the final norm, and
  `lm_head` unless `tied`."""
  rows = [
    ('embed.embed.embedding', 'model.embed_tokens.weight', SAME),
    *[
      (f'layers.{i}.{ours}', f'model.layers.{i}.{theirs}', t)
      for i, layer in enumerate(layers)
      for ours, theirs, t in layer
    ],
    ('final_norm.scale', 'model.norm.weight', SAME),
  ]
  return rows if tied else [*rows, ('output_proj.kernel', 'lm_head.weight', TRANSPOSED)]


def gemma3_rows(num_layers: int, config: dict[str, Any]) -> list[Row]:
  biases = 'qkvo' if config.get('attention_bias') else ''
  layer = [
    ('norms.0.scale', 'input_layernorm.weight', SAME),
    *[(f'self_attn.w_{p}.kernel', f'self_attn.{p}_proj.weight', TRANSPOSED) for p in 'qkvo'],
    *[(f'self_attn.w_{p}.bias', f'self_attn.{p}_proj.bias', SAME) for p in biases],
    ('self_attn.q_norm', 'self_attn.q_norm.weight', SAME),
    ('self_attn.k_norm', 'self_attn.k_norm.weight', SAME),
    ('post_norms.0.scale', 'post_attention_layernorm.weight', SAME),  # the sandwich's
    ('norms.1.scale', 'pre_feedforward_layernorm.weight', SAME),
    ('post_norms.1.scale', 'post_feedforward_layernorm.weight', SAME),
    ('ffn.w_gate.kernel', 'mlp.gate_proj.weight', TRANSPOSED),
    ('ffn.w_1.kernel', 'mlp.up_proj.weight', TRANSPOSED),
    ('ffn.w_2.kernel', 'mlp.down_proj.weight', TRANSPOSED),
  ]
  return model_rows([layer] * num_layers, tied=config.get('tie_word_embeddings', True))
