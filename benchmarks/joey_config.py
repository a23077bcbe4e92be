"""Joey NMT's config for an Attend config: the same model shape and, by default, the same training
settings (`benchmarks/translation_peer.py` runs them); `JOEY_RECIPES`, Joey's own recipes; the
changes `--joey_set` may make, checked by name before anything trains."""

import json
from pathlib import Path


def joey_model(attend_model: dict) -> dict:
  """Joey NMT's model section with the shape of Attend's model config (`attend['model']`)."""
  m = attend_model
  if m['name'] == 'transformer':
    side = dict(
      type='transformer',
      num_layers=m['num_layers'],
      num_heads=m['num_heads'],
      hidden_size=m['d_model'],
      ff_size=m['d_ff'],
      dropout=m['dropout_rate'],
      layer_norm=m['norm'],
      embeddings=dict(embedding_dim=m['d_model'], scale=True, dropout=m['dropout_rate']),
    )
    return dict(tied_embeddings=False, tied_softmax=m['tie_output'], encoder=side, decoder=side)
  embeddings = dict(embedding_dim=m['embed_dim'], dropout=m['dropout_rate'])
  rnn = dict(
    type='recurrent',
    rnn_type='gru',
    hidden_size=m['hidden_dim'],
    num_layers=m['num_layers'],
    dropout=m['dropout_rate'],
    embeddings=embeddings,
  )
  return dict(
    tied_embeddings=False,
    tied_softmax=False,
    encoder=dict(rnn, bidirectional=m['bidirectional']),
    decoder=dict(
      rnn,
      attention=m['attention'],
      init_hidden='bridge',
      input_feeding=True,
      hidden_dropout=m['dropout_rate'],
    ),
  )


# Training fields of Joey's that `--joey_set` may change besides those `joey_training` writes.
JOEY_EXTRA_FIELDS = ('normalization', 'clip_grad_val', 'updates', 'decrease_factor')

# Fields of Joey's model section `--joey_set` may change as model.FIELD: how weights start.
JOEY_MODEL_FIELDS = ('initializer', 'embed_initializer', 'embed_init_weight', 'init_rnn_orthogonal')

# `--joey_recipe`: the training sections of Joey NMT's own recipes for a real corpus, as changes
# from the matched settings (None: the field is left out, so Joey's default holds). The shapes,
# the batch of 64 sentences and selection by chrF stay matched. Joey 2.3.0 ships no RNN recipe
# for a real corpus; its 1.5 release did: configs/iwslt14_deen_bpe.yaml, a GRU with Bahdanau's
# attention on IWSLT14 de-en BPE (Adam at 2e-4 with Joey's default betas 0.9/0.999, the loss per
# token, no clipping, no label smoothing, plateau schedule). The Transformer's is 2.3.0's
# configs/iwslt14_deen_bpe.yaml (AdamW at 3e-4, betas 0.9/0.999, no warm-up, the loss per token,
# no clipping, label smoothing 0.1 as matched, plateau schedule). Both recipes' plateau schedule
# waits 8 and 5 validations before it lowers the rate, more than the 4 validations in these
# budgets, so the rate is constant here as it would be there (Joey 2.3.0's plateau scheduler also
# passes torch an argument torch 2.13 no longer takes).
JOEY_RECIPES = {
  'gru': dict(
    adam_betas=None,
    learning_rate=2e-4,
    normalization='tokens',
    clip_grad_norm=None,
    label_smoothing=None,
    scheduling='exponential',
    decrease_factor=1.0,
  ),
  'transformer': dict(
    optimizer='adamw',
    adam_betas=None,
    learning_rate=3e-4,
    normalization='tokens',
    clip_grad_norm=None,
    scheduling='exponential',
    decrease_factor=1.0,
    learning_rate_warmup=None,
  ),
}


def joey_training(attend: dict, changes: dict | None = None) -> dict:
  """Joey's training section with the optimiser settings of Attend's config (`attend`), then the
  `changes` (`--joey_set`: Joey's own field names; None removes a field, so Joey's default holds).

  Raises:
    ValueError: a change names a field this benchmark does not write or know.
  """
  training = dict(
    optimizer='adam',
    adam_betas=[attend['beta1'], attend['beta2']],
    learning_rate=attend['learning_rate'],
    learning_rate_min=0,  # Joey stops below this; the budget stops it here
    label_smoothing=attend['label_smoothing'],
    clip_grad_norm=attend['grad_clip'],
    batch_size=attend['dataset']['batch_size'],
    batch_type='sentence',
    eval_batch_size=attend['num_eval_decode'],
    eval_batch_type='sentence',
    epochs=1000,  # the wall-time budget ends training
    validation_freq=attend['eval_every_steps'],
    logging_freq=attend['log_every_steps'],
    eval_metrics=['chrf', 'bleu'],
    early_stopping_metric='chrf',
    keep_best_ckpts=1,
    overwrite=True,
    shuffle=True,
    random_seed=attend['seed'],
  )
  if attend['schedule'] == 'rsqrt':  # linear warm-up to the peak, then 1/sqrt(step)
    training.update(
      scheduling='warmupinversesquareroot', learning_rate_warmup=attend['warmup_steps']
    )
  elif attend['schedule'] == 'constant':  # Joey 2.3.0 refuses no schedule: a decay of factor 1
    training.update(scheduling='exponential', decrease_factor=1.0)
  else:
    raise ValueError(f'config.schedule={attend["schedule"]!r} has no Joey NMT counterpart here.')
  changes = changes or {}
  if unknown := sorted(set(changes) - set(training) - set(JOEY_EXTRA_FIELDS)):
    raise ValueError(
      f'--joey_set: {unknown} are not training fields this benchmark writes; choose among '
      f'{sorted({*training, *JOEY_EXTRA_FIELDS})}.'
    )
  training.update(changes)
  return {key: value for key, value in training.items() if value is not None}


def parse_changes(text: str) -> dict:
  """'normalization=tokens,learning_rate=0.003,clip_grad_norm=null' -> a dict of Joey training
  fields, each value read as JSON where it is JSON (numbers, null, true) and as text otherwise."""
  changes = {}
  for item in filter(None, text.split(',')):
    key, equals, value = item.partition('=')
    if not equals or not key:
      raise ValueError(f'--joey_set: {item!r} is not FIELD=VALUE.')
    try:
      changes[key] = json.loads(value)
    except ValueError:
      changes[key] = value
  return changes


def joey_config(
  name: str, attend: dict, data: Path, spm_model: Path, model_dir: Path, changes: dict | None = None
) -> dict:
  """Joey NMT's whole config for Attend's config `attend`; `changes` are Joey's training fields,
  or, prefixed 'model.', its model section's initialisation fields (`JOEY_MODEL_FIELDS`)."""
  changes = changes or {}
  model_changes = {
    k.removeprefix('model.'): v for k, v in changes.items() if k.startswith('model.')
  }
  if unknown := sorted(set(model_changes) - set(JOEY_MODEL_FIELDS)):
    raise ValueError(
      f'--joey_set: model.{unknown[0]} is not among the model fields it may change, '
      f'{["model." + field for field in JOEY_MODEL_FIELDS]}.'
    )
  training_changes = {k: v for k, v in changes.items() if not k.startswith('model.')}
  dataset = attend['dataset']
  side = lambda lang, max_length: dict(  # noqa: E731
    lang=lang,
    level='bpe',
    lowercase=False,
    max_length=max_length,
    voc_file=str(data / 'vocab.txt'),
    tokenizer_type='sentencepiece',
    tokenizer_cfg=dict(model_file=str(spm_model)),
  )
  return dict(
    name=f'attend_peer_{name}',
    model_dir=str(model_dir),
    use_cuda=False,
    data=dict(
      train=str(data / 'train'),
      dev=str(data / 'dev'),
      test=str(data / 'test'),
      dataset_type='plain',
      src=side('src', dataset['max_input_length']),
      trg=side('trg', dataset['max_target_length']),
    ),
    training=joey_training(attend, training_changes),
    testing=dict(
      beam_size=1, max_output_length=dataset['max_target_length'], eval_metrics=['bleu', 'chrf']
    ),
    model=dict(
      initializer='xavier_uniform',
      embed_initializer='xavier_uniform',
      **joey_model(attend['model']),
      **model_changes,
    ),
  )
