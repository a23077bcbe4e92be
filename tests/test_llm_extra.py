"""`make llm` installs what the real language models' commands need, and no more: no torch.

The commands for SmolLM2 and Gemma 3 (convert.py, eval.py, generate.py, train.py with
configs/pretrained_lm.py, the decoder studies) run in an environment holding only what the
Makefile's llm target installs: Attend's dependencies, the extras it names and the packages it
names, each with its own dependencies (the installed ones' metadata says which). A fresh process
imports what those commands import and reads a tiny GGUF file as they read SmolLM2 (its
tokenizer included), which imports the packages reading a GGUF file needs; every third-party
module it imports must come from that environment, and every package the extras declare must be
one of them. That environment holds no torch: accelerate (transformers' GGUF reader, the suite's
reference) brought a CUDA build of it, 4 GB of a 6.9 GB environment. Where a package is missing
all the same, reading stops with one sentence naming how to install it.
"""

import ast
import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
import pytest
import tiny_gguf

from data.pretrained_tokenizer import PretrainedTokenizer
from models import pretrained
from models.pretrained.files import FILES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What the commands import: the entry points' import statements (importing two of them would
# define their flags twice), the config and the studies (modules).
SCRIPTS = ('convert.py', 'eval.py', 'generate.py', 'train.py')
MODULES = (
  'configs.pretrained_lm',
  'studies.decoder_heads',
  'studies.streaming',
  'studies.attention_distance',
  'studies.attention_swaps',
  'studies.attention_transfer',
)
FORBIDDEN = {'torch', 'accelerate', 'transformers', 'triton'}  # and nvidia-*

# Imports what the commands import, then reads a GGUF file as they do; prints each third-party
# module imported with the distributions that hold a module of its name (not those the
# interpreter imports as it starts, such as setuptools' _distutils_hack: the venv's own).
PROBE = """
import importlib, importlib.metadata, json, sys

startup = set(sys.modules)
root, gguf_file, imports, modules = sys.argv[1], sys.argv[2], *map(json.loads, sys.argv[3:])
sys.path.insert(0, root)
for statement in imports:
  exec(statement)
for module in modules:
  importlib.import_module(module)
from configs import pretrained_lm
from data.pretrained_tokenizer import PretrainedTokenizer
from models import pretrained

pretrained_lm.get_config(gguf_file)
checkpoint = pretrained.read(gguf_file)
pretrained.load_decoder(checkpoint)
PretrainedTokenizer(checkpoint.tokenizer_json).encode('hello world')
from data import chat  # generate.py --chat renders the checkpoint's chat template
chat.render("{{ messages[0]['content'] }}", [{'role': 'user', 'content': 'hello'}])
holders = importlib.metadata.packages_distributions()
imported = [name for name in list(sys.modules) if name in holders and name not in startup]
print(json.dumps({name: holders[name] for name in imported}))
"""


def _project() -> dict:
  with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as f:
    return tomllib.load(f)['project']


def _extras(names, project: dict) -> list[Requirement]:
  """The requirements of Attend's extras `names`, following `attend[...]` references."""
  out = []
  for name in names:
    for requirement in map(Requirement, project['optional-dependencies'][name]):
      if requirement.name == project['name']:
        out += _extras(requirement.extras, project)
      else:
        out.append(requirement)
  return out


def llm_target() -> tuple[list[Requirement], list[Requirement], list[str]]:
  """What the Makefile's llm target installs: (the requirements of the extras of Attend it
  names, beside Attend's dependencies; the other packages it names with their dependencies; the
  names of those it installs --no-deps)."""
  with open(os.path.join(ROOT, 'Makefile'), encoding='utf-8') as f:
    makefile = f.read()
  variables = dict(re.findall(r'^(\w+)\s*[:?]?=\s*(.*?)\s*$', makefile, re.M))
  recipe = re.search(r'^\$\(VENV\)/\.installed-llm:.*\n((?:\t.*\n)+)', makefile, re.M)
  assert recipe, 'the Makefile has no $(VENV)/.installed-llm recipe'
  project, extras, packages, alone = _project(), [], [], []
  for line in recipe.group(1).splitlines():
    line = re.sub(r'\$\((\w+)\)', lambda m: variables.get(m.group(1), m.group(0)), line)
    words = shlex.split(line)
    if 'install' not in words:
      continue
    arguments = words[words.index('install') + 1 :]
    for argument in (a for a in arguments if not a.startswith('-')):
      attend = re.fullmatch(r'\.(?:\[([\w,]+)\])?', argument)
      if attend:
        extras += _extras(attend.group(1).split(',') if attend.group(1) else (), project)
      elif '--no-deps' in arguments:
        alone.append(canonicalize_name(Requirement(argument).name))
      else:
        packages.append(Requirement(argument))
  return extras, packages, alone


def _with_dependencies(requirements: list[Requirement]) -> set[str]:
  """Canonical names of `requirements` and of their dependencies, as the installed
  distributions' metadata declares them (one not installed here counts alone)."""
  seen, todo = set(), list(requirements)
  while todo:
    requirement = todo.pop()
    key = (canonicalize_name(requirement.name), frozenset(requirement.extras))
    if key in seen:
      continue
    seen.add(key)
    try:
      distribution = importlib.metadata.distribution(requirement.name)
    except importlib.metadata.PackageNotFoundError:
      continue
    for line in distribution.requires or ():
      dependency = Requirement(line)
      wanted = ('', *requirement.extras)
      if dependency.marker is None or any(dependency.marker.evaluate({'extra': e}) for e in wanted):
        todo.append(dependency)
  return {name for name, _ in seen}


def llm_environment() -> set[str]:
  """Canonical names of the distributions `make llm` installs."""
  extras, packages, alone = llm_target()
  dependencies = [Requirement(line) for line in _project()['dependencies']]
  dependencies = [r for r in dependencies if r.marker is None or r.marker.evaluate({'extra': ''})]
  return _with_dependencies(dependencies + extras + packages) | set(alone)


def test_make_llm_installs_no_torch():
  extras, _, _ = llm_target()
  assert 'gguf' in {canonicalize_name(r.name) for r in extras}, 'no extra of make llm holds gguf'
  environment = llm_environment()
  heavy = environment & FORBIDDEN | {n for n in environment if n.startswith('nvidia')}
  assert not heavy, f'make llm installs {sorted(heavy)}'


def _imports(script: str) -> list[str]:
  with open(os.path.join(ROOT, script), encoding='utf-8') as f:
    tree = ast.parse(f.read())
  return [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_the_llm_commands_import_what_make_llm_installs_and_its_extras_no_more(tmp_path):
  pytest.importorskip('gguf', reason='writes the tiny GGUF file (the gguf extra)')
  gguf_file = tiny_gguf.write_llama(str(tmp_path / 'llama.gguf'), {})
  imports = [statement for script in SCRIPTS for statement in _imports(script)]
  result = subprocess.run(
    [sys.executable, '-c', PROBE, ROOT, gguf_file, json.dumps(imports), json.dumps(MODULES)],
    capture_output=True,
    text=True,
    cwd=tmp_path,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  modules = json.loads(result.stdout.splitlines()[-1])
  imported = {canonicalize_name(name) for names in modules.values() for name in names}
  environment = llm_environment()
  # A namespace (google) may be several distributions': one of them in the environment will do.
  missing = {m: d for m, d in modules.items() if not {*map(canonicalize_name, d)} & environment}
  assert not missing, f'the llm commands import {missing}, which make llm does not install'
  extras, _, _ = llm_target()
  unused = {canonicalize_name(r.name) for r in extras} - imported
  assert not unused, f"make llm's extras declare {sorted(unused)}, which its commands never import"


def test_each_missing_package_is_one_sentence_naming_how_to_install_it(tmp_path, monkeypatch):
  pytest.importorskip('gguf', reason='writes the tiny GGUF file (the gguf extra)')
  gguf_file = tiny_gguf.write_llama(str(tmp_path / 'llama.gguf'), {})
  folder = tmp_path / 'folder'
  folder.mkdir()
  for name in FILES:
    (folder / name).write_text('{}')
  tokenizer_json = pretrained.read(gguf_file).tokenizer_json
  cases = {
    'gguf': (lambda: pretrained.read(gguf_file), "make llm (or pip install '.[gguf]')"),
    'tokenizers': (lambda: pretrained.read(gguf_file), "make llm (or pip install '.[gguf]')"),
    'safetensors': (lambda: pretrained.read(str(folder)), "pip install '.[pretrained]'"),
  }
  for package, (read, install) in cases.items():
    with monkeypatch.context() as patch:
      patch.setitem(sys.modules, package, None)  # what `import` then refuses, as if absent
      with pytest.raises(ValueError) as error:
        read()
    assert f'needs the {package} package: {install}.' in str(error.value)
    assert '\n' not in str(error.value)
  with monkeypatch.context() as patch:
    patch.setitem(sys.modules, 'tokenizers', None)
    with pytest.raises(ValueError, match=r'tokenizers package: make llm \(or pip install'):
      PretrainedTokenizer(tokenizer_json)
