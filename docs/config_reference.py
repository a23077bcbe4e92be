"""Writes docs/config_reference.md: every config field, its default and its meaning, from the
schema.

The schema is the one source: the training fields of `training.config._training_fields()` (and
`config.mesh`), each task's `dataset_config()`, and `models.default_config(name)` for every model.
A field's meaning is its comment in the function that builds the group (the line's own comment,
or the comment block right above it), and for a model the `Args:` or `Attributes:` entry of its
constructor's, its class's or its config dataclass's docstring.

    python docs/config_reference.py            # rewrites the page
    python docs/config_reference.py --check    # exit 1 if the page is stale or a field undocumented

tests/test_docs.py fails when the committed page differs from what this writes, or when a field has
no meaning anywhere.
"""

import ast
import dataclasses
import inspect
import io
import os
import re
import sys
import tokenize
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, 'docs', 'config_reference.md')
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

import models  # noqa: E402  (the repository root is the import root)
import tasks  # noqa: E402
from training import config as schema  # noqa: E402
from training import sharding  # noqa: E402

# Meanings of fields whose schema line carries no comment yet. An entry here is used only while the
# schema lacks one (the test fails on an entry the schema has made redundant): move it into the
# schema as a comment and delete it here.
SUPPLEMENT = {
  'beta1': "AdamW's first-moment decay (the Transformer paper's 0.9).",
  'beta2': "AdamW's second-moment decay (the Transformer paper's 0.98).",
  'eps': "AdamW's epsilon (the Transformer paper's 1e-9).",
  'weight_decay': 'AdamW weight decay (decoupled; 0 = off).',
}
UNDOCUMENTED = '**undocumented**'
GROUP = object()  # the default shown for a group of fields (config.mesh)


def assignment_comments(fn: Callable[..., Any], target: str = 'c') -> dict[str, str]:
  """{field: comment} for every `target.FIELD = ...` line of `fn`'s source: the line's trailing
  comment, else the block of comment lines right above it."""
  lines = inspect.getsource(fn).splitlines()
  comments = {}  # line number (1-based) -> comment text
  tokens = tokenize.generate_tokens(io.StringIO('\n'.join(lines) + '\n').readline)
  for token in tokens:
    if token.type == tokenize.COMMENT:
      comments[token.start[0]] = token.string.lstrip('#').strip()
  pattern = re.compile(rf'^\s*{target}\.(\w+)\s*=')
  found = {}
  for number, line in enumerate(lines, start=1):
    match = pattern.match(line)
    if not match:
      continue
    text = comments.get(number, '')
    if not text:
      above, n = [], number - 1
      while n >= 1 and lines[n - 1].strip().startswith('#'):
        above.insert(0, comments[n])
        n -= 1
      text = ' '.join(above)
    found[match.group(1)] = text
  return found


def docstring_entries(doc: str | None) -> dict[str, str]:
  """{name: text} of the `Args:` and `Attributes:` sections of a Google-style docstring."""
  entries, name, section_indent = {}, None, None
  for line in inspect.cleandoc(doc or '').splitlines():
    stripped, indent = line.strip(), len(line) - len(line.lstrip())
    if stripped in ('Args:', 'Attributes:'):
      section_indent, name = indent, None
      continue
    if section_indent is None:
      continue
    if stripped and indent <= section_indent:  # the section ended
      section_indent, name = None, None
      continue
    match = re.match(r'^(\w+)(?: \(.*?\))?: (.*)$', stripped)
    if match and indent == section_indent + 2:
      name = match.group(1)
      entries[name] = match.group(2)
    elif name and stripped:
      entries[name] += ' ' + stripped
  return entries


def model_meanings(cls: type) -> dict[str, str]:
  """{field: meaning} from the docstrings of the model's constructor, class and config
  dataclasses."""
  meanings = {}
  groups = [
    p.default
    for p in inspect.signature(cls.__init__).parameters.values()
    if dataclasses.is_dataclass(p.default)
  ]
  sources = [cls.__init__, cls] + [base for group in groups for base in type(group).__mro__]
  for source in reversed(sources):  # the constructor's own words win
    meanings.update(docstring_entries(source.__doc__))
  return meanings


def dataset_schema_function(task_cls: type) -> Callable[..., Any]:
  """The function whose comments document the task's `config.dataset`: the `MODULE.default_config`
  that `task_cls.dataset_config` returns."""
  tree = ast.parse(inspect.cleandoc('\n' + inspect.getsource(task_cls.dataset_config)))
  for node in ast.walk(tree):
    if (
      isinstance(node, ast.Call)
      and isinstance(node.func, ast.Attribute)
      and isinstance(node.func.value, ast.Name)
    ):
      module = sys.modules[task_cls.__module__].__dict__[node.func.value.id]
      return getattr(module, node.func.attr)
  raise ValueError(f'{task_cls.__name__}.dataset_config does not return MODULE.FUNCTION().')


def _cell(text: str) -> str:
  return text.replace('|', '\\|')


def _default(value: Any) -> str:
  if value is GROUP:
    return 'the fields below'
  if isinstance(value, str):
    return f"`'{value}'`"
  return f'`{value!r}`'.replace('|', '\\|')


def _table(rows: list[tuple[str, Any, str]], prefix: str) -> list[str]:
  out = ['| field | default | meaning |', '|---|---|---|']
  out += [
    f'| `{prefix}{name}` | {_default(value)} | {_cell(text) or UNDOCUMENTED} |'
    for name, value, text in rows
  ]
  return out + ['']


def _where(fn: Any) -> str:
  return os.path.relpath(inspect.getsourcefile(fn), ROOT)


def training_rows() -> list[tuple[str, Any, str]]:
  fields = schema._training_fields()  # pylint: disable=protected-access
  comments = assignment_comments(schema._training_fields)  # pylint: disable=protected-access
  mesh = assignment_comments(sharding.mesh_config)
  rows = []
  for name, value in fields.items():
    if name == 'mesh':
      rows.append(('mesh', GROUP, comments.get(name, '')))
      rows += [(f'mesh.{axis}', size, mesh.get(axis, '')) for axis, size in value.items()]
    else:
      rows.append((name, value, comments.get(name) or SUPPLEMENT.get(name, '')))
  return rows


def dataset_rows(task: str) -> list[tuple[str, Any, str]]:
  cls = tasks.task_class(task)
  comments = assignment_comments(dataset_schema_function(cls))
  return [(name, value, comments.get(name, '')) for name, value in cls.dataset_config().items()]


def model_rows(name: str) -> list[tuple[str, Any, str]]:
  meanings = model_meanings(models.model_class(name))
  rows = [('name', name, 'the model: a key of `models.MODELS`.')]
  config = models.default_config(name)
  return rows + [
    (field, config[field], meanings.get(field, '')) for field in sorted(config) if field != 'name'
  ]


def generate() -> str:
  """The page's Markdown."""
  out = [
    '# Config reference',
    '',
    'Every field of an experiment config, its default and what it does. This page is written',
    'by `python docs/config_reference.py` from the schema itself (the comments in the',
    "functions that build each group, and the models' docstrings); do not edit it by hand.",
    'A config file starts from `training.config.default_config(task, model)` and states its',
    'deltas; `--config.FIELD=value` overrides any field on the command line.',
    '',
    '## Training fields',
    '',
    f'Built by `_training_fields()` in `{_where(schema._training_fields)}`'  # pylint: disable=protected-access
    f' (`config.mesh`: `mesh_config()` in `{_where(sharding.mesh_config)}`).',
    '',
  ]
  out += _table(training_rows(), '')
  out += [
    '## `config.task`',
    '',
    f'What is read, trained and evaluated: one of {", ".join(f"`{t}`" for t in tasks.TASKS)}'
    ' (`tasks.TASKS`).',
    '',
    '## `config.dataset`, per task',
    '',
  ]
  for task in tasks.TASKS:
    fn = dataset_schema_function(tasks.task_class(task))
    out += [f'### {task}', '', f'`{fn.__module__}.{fn.__name__}()` in `{_where(fn)}`.', '']
    out += _table(dataset_rows(task), 'dataset.')
  out += [
    '## `config.model`, per model',
    '',
    'Every constructor argument with a default; the sizes and special ids come from the',
    "task's data. Fields of the Transformer family's `StackConfig` are plain fields here.",
    '',
  ]
  for name in models.MODELS:
    cls = models.model_class(name)
    out += [f'### {name}', '', f'`{cls.__name__}` in `{_where(cls)}`.', '']
    out += _table(model_rows(name), 'model.')
  return '\n'.join(out).rstrip() + '\n'


def undocumented() -> list[str]:
  """The fields that have no meaning anywhere, as `group.field`."""
  missing = [f'config.{n}' for n, _, text in training_rows() if not text]
  for task in tasks.TASKS:
    missing += [f'{task}: config.dataset.{n}' for n, _, text in dataset_rows(task) if not text]
  for name in models.MODELS:
    missing += [f'{name}: config.model.{n}' for n, _, text in model_rows(name) if not text]
  return missing


def redundant_supplement() -> list[str]:
  """SUPPLEMENT entries the schema now documents itself, or that name no field."""
  fields = schema._training_fields()  # pylint: disable=protected-access
  comments = assignment_comments(schema._training_fields)  # pylint: disable=protected-access
  return [name for name in SUPPLEMENT if name not in fields or comments.get(name)]


def main(argv: list[str]) -> int:
  text = generate()
  problems = [f'undocumented: {field}' for field in undocumented()]
  problems += [f'SUPPLEMENT[{name!r}] is redundant: remove it' for name in redundant_supplement()]
  if '--check' in argv:
    with open(PAGE, encoding='utf-8') as f:
      if f.read() != text:
        problems.append(
          f'{os.path.relpath(PAGE, ROOT)} is stale: run python docs/config_reference.py'
        )
  else:
    with open(PAGE, 'w', encoding='utf-8') as f:
      f.write(text)
  for problem in problems:
    print(problem, file=sys.stderr)
  return 1 if problems else 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
