"""prompt.py's commands on a researcher's prompt: `heads` (ablation and patching per head),
`attribute` (direct logit attribution and the logit lens) and `attention` (the pictures and the
explorer page). Each checks every flag before it computes, and writes its JSON and PNG files
into `--out` (default WORKDIR/prompt/) only at the end: a refused command writes nothing.
"""

import dataclasses
import functools
import json
import os

from flax import nnx
import jax.numpy as jnp
import numpy as np

from attention import Press, get_press
from interpret import attribution, effects, figures
from interpret import heads as heads_lib
from models import compression
from reports import explorer
import sources
import tasks
from tasks import language_attention, pictures
from tasks.language import LanguageModeling

TOP = 10  # heads listed on the terminal


@dataclasses.dataclass(frozen=True)
class Request:
  """prompt.py's flags."""

  command: str
  workdir: str
  prompt: str
  out: str = ''
  checkpoint: str = ''
  metric: str = 'logprob'
  target: str = ''
  versus: str = ''
  ablation: str = 'zero'
  source: str = ''
  reference: str = ''
  heads: str = ''  # 'LAYER.HEAD,...' for `heads`; ignored elsewhere
  layers: str = ''  # 'all' or 'L,L,...' for `attention`
  press: str = ''  # `attention`: the press whose kept positions the page shows too
  press_ratio: float = 0.5


class Prompt:
  """The workdir's tokenizer and the prompt's ids `[1, T]`, checked, then its model: of
  `source`, or of the workdir's causal language model. The parameters are read when `model` is
  first asked for, so that every flag is checked against the config and the tokenizer first."""

  def __init__(self, request: Request, source: sources.Source | None = None):
    self.source = source or sources.require_causal(resolve(request))
    self.config, self.tokenizer = self.source.config, self.source.tokenizer
    self.ids = self.encode(request.prompt, '--prompt')
    self.tokens = self.tokenizer.tokens(self.ids[0])

  @functools.cached_property
  def model(self) -> nnx.Module:
    return self.source.model()

  def encode(self, text: str, flag: str) -> jnp.ndarray:
    if not text.strip():
      raise ValueError(f'{flag} is empty.')
    ids = list(self.tokenizer.encode(text))
    limit = self.config.model.get('max_length')
    if limit and len(ids) > limit:
      raise ValueError(
        f"{flag} is {len(ids)} tokens, longer than the model's context of {limit} "
        '(config.model.max_length); shorten it.'
      )
    return jnp.asarray([ids], jnp.int32)

  def token(self, text: str, flag: str) -> int | None:
    """The one token `text` is (e.g. ' Mary', its leading space included), or None if empty."""
    if not text:
      return None
    ids = self.tokenizer.encode_pieces(text)
    if len(ids) != 1:
      pieces = ', '.join(repr(p) for p in self.tokenizer.tokens(ids))
      raise ValueError(
        f'{flag}={text!r} is {len(ids)} tokens ({pieces}), not one; give a single token '
        "(a leading space is part of a word's token in most vocabularies)."
      )
    return ids[0]


def _heads(text: str) -> list[tuple[int, int]] | None:
  if not text:
    return None
  try:
    return [tuple(int(n) for n in item.split('.')) for item in text.split(',')]
  except ValueError:
    raise ValueError(f'--heads={text!r}: give LAYER.HEAD pairs, e.g. --heads=9.6,10.0') from None


def resolve(request: Request) -> sources.Source:
  """The source `--workdir` names (any reference `sources.resolve` takes); a pretrained
  checkpoint, not a workdir to write into, needs --out."""
  source = sources.resolve(request.workdir, checkpoint=request.checkpoint)
  if source.workdir is None and not request.out:
    raise ValueError(
      f'--workdir={request.workdir} is a pretrained checkpoint, not a workdir to write into; '
      'give --out.'
    )
  return source


def _out(request: Request) -> str:
  return request.out or os.path.join(request.workdir, 'prompt')


def _write_json(out: str, name: str, data: dict) -> str:
  os.makedirs(out, exist_ok=True)
  path = os.path.join(out, name)
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(data, f, indent=1)
  return path


def _short(text: str, length: int = 70) -> str:
  text = ' '.join(text.split())
  return text if len(text) <= length else text[: length - 1] + '…'


def _ranked(values: np.ndarray) -> list[dict]:
  order = np.argsort(-np.nan_to_num(np.abs(values), nan=-1.0), axis=None)
  return [
    dict(layer=int(layer), head=int(head), value=float(values[layer, head]))
    for layer, head in zip(*np.unravel_index(order[:TOP], values.shape))
    if not np.isnan(values[layer, head])
  ]


def run_heads(request: Request) -> dict:
  """Each head's effect on the metric when replaced; heads.json and heads.png."""
  prompt = Prompt(request)
  metric = effects.Metric(
    request.metric,
    prompt.token(request.target, '--target'),
    prompt.token(request.versus, '--versus'),
  )
  other_text = request.source if request.ablation == 'patch' else request.reference
  flag = '--source' if request.ablation == 'patch' else '--reference'
  other = prompt.encode(other_text, flag) if request.ablation != 'zero' else None
  heads = _heads(request.heads)
  if heads is not None:  # against the model's layers: a hybrid stack's have different heads
    heads_lib.check_model_heads(prompt.model, heads)
  if request.ablation == 'patch' and other.shape != prompt.ids.shape:
    raise ValueError(effects.patch_lengths_differ(other.shape[1], prompt.ids.shape[1]))
  clean, changes = effects.head_effects(
    prompt.model,
    prompt.ids,
    metric,
    ablation=request.ablation,
    other=other,
    heads=heads,
    progress=lambda line: print(line, flush=True),
  )
  out = _out(request)
  what = f'{request.metric}' + (f' of {request.target!r}' if request.target else '')
  what += f' - {request.versus!r}' if request.versus else ''
  result = dict(
    prompt=request.prompt,
    metric=dataclasses.asdict(metric),
    ablation=request.ablation,
    clean=clean,
    effects=np.where(np.isnan(changes), None, changes).tolist(),
    top=_ranked(changes),
  )
  _write_json(out, 'heads.json', result)
  figures.save_head_map(
    os.path.join(out, 'heads.png'),
    changes,
    title=f'{request.ablation} ablation of each head: change in {what}\n"{_short(request.prompt)}"',
    label=f'change (clean {clean:.3g})',
  )
  print(f'Clean {what}: {clean:.4g}. Heads by effect ({request.ablation}):')
  for row in result['top']:
    print(f'  layer {row["layer"]:2d} head {row["head"]}: {row["value"]:+.4g}')
  print(f'Wrote {out}/heads.json and heads.png.')
  return result


def run_attribute(request: Request) -> dict:
  """Direct logit attribution per head and the logit lens; attribute.json and attribute.png."""
  prompt = Prompt(request)
  target = prompt.token(request.target, '--target')
  if target is None:
    raise ValueError('attribute needs --target, the token after the prompt.')
  versus = prompt.token(request.versus, '--versus')

  def direction(logits):
    return logits[..., target] - (0.0 if versus is None else logits[..., versus])

  attributions = attribution.head_attributions(prompt.model, prompt.ids, direction)
  lens = attribution.logit_lens(prompt.model, prompt.ids, target)
  for row in lens:
    row['top_token'] = prompt.tokenizer.tokens([row['top']])[0]
  out = _out(request)
  what = f'logit of {request.target!r}' + (f' - {request.versus!r}' if versus is not None else '')
  result = dict(prompt=request.prompt, direction=what, heads=attributions.tolist(), lens=lens)
  result['top'] = _ranked(attributions)
  _write_json(out, 'attribute.json', result)
  figures.save_head_map(
    os.path.join(out, 'attribute.png'),
    attributions,
    title=f'direct logit attribution of each head: {what}\n"{_short(request.prompt)}"',
    label='direct share of the logit' + (' difference' if versus is not None else ''),
  )
  print(f'Direct logit attribution ({what}), the largest heads:')
  for row in result['top']:
    print(f'  layer {row["layer"]:2d} head {row["head"]}: {row["value"]:+.4g}')
  print('Logit lens (the stream after each layer, at the last position):')
  for row in lens:
    print(
      f'  layer {row["layer"]:2d}: log p({request.target!r}) {row["target_logprob"]:8.3f}, '
      f'rank {row["target_rank"]:6d}, top {row["top_token"]!r}'
    )
  print(f'Wrote {out}/attribute.json and attribute.png.')
  return result


def _layers(text: str, num_layers: int, negative: bool = False) -> list[int]:
  """The layers `--layers` names; `negative`: counting from the end is allowed (-1 the last)."""
  if text == 'all':
    return list(range(num_layers))
  if not text:
    return pictures.spread_layers(num_layers)
  try:
    layers = [int(n) for n in text.split(',')]
  except ValueError:
    raise ValueError(f"--layers={text!r}: give 'all' or layer numbers, e.g. --layers=0,9") from None
  bad = [layer for layer in layers if not (-num_layers if negative else 0) <= layer < num_layers]
  if bad:
    raise ValueError(f'--layers: layer {bad[0]} is not in the model (0 .. {num_layers - 1}).')
  return layers


def _reads_prompts(task: type[tasks.Task]) -> bool:
  return issubclass(task, LanguageModeling) or task.has_text_samples()


def run_attention(request: Request) -> dict:
  """The attention of a run of any task that reads text on the prompt: a language model's
  chosen layers, or what the task draws and explores for an example (`Task.text_sample`)."""
  source = resolve(request)
  task = tasks.task_class(source.config.task)
  if not _reads_prompts(task):
    readers = ', '.join(name for name, task in tasks.TASKS.items() if _reads_prompts(task))
    raise ValueError(
      f'--workdir={request.workdir} holds a run of {source.config.task}, whose examples are not '
      f'text; prompt.py attention reads runs of {readers}.'
    )
  if request.press:
    sources.require_causal(source, '--press')
  if issubclass(task, LanguageModeling):
    return _token_attention(request, source)
  return _example_attention(request, source)


def _example_attention(request: Request, source: sources.Source) -> dict:
  """The prompt read as one of the task's examples, predicted, drawn as eval.py draws an example
  (its --layers one layer, default the last; the mean over heads), and its explorer page."""
  if not request.prompt.strip():
    raise ValueError('--prompt is empty.')
  layers = _layers(request.layers or '-1', source.config.model.get('num_layers', 1), negative=True)
  if len(layers) != 1:
    raise ValueError(
      f'--layers={request.layers!r}: a {source.config.task} run draws one layer; give one number.'
    )
  options = tasks.EvalOptions(num_pictures=1, layer=layers[0])
  task = source.task
  model = source.model()
  sample = task.text_sample(model, request.prompt, options)
  records = task.explore(model, [sample], options)
  out = _out(request)
  os.makedirs(out, exist_ok=True)
  drawn = task.draw(model, [sample], out, options)
  page = explorer.write(out, records, title=f'{source.config.task} on "{_short(request.prompt)}"')
  print(f'Prediction: {records[0]["prediction"] if records else sample["line"]}')
  print(f'Wrote {", ".join([*drawn, page])}.')
  return dict(sample=sample, pictures=drawn, explorer=page)


def _token_attention(request: Request, source: sources.Source) -> dict:
  """The chosen layers' attention on the prompt: attention.png and explorer.html."""
  prompt = Prompt(request, source)
  layers = _layers(request.layers, prompt.config.model.num_layers)
  press = get_press(request.press) if request.press else None
  if press:  # what the press's settings alone refuse, before the model is read
    compression.check_settings(press, request.press_ratio, prompt.ids.shape[1])
  # [L, N, T, T]: NaN where a layer lacks a head (a differential layer's pairs) or weights.
  weights = np.asarray(language_attention.self_attention(prompt.model, prompt.ids)[0])
  out = _out(request)
  os.makedirs(out, exist_ok=True)
  picture = os.path.join(out, 'attention.png')
  pictures.save_head_grid(
    picture,
    weights[layers],
    prompt.tokens,
    title=f'attention of layers {", ".join(map(str, layers))} on "{_short(request.prompt)}"',
    layers=layers,
  )
  record = dict(
    index=0,
    reference=request.prompt,
    prediction='',
    correct=None,
    views=_views(prompt, weights, layers),
  )
  if press:
    record['views'].append(_kept_view(prompt, press, request.press_ratio))
  page = explorer.write(out, [record], title=f'attention on "{_short(request.prompt)}"')
  print(f'Wrote {picture} and {page} (layers {", ".join(map(str, layers))}; --layers=all).')
  return dict(layers=layers, picture=picture, explorer=page, views=record['views'])


def _views(prompt: Prompt, weights: np.ndarray, layers: list[int]) -> list[dict]:
  """The explorer's views of the chosen layers: a map each of `weights [L, N, T, T]`, and their
  output gates and selected keys where it has them (`tasks.language_attention`)."""
  sample = dict(inputs=np.asarray(prompt.ids[0]))
  read = language_attention.mechanism_readings(prompt.model, [sample], prompt.tokenizer)
  labels, counts = read['labels'], read['counts']
  first = [None if read[key] is None else read[key][0] for key in ('gate', 'selected')]
  view = language_attention.attention_view
  maps = view(weights, prompt.tokens, layers, labels, counts, prefix='', together=False)
  return [maps, *language_attention.mechanism_views(prompt.tokens, layers, labels, counts, *first)]


def _kept_view(prompt: Prompt, press: Press, ratio: float) -> dict:
  """The explorer's view of what `--press` keeps of the prompt's cache, a row per pressed layer's
  key/value head (`compression.kept_positions`; a layer with a window keeps its ring and is
  not a row)."""
  masks = compression.kept_positions(prompt.model, prompt.ids, press, ratio)
  rows, kept = [], []
  for layer, mask in enumerate(masks):
    for head, row in enumerate(np.asarray(mask[0]) if mask is not None else []):
      rows.append(f'layer {layer} kv head {head}')
      kept.append(row)
  name = f'{press.name} at ratio {ratio:g}'
  print(f'{name}: kept {np.mean(kept):.1%} of {len(rows)} heads x {len(prompt.tokens)} positions.')
  return dict(kind='kept', name=name, tokens=prompt.tokens, rows=rows, kept=np.asarray(kept))


COMMANDS = {'heads': run_heads, 'attribute': run_attribute, 'attention': run_attention}
