"""What the peers of Attend's Transformer (`benchmarks/linen_peer.py`, `benchmarks/torch_peer.py`)
take from its config, and the parameter counts they must reach to be the same model."""

# nn.Transformer's final encoder and decoder LayerNorms: a scale and a bias of d_model each.
TORCH_EXTRA_PARAMS_PER_D = 4


def peer_model_config(model_config, size: dict) -> dict:
  """Attend's `config.model` as the fields the peers take; refuses settings they cannot mirror.

  Args:
    model_config: an encoder-decoder Transformer's `config.model`.
    size: the vocabulary sizes, `{'input_vocab': ..., 'output_vocab': ...}`.
  """
  mirrored = dict(norm='post', score='scaled_dot', activation='relu', positions='sinusoidal')
  for field, value in mirrored.items():
    if model_config.get(field, value) != value:
      raise ValueError(
        f'config.model.{field} must be {value!r} for the peers; got {model_config.get(field)!r}.'
      )
  layers = model_config.num_layers
  return dict(
    input_vocab_size=size['input_vocab'],
    output_vocab_size=size['output_vocab'],
    num_encoder_layers=model_config.get('num_encoder_layers') or layers,
    num_decoder_layers=model_config.get('num_decoder_layers') or layers,
    d_model=model_config.d_model,
    num_heads=model_config.num_heads,
    d_ff=model_config.d_ff,
    dropout_rate=model_config.dropout_rate,
    attention_dropout_rate=model_config.get('attention_dropout_rate', 0.0),
    share_embeddings=model_config.share_embeddings,
    tie_output=model_config.tie_output,
  )


def check_param_counts(params: dict[str, int], d_model: int) -> None:
  """Raises RuntimeError unless the peers present in `params` have Attend's parameter count."""
  expected = {
    'linen': params['attend'],
    'torch': params['attend'] + TORCH_EXTRA_PARAMS_PER_D * d_model,
  }
  for name, count in expected.items():
    if name in params and params[name] != count:
      raise RuntimeError(
        f'{name} has {params[name]:,} parameters, expected {count:,} '
        f'(Attend has {params["attend"]:,}): the models differ.'
      )
