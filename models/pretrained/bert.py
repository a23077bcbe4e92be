"""BERT-family encoders as Attend's `EncoderMLM`: `load_encoder(checkpoint)`.

The checkpoint (files.py's `read`) holds config.json, the tensors and tokenizer.json. Its
architecture becomes `EncoderMLM`'s BERT options (post-norm, `norm_eps`, exact GELU, learned
positions, token types, a LayerNorm over the embeddings, unscaled token rows); each tensor is
mapped by the one table below (`EMBEDDINGS`, `LAYER` per layer, `MLM_HEAD`; torch's `[out, in]`
linear weights transposed to `[in, out]` kernels). Anything the loader cannot represent
faithfully (another architecture, a relative position embedding, a missing or misshapen tensor)
is a ValueError naming it.
"""

import dataclasses
from typing import Any

from flax import nnx

from models.language import EncoderMLM
from models.pretrained.files import Checkpoint
from models.pretrained.tables import PAD_ID, SAME, TRANSPOSED, Row, assign
from models.stack_config import StackConfig

MODEL_TYPE = 'bert'  # config.json's `model_type` of the encoders this module loads

# Attend parameter path <- checkpoint tensor name, and whether the tensor is a torch Linear
# weight (`[out, in]`, transposed). `{i}` runs over the layers. The one place names are mapped.
EMBEDDINGS = (
  ('embed.embed.embedding', 'embeddings.word_embeddings.weight', False),
  ('positions.embed.embedding', 'embeddings.position_embeddings.weight', False),
  ('token_types.embedding', 'embeddings.token_type_embeddings.weight', False),
  ('embed_norm.scale', 'embeddings.LayerNorm.weight', False),
  ('embed_norm.bias', 'embeddings.LayerNorm.bias', False),
)
LAYER = (
  ('layers.{i}.self_attn.w_q.kernel', 'encoder.layer.{i}.attention.self.query.weight', True),
  ('layers.{i}.self_attn.w_q.bias', 'encoder.layer.{i}.attention.self.query.bias', False),
  ('layers.{i}.self_attn.w_k.kernel', 'encoder.layer.{i}.attention.self.key.weight', True),
  ('layers.{i}.self_attn.w_k.bias', 'encoder.layer.{i}.attention.self.key.bias', False),
  ('layers.{i}.self_attn.w_v.kernel', 'encoder.layer.{i}.attention.self.value.weight', True),
  ('layers.{i}.self_attn.w_v.bias', 'encoder.layer.{i}.attention.self.value.bias', False),
  ('layers.{i}.self_attn.w_o.kernel', 'encoder.layer.{i}.attention.output.dense.weight', True),
  ('layers.{i}.self_attn.w_o.bias', 'encoder.layer.{i}.attention.output.dense.bias', False),
  ('layers.{i}.norms.0.scale', 'encoder.layer.{i}.attention.output.LayerNorm.weight', False),
  ('layers.{i}.norms.0.bias', 'encoder.layer.{i}.attention.output.LayerNorm.bias', False),
  ('layers.{i}.ffn.w_1.kernel', 'encoder.layer.{i}.intermediate.dense.weight', True),
  ('layers.{i}.ffn.w_1.bias', 'encoder.layer.{i}.intermediate.dense.bias', False),
  ('layers.{i}.ffn.w_2.kernel', 'encoder.layer.{i}.output.dense.weight', True),
  ('layers.{i}.ffn.w_2.bias', 'encoder.layer.{i}.output.dense.bias', False),
  ('layers.{i}.norms.1.scale', 'encoder.layer.{i}.output.LayerNorm.weight', False),
  ('layers.{i}.norms.1.bias', 'encoder.layer.{i}.output.LayerNorm.bias', False),
)
# BERT's masked-LM head (BertForMaskedLM); its decoder is the tied word embedding. Loaded when
# the checkpoint has it; sentence encoders such as all-MiniLM-L6-v2 do not: it is initialised
# (`load_model`'s seed), reported as 'fresh' and trained by configs/minilm_mlm.py.
MLM_HEAD = (
  ('mlm_dense.kernel', 'cls.predictions.transform.dense.weight', True),
  ('mlm_dense.bias', 'cls.predictions.transform.dense.bias', False),
  ('mlm_norm.scale', 'cls.predictions.transform.LayerNorm.weight', False),
  ('mlm_norm.bias', 'cls.predictions.transform.LayerNorm.bias', False),
  ('mlm_bias', 'cls.predictions.bias', False),
)
# config.json's `hidden_act` -> Attend's activation ('gelu' in transformers is the erf form).
ACTIVATIONS = {
  'gelu': 'gelu_exact',
  'gelu_new': 'gelu',
  'gelu_pytorch_tanh': 'gelu',
  'relu': 'relu',
}
# config.json fields without a default: the sizes.
SIZES = (
  'vocab_size',
  'hidden_size',
  'num_hidden_layers',
  'num_attention_heads',
  'intermediate_size',
)
# config.json fields that would change the function; any other value is refused. The padding id
# must be the one data/ pads with, or padded positions would read as tokens.
REQUIRED = {
  'position_embedding_type': 'absolute',
  'is_decoder': False,
  'add_cross_attention': False,
  'pad_token_id': PAD_ID,
}


def model_args(config: dict[str, Any]) -> dict[str, Any]:
  """`EncoderMLM`'s arguments (`stack` and the embedding options) for a BERT `config.json`."""
  model_type = config.get('model_type')
  if model_type != MODEL_TYPE:
    raise ValueError(
      f'config.json has model_type={model_type!r}; the loader supports {MODEL_TYPE!r} '
      '(BERT-family encoders such as MiniLM).'
    )
  for field, value in REQUIRED.items():
    if config.get(field, value) != value:
      raise ValueError(
        f'config.json has {field}={config[field]!r}, which the loader does not '
        f'support (only {value!r}).'
      )
  absent = [field for field in SIZES if field not in config]
  if absent:
    raise ValueError(f'config.json has no {absent[0]}; a BERT config gives {", ".join(SIZES)}.')
  act = config.get('hidden_act', 'gelu')
  if act not in ACTIVATIONS:
    raise ValueError(f'config.json has hidden_act={act!r}; supported: {sorted(ACTIVATIONS)}.')
  stack = StackConfig(
    num_layers=config['num_hidden_layers'],
    d_model=config['hidden_size'],
    num_heads=config['num_attention_heads'],
    d_ff=config['intermediate_size'],
    dropout_rate=config.get('hidden_dropout_prob', 0.1),
    attention_dropout_rate=config.get('attention_probs_dropout_prob', 0.1),
    norm='post',
    norm_eps=config.get('layer_norm_eps', 1e-12),
    activation=ACTIVATIONS[act],
    positions='learned',
    max_length=config.get('max_position_embeddings', 512),
  )
  return dict(
    vocab_size=config['vocab_size'],
    pad_id=REQUIRED['pad_token_id'],
    stack=stack,
    scale_embeddings=False,
    embed_norm=True,
    type_vocab_size=config.get('type_vocab_size', 2),
  )


def table(num_layers: int) -> list[Row]:
  """The table for `num_layers` layers: (Attend path, checkpoint name, transform) per tensor."""
  layers = [
    (ours.format(i=i), theirs.format(i=i), t)
    for i in range(num_layers)
    for ours, theirs, t in LAYER
  ]
  return [(ours, theirs, TRANSPOSED if t else SAME) for ours, theirs, t in [*EMBEDDINGS, *layers]]


def _head_rows() -> list[Row]:
  return [(ours, theirs, TRANSPOSED if t else SAME) for ours, theirs, t in MLM_HEAD]


def load_encoder(
  checkpoint: Checkpoint, *, num_classes: int | None = None, seed: int = 0, **overrides: Any
) -> tuple[EncoderMLM, dict[str, list[str]]]:
  """The checkpoint as an `EncoderMLM`, and what was loaded (`{'loaded', 'fresh', 'unused'}`).

  Args:
    checkpoint: from `read`.
    num_classes: builds a classification head (fresh) with this many classes.
    seed: initialises what the checkpoint lacks (a classification head, an MLM head).
    **overrides: `StackConfig` fields to change, e.g. `dropout_rate`; only those that keep the
      parameters' shapes and meaning make sense (dropout, `attention_impl`).
  """
  args = model_args(checkpoint.config)
  args['stack'] = dataclasses.replace(args['stack'], **overrides)
  model = EncoderMLM(**args, num_classes=num_classes, rngs=nnx.Rngs(seed))
  tensors = {name.removeprefix('bert.'): value for name, value in checkpoint.tensors.items()}
  rows = table(args['stack'].num_layers)
  has_head = any(theirs in tensors for _, theirs, _ in MLM_HEAD)
  assign(model, tensors, rows + (_head_rows() if has_head else []), checkpoint.name)
  used = {theirs for _, theirs, _ in rows + list(MLM_HEAD)}
  loaded = [ours for ours, _, _ in rows + (_head_rows() if has_head else [])]
  fresh = ([] if has_head else [ours for ours, _, _ in MLM_HEAD]) + (
    ['pooler', 'classifier'] if num_classes else []
  )
  return model, dict(loaded=loaded, fresh=fresh, unused=sorted(set(tensors) - used))
