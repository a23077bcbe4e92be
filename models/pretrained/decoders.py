"""Pretrained decoder language models as Attend `DecoderLM`s: `load_decoder(checkpoint)`.

The checkpoint (files.py's `read`: a folder, a `.zip` or a GGUF file) holds config.json, the tensors
and tokenizer.json. Its `model_type` picks one `Architecture` of `ARCHITECTURES`, the registry of
the decoders Attend converts: how config.json becomes `DecoderLM`'s options, the config values
Attend cannot compute (refused, naming the key), and one table mapping each tensor (`{i}` runs over
the layers) with the transform it needs (decoder_tables.py). A new architecture is one entry there.
Rotary positions keep Hugging Face's layout (`rope_layout='halves'`), so captured queries and keys
are Hugging Face's too. Config keys that do not change the computation (token ids, dtypes,
`initializer_range`, ...) are ignored and reported.
"""

import dataclasses
import functools
from typing import Any, Callable

from flax import nnx
import jax

from models import traced_rngs
from models.language import DecoderLM
from models.pretrained import decoder_configs, decoder_tables, deepseek, diffllama, qwen3_next
from models.pretrained.files import Checkpoint
from models.pretrained.tables import PAD_ID, Row, assign
from models.stack_config import StackConfig

# config.json's hidden activation -> Attend's (transformers' 'gelu' is the erf form).
ACTIVATIONS = {
  'gelu_new': 'gelu',
  'gelu_pytorch_tanh': 'gelu',
  'gelu': 'gelu_exact',
  'silu': 'silu',
}


@dataclasses.dataclass(frozen=True)
class Architecture:
  """One `model_type`: `args(config)` -> DecoderLM's arguments but the vocabulary; `refused`:
  config keys whose value, when it differs from the given one, changes the computation; `rows`:
  the tensor table for a number of layers and the config (GPT-2 ties its head, Llama may not),
  read both ways; `config(args)`: the way back, DecoderLM's arguments -> the config.json
  (decoder_configs.py), which `args` must read back as the same model."""

  args: Callable[[dict[str, Any]], dict[str, Any]]
  refused: dict[str, Any]
  rows: Callable[[int, dict[str, Any]], list[Row]]
  config: Callable[[dict[str, Any]], dict[str, Any]]


def _activation(config: dict[str, Any], key: str, default: str) -> str:
  """Attend's activation for config.json's `key` (absent: transformers' `default` for it)."""
  act = config.get(key, default)
  if act not in ACTIVATIONS:
    raise ValueError(f'config.json has {key}={act!r}; supported: {sorted(ACTIVATIONS)}.')
  return ACTIVATIONS[act]


def _gpt2_args(config: dict[str, Any]) -> dict[str, Any]:
  d_model = config['n_embd']
  stack = StackConfig(
    num_layers=config['n_layer'],
    d_model=d_model,
    num_heads=config['n_head'],
    d_ff=config.get('n_inner') or 4 * d_model,
    dropout_rate=config.get('resid_pdrop', 0.1),
    attention_dropout_rate=config.get('attn_pdrop', 0.1),
    norm='pre',
    norm_eps=config.get('layer_norm_epsilon', 1e-5),
    activation=_activation(config, 'activation_function', 'gelu_new'),
    positions='learned',
    max_length=config.get('n_positions', 1024),
  )
  return dict(stack=stack, tie_output=True, scale_embeddings=False)


def _rope_base(config: dict[str, Any]) -> float:
  """The rotary base: `rope_theta`, or in newer configs `rope_parameters['rope_theta']`."""
  parameters = config.get('rope_parameters') or {}
  return float(parameters.get('rope_theta', config.get('rope_theta', 10000.0)))


def _llama_args(config: dict[str, Any], *, qkv_bias: bool = False) -> dict[str, Any]:
  d_model, heads = config['hidden_size'], config['num_attention_heads']
  head_dim = config.get('head_dim') or d_model // heads
  window = config.get('sliding_window') if config.get('use_sliding_window', True) else None
  stack = StackConfig(
    num_layers=config['num_hidden_layers'],
    d_model=d_model,
    num_heads=heads,
    num_kv_heads=config.get('num_key_value_heads') or heads,
    d_k=head_dim,
    d_v=head_dim,
    d_ff=config['intermediate_size'],
    dropout_rate=0.0,  # Llama-family configs have no residual dropout, only `attention_dropout`
    attention_dropout_rate=float(config.get('attention_dropout', 0.0)),
    norm='pre',
    norm_type='rmsnorm',
    norm_eps=config.get('rms_norm_eps', 1e-6),
    activation=_activation(config, 'hidden_act', 'silu'),
    gated_mlp=True,
    mlp_bias=bool(config.get('mlp_bias', False)),
    qkv_bias=qkv_bias or bool(config.get('attention_bias', False)),
    out_bias=bool(config.get('attention_bias', False)),
    positions='rope',
    rope_base=_rope_base(config),
    rope_layout='halves',
    window=int(window or 0),
    max_length=config.get('max_position_embeddings', 2048),
  )
  tied = bool(config.get('tie_word_embeddings', False))
  return dict(stack=stack, tie_output=tied, output_bias=False, scale_embeddings=False)


def _gemma3_layers(config: dict[str, Any]) -> tuple[int, int]:
  """`(window, global_every)` of Gemma 3's layer types: sliding-window layers with every k-th
  one full attention (`sliding_window_pattern` k, 6 in configs that predate `layer_types`)."""
  num_layers, pattern = config['num_hidden_layers'], config.get('sliding_window_pattern', 6)
  every_kth = lambda k: [
    'full_attention' if k and (i + 1) % k == 0 else 'sliding_attention' for i in range(num_layers)
  ]
  types = list(config.get('layer_types') or every_kth(pattern))
  full = [i for i, kind in enumerate(types) if kind == 'full_attention']
  every = full[0] + 1 if full else 0
  if types != every_kth(every):
    raise ValueError(
      f'config.json has layer_types={types!r}; the converter converts sliding_attention layers '
      'with every k-th one full_attention only.'
    )
  if every == 1:  # every layer global: no window anywhere
    return 0, 0
  return int(config.get('sliding_window', 4096)), every


def _gemma3_rope_bases(config: dict[str, Any]) -> tuple[float, float]:
  """The rotary bases `(sliding layers', full layers')`: `rope_parameters` per layer type, or in
  older configs `rope_local_base_freq` and `rope_theta`; any rope_type but 'default' refused."""
  parameters = config.get('rope_parameters') or {}
  local, full = (parameters.get(kind) or {} for kind in ('sliding_attention', 'full_attention'))
  for kind, rope in (('sliding_attention', local), ('full_attention', full)):
    if rope.get('rope_type', 'default') != 'default':
      raise ValueError(
        f"config.json has rope_parameters['{kind}']={rope!r}; the converter converts "
        "rope_type 'default' only."
      )
  return (
    float(local.get('rope_theta', config.get('rope_local_base_freq', 10000.0))),
    float(full.get('rope_theta', config.get('rope_theta', 1000000.0))),
  )


def _gemma3_args(config: dict[str, Any]) -> dict[str, Any]:
  """Gemma 3's text decoder: Llama's with (1 + w) RMSNorms before and after each sublayer,
  qk-norm, GeGLU, scores scaled by `query_pre_attn_scalar^-1/2` (and soft-capped by
  `attn_logit_softcapping`, which Gemma 3's configs set to None), sliding-window layers with
  every k-th one global and its own rotary base, and embeddings scaled by sqrt(D)."""
  head_dim, bias = config.get('head_dim', 256), bool(config.get('attention_bias', False))
  window, every = _gemma3_layers(config)
  local, full = _gemma3_rope_bases(config)
  stack = StackConfig(
    num_layers=config['num_hidden_layers'],
    d_model=config['hidden_size'],
    num_heads=config['num_attention_heads'],
    num_kv_heads=config.get('num_key_value_heads', 4),
    d_k=head_dim,
    d_v=head_dim,
    d_ff=config['intermediate_size'],
    dropout_rate=0.0,
    attention_dropout_rate=float(config.get('attention_dropout') or 0.0),
    norm='pre',
    norm_type='rmsnorm',
    norm_eps=config.get('rms_norm_eps', 1e-6),
    norm_plus_one=True,
    sandwich_norm=True,
    activation=_activation(config, 'hidden_activation', 'gelu_pytorch_tanh'),
    gated_mlp=True,
    mlp_bias=False,
    qkv_bias=bias,
    out_bias=bias,
    qk_norm=True,
    # transformers caps the scaled scores before the mask, as Attend's softcap does.
    softcap=float(config.get('attn_logit_softcapping') or 0.0),
    query_scale=float(config.get('query_pre_attn_scalar', 256)) ** -0.5,
    positions='rope',
    rope_base=local if window else full,
    rope_base_global=full if every else None,
    rope_layout='halves',
    window=window,
    global_every=every,
    max_length=config.get('max_position_embeddings', 131072),
  )
  tied = bool(config.get('tie_word_embeddings', True))
  return dict(stack=stack, tie_output=tied, output_bias=False, scale_embeddings=True)


_LLAMA_REFUSED = {'rope_scaling': None, 'pretraining_tp': 1}
# qk-norm's epsilon is attention.rms_normalize's 1e-6.
_GEMMA3_REFUSED = {
  'rope_scaling': None,
  'final_logit_softcapping': None,
  'use_bidirectional_attention': False,
  'rms_norm_eps': 1e-6,
}
ARCHITECTURES = {
  'gpt2': Architecture(
    _gpt2_args,
    {
      'scale_attn_weights': True,
      'scale_attn_by_inverse_layer_idx': False,
      'add_cross_attention': False,
      'tie_word_embeddings': True,
    },
    decoder_tables.gpt2_rows,
    decoder_configs.gpt2,
  ),
  'llama': Architecture(
    _llama_args, _LLAMA_REFUSED, decoder_tables.llama_rows, decoder_configs.llama
  ),
  'mistral': Architecture(
    _llama_args, _LLAMA_REFUSED, decoder_tables.llama_rows, decoder_configs.mistral
  ),
  'qwen2': Architecture(
    lambda config: _llama_args(config, qkv_bias=True),
    {**_LLAMA_REFUSED, 'use_sliding_window': False},
    functools.partial(decoder_tables.llama_rows, qkv_bias=True),
    decoder_configs.qwen2,
  ),
  'gemma3_text': Architecture(
    _gemma3_args, _GEMMA3_REFUSED, decoder_tables.gemma3_rows, decoder_configs.gemma3_text
  ),
  'deepseek_v3': Architecture(
    deepseek.v3_args, deepseek.V3_REFUSED, deepseek.v3_rows, deepseek.v3_config
  ),
  'deepseek_v32': Architecture(
    deepseek.v32_args, deepseek.V32_REFUSED, deepseek.v32_rows, deepseek.v32_config
  ),
  'diffllama': Architecture(
    lambda config: diffllama.args(_llama_args(config)),
    diffllama.REFUSED,
    diffllama.rows,
    diffllama.config,
  ),
  'qwen3_next': Architecture(
    qwen3_next.args, qwen3_next.REFUSED, qwen3_next.rows, qwen3_next.config
  ),
}


class _Reading(dict):
  """config.json as a dict that remembers which keys were read (the rest are reported unused)."""

  def __init__(self, config: dict[str, Any]):
    super().__init__(config)
    self.read: set[str] = set()

  def __getitem__(self, key):
    self.read.add(key)
    return super().__getitem__(key)

  def get(self, key, default=None):
    self.read.add(key)
    return super().get(key, default)


def decoder_args(config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
  """`DecoderLM`'s arguments for a config.json, and the config keys that were not needed.

  Raises:
    ValueError: one sentence naming an unknown `model_type`, a missing size, or a key whose value
      changes the computation in a way Attend does not convert.
  """
  model_type = config.get('model_type')
  if model_type not in ARCHITECTURES:
    raise ValueError(
      f'config.json has model_type={model_type!r}; the decoders converted are '
      f'{", ".join(ARCHITECTURES)}.'
    )
  architecture = ARCHITECTURES[model_type]
  for key, value in architecture.refused.items():
    if config.get(key, value) != value:
      raise ValueError(
        f'config.json has {key}={config[key]!r}, which changes the computation in a way '
        f'the converter does not reproduce (it converts {key}={value!r} only).'
      )
  reading = _Reading(config)
  try:
    args = architecture.args(reading)
    vocab_size = reading['vocab_size']
  except KeyError as error:
    raise ValueError(f'config.json of a {model_type} model has no {error.args[0]!r}.') from None
  unused = sorted(set(config) - reading.read - set(architecture.refused) - {'model_type'})
  return dict(vocab_size=vocab_size, pad_id=PAD_ID, **args), unused


def load_decoder(
  checkpoint: Checkpoint, *, seed: int = 0, **overrides: Any
) -> tuple[DecoderLM, dict[str, list[str]]]:
  """The checkpoint (files.py's `read`) as a `DecoderLM`, and what was read:
  `{'loaded': Attend paths, 'unused': tensors not converted, 'ignored_config': config keys
  that do not change the computation}`. `overrides`: `StackConfig` fields (dropout, kernel)."""
  args, ignored = decoder_args(checkpoint.config)
  args['stack'] = dataclasses.replace(args['stack'], **overrides)
  # Every parameter is the checkpoint's: the model is built as shapes alone and each tensor fills
  # its variable, with no random initialisation drawn first (SmolLM2's 135 M parameters: about
  # 28 s -> 6 s of CPU under the test suite's XLA flags).
  model = nnx.eval_shape(lambda: DecoderLM(**args, rngs=traced_rngs(seed)))
  architecture = ARCHITECTURES[checkpoint.config['model_type']]
  rows = architecture.rows(args['stack'].num_layers, checkpoint.config)
  assign(model, checkpoint.tensors, rows, checkpoint.name)
  unfilled = [
    jax.tree_util.keystr(path)
    for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(model))
    if isinstance(leaf, jax.ShapeDtypeStruct)
  ]
  if unfilled:  # a table that misses a parameter of the model it builds: a converter's bug
    raise ValueError(f'The {checkpoint.config["model_type"]} table leaves {unfilled[0]} unset.')
  used = {theirs for _, theirs, _ in rows}
  return model, dict(
    loaded=[ours for ours, _, _ in rows],
    unused=sorted(set(checkpoint.tensors) - used),
    ignored_config=ignored,
  )
