"""The import rules of ARCHITECTURE.md ("Layers"): who may import whom, and no import cycle.

`check(root)` reads every module's imports with `ast`, so it imports no project code and runs in
well under a second. It counts imports inside functions, `importlib.import_module` and
`__import__` calls with a literal name, and the module names of a lazy string map (a module that
imports a computed name, like training/__init__.py's `_EXPORTS`, imports every module it names).
It also keeps commands where ARCHITECTURE.md puts them: the entry points at the root are the only
files that define flags, and no module of a library package runs as a command.
"""

import ast
import dataclasses
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The layers of ARCHITECTURE.md ("Layers"). Every root *.py file is an entry point.
PACKAGES = (
  'attention',
  'models',
  'data',
  'tasks',
  'training',
  'sources',
  'interpret',
  'reports',
  'configs',
  'benchmarks',
  'studies',
)
ENTRY_POINTS = 'entry points'
# What each layer may import besides itself (a package may always import its own modules):
# packages, or single modules of one (configs take only the schema from training). None =
# anything. Entry points, one layer of separate files, may not import each other.
ALLOWED = {
  'attention': (),
  'models': ('attention',),
  'data': (),
  'tasks': ('models', 'data', 'attention'),
  'training': ('tasks', 'models', 'data', 'attention'),
  'sources': ('training', 'tasks', 'models', 'data', 'attention'),
  'interpret': ('training', 'tasks', 'models', 'data', 'attention'),
  'reports': ('interpret', 'sources', 'training', 'tasks', 'models', 'data', 'attention'),
  'configs': ('training.config', 'models', 'data', 'attention'),
  'benchmarks': PACKAGES,
  'studies': PACKAGES,
  ENTRY_POINTS: PACKAGES,
  'docs': PACKAGES,  # docs/config_reference.py: anything below the entry points
  'tests': None,
  'tutorials': None,
}
# Packages whose modules are imported, never run: a command is an entry point at the root (flags,
# then one call), or a benchmark's or study's `python -m` (argparse). A module whose command
# moved keeps only a `__main__` block raising SystemExit with one sentence that names the new
# command last (`python NEW.py`), which must exist.
RUNNABLE = ('benchmarks', 'studies')  # their modules run as `python -m PACKAGE.NAME`
LIBRARY = tuple(name for name in PACKAGES if name not in RUNNABLE)
# `python -m training.allocator PROGRAM ARGS` re-executes another program (the test suite) under
# mimalloc: a launcher of programs that are not Attend's commands, with no flags of its own.
LAUNCHERS = ('training/allocator.py',)
POINTER = re.compile(r'\bpython (\w+\.py)\b')
# Folders under the root whose Python files are not modules of the project.
SKIPPED = ('build', 'runs', 'site', 'node_modules', '__pycache__')


@dataclasses.dataclass(frozen=True)
class Edge:
  """`source` (a dotted module name) imports `target` at line `line` of its file."""

  source: str
  line: int
  target: str


def find_modules(root: str) -> dict[str, str]:
  """Project modules under `root`: dotted name -> path relative to `root` (with `/`)."""
  modules = {}
  for name in sorted(os.listdir(root)):
    path = os.path.join(root, name)
    if name.endswith('.py') and os.path.isfile(path):
      modules[name[:-3]] = name
    elif os.path.isdir(path) and (
      name in ALLOWED or os.path.isfile(os.path.join(path, '__init__.py'))
    ):
      for folder, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith('.') and d not in SKIPPED)
        for file in sorted(f for f in files if f.endswith('.py')):
          relative = os.path.relpath(os.path.join(folder, file), root).replace(os.sep, '/')
          parts = relative[:-3].split('/')
          modules['.'.join(parts[:-1] if parts[-1] == '__init__' else parts)] = relative
  return modules


def find_imports(root: str) -> tuple[dict[str, str], list[Edge]]:
  """Project modules under `root` (see `find_modules`) and every import from one to another."""
  modules = find_modules(root)
  edges = []
  for module, path in modules.items():
    with open(os.path.join(root, path), encoding='utf-8') as f:
      tree = ast.parse(f.read(), filename=path)
    found = {
      (line, target)
      for line, target in _imports(tree, module, path, modules)
      if target not in (None, module)
    }
    edges += [Edge(module, line, target) for line, target in sorted(found)]
  return modules, edges


def _imports(tree: ast.Module, module: str, path: str, modules: dict[str, str]):
  """(line, imported project module) for each import in `tree`, the module `module` at `path`."""
  package = module if path.endswith('/__init__.py') else module.rpartition('.')[0]
  # A folder without __init__.py (tests/, tutorials/) is on sys.path when its files run, so
  # `import conftest` there means its sibling tests/conftest.py.
  script_folder = package if package and package not in modules else ''

  def resolve(name: str) -> str | None:
    """The project module that importing `name` runs last: `a.b.c`, else `a.b` (c a name)."""
    for candidate in ([f'{script_folder}.{name}'] if script_folder else []) + [name]:
      parts = candidate.split('.')
      for end in range(len(parts), 0, -1):
        if '.'.join(parts[:end]) in modules:
          return '.'.join(parts[:end])
    return None

  dynamic = False
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield node.lineno, resolve(alias.name)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ''
      if node.level:
        anchor = package.split('.')[: len(package.split('.')) - node.level + 1]
        base = '.'.join(anchor + ([base] if base else []))
      for alias in node.names:
        submodule = resolve(f'{base}.{alias.name}')
        yield node.lineno, submodule if submodule == f'{base}.{alias.name}' else resolve(base)
    elif isinstance(node, ast.Call) and _called_name(node.func) in ('import_module', '__import__'):
      argument = node.args[0] if node.args else None
      if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        yield node.lineno, resolve(argument.value)
      else:
        dynamic = True
  if dynamic:  # a lazy string map: every dotted module name the file holds may be imported
    for node in ast.walk(tree):
      if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and '.' in node.value
        and node.value in modules
      ):
        yield node.lineno, node.value


def _called_name(func: ast.expr) -> str | None:
  """`f` for a call of `f(...)` or `x.f(...)`."""
  if isinstance(func, ast.Name):
    return func.id
  return func.attr if isinstance(func, ast.Attribute) else None


def layer_of(module: str) -> str:
  """The row of `ALLOWED` that `module` belongs to."""
  top = module.split('.')[0]
  return top if top in ALLOWED and top != ENTRY_POINTS else ENTRY_POINTS


def layer_violations(modules: dict[str, str], edges: list[Edge]) -> list[str]:
  """One line per import that breaks `ALLOWED`, and one per package that is in no layer."""
  problems = [
    f'{path}: a package in no layer of ARCHITECTURE.md (add it to ALLOWED)'
    for module, path in modules.items()
    if '.' not in module and path.endswith('/__init__.py') and module not in ALLOWED
  ]
  for edge in edges:
    source, target = layer_of(edge.source), layer_of(edge.target)
    allowed = ALLOWED.get(source, ())
    if allowed is None or (source == target and source != ENTRY_POINTS):
      continue
    if not any(edge.target == a or edge.target.startswith(a + '.') for a in allowed):
      rule = (
        f'may import only {", ".join(allowed)}'
        if allowed
        else 'may import nothing else of the project'
      )
      if source == ENTRY_POINTS:
        rule += ', never each other'
      problems.append(
        f'{modules[edge.source]}:{edge.line}: imports {edge.target} ({source} {rule})'
      )
  return problems


def cycles(modules: dict[str, str], edges: list[Edge]) -> list[str]:
  """One line per import cycle: the chain of files, each with the line that imports the next."""
  first = {}  # (source, target) -> its first import line
  for edge in edges:
    first.setdefault((edge.source, edge.target), edge.line)
  graph = {module: [] for module in modules}
  for source, target in sorted(first):
    graph[source].append(target)
  problems = []
  for component in _strongly_connected(graph):
    if len(component) < 2:
      continue
    start = min(component)
    chain = _shortest_cycle(graph, component, start)
    steps = [f'{modules[a]}:{first[a, b]} imports {b}' for a, b in zip(chain, chain[1:])]
    problems.append('import cycle: ' + ' -> '.join(steps))
  return problems


def _strongly_connected(graph: dict[str, list[str]]) -> list[set[str]]:
  """Tarjan's strongly connected components of `graph`, without recursion."""
  index, low, on_stack, stack, components = {}, {}, set(), [], []
  for root in graph:
    if root in index:
      continue
    work = [(root, iter(graph[root]))]
    index[root] = low[root] = len(index)
    stack.append(root)
    on_stack.add(root)
    while work:
      node, children = work[-1]
      child = next(children, None)
      if child is not None:
        if child not in index:
          index[child] = low[child] = len(index)
          stack.append(child)
          on_stack.add(child)
          work.append((child, iter(graph[child])))
        elif child in on_stack:
          low[node] = min(low[node], index[child])
        continue
      work.pop()
      if work:
        low[work[-1][0]] = min(low[work[-1][0]], low[node])
      if low[node] == index[node]:
        component = set()
        while True:
          member = stack.pop()
          on_stack.discard(member)
          component.add(member)
          if member == node:
            break
        components.append(component)
  return components


def _shortest_cycle(graph: dict[str, list[str]], component: set[str], start: str) -> list[str]:
  """`[start, ..., start]`: a shortest path back to `start` inside `component` (breadth first)."""
  parent, frontier = {start: None}, [start]
  while frontier:
    following = []
    for node in frontier:
      for child in graph[node]:
        if child == start:
          path = [node]
          while parent[path[-1]] is not None:
            path.append(parent[path[-1]])
          return path[::-1] + [start]
        if child in component and child not in parent:
          parent[child] = node
          following.append(child)
    frontier = following
  raise AssertionError(f'{start} is on no cycle of {sorted(component)}')


def _is_main_block(node: ast.stmt) -> bool:
  """Whether `node` is `if __name__ == '__main__':`."""
  test = node.test if isinstance(node, ast.If) else None
  return (
    isinstance(test, ast.Compare)
    and isinstance(test.left, ast.Name)
    and test.left.id == '__name__'
    and [type(op) for op in test.ops] == [ast.Eq]
    and isinstance(test.comparators[0], ast.Constant)
    and test.comparators[0].value == '__main__'
  )


def _pointer(block: ast.If) -> str | None:
  """What a `__main__` block names when all it does is `raise SystemExit('...')`: the last
  root file of its sentence (`python NEW.py`), else None."""
  if len(block.body) != 1 or not isinstance(block.body[0], ast.Raise):
    return None
  call = block.body[0].exc
  if not (isinstance(call, ast.Call) and _called_name(call.func) == 'SystemExit' and call.args):
    return None
  sentence = call.args[0]
  if not (isinstance(sentence, ast.Constant) and isinstance(sentence.value, str)):
    return None
  named = POINTER.findall(sentence.value)
  return named[-1] if named else None


def command_violations(root: str, modules: dict[str, str]) -> list[str]:
  """One line per command hidden in a library package: a flag defined (absl's `DEFINE_*`),
  argparse imported, or a `__main__` block that does more than name the new command; and one per
  moved command, in any package, whose pointer names a root file that is not there."""
  problems = []
  for module, path in modules.items():
    if path in LAUNCHERS:
      continue
    library = layer_of(module) in LIBRARY
    with open(os.path.join(root, path), encoding='utf-8') as f:
      tree = ast.parse(f.read(), filename=path)
    for node in ast.walk(tree) if library else ():
      if isinstance(node, ast.Call) and (_called_name(node.func) or '').startswith('DEFINE'):
        problems.append(f'{path}:{node.lineno}: defines a flag (only root entry points do)')
      if isinstance(node, ast.Import):
        imported = [alias.name for alias in node.names]
      else:
        imported = [node.module] if isinstance(node, ast.ImportFrom) else []
      if 'argparse' in imported:
        problems.append(f'{path}:{node.lineno}: imports argparse (commands are root entry points)')
    for node in tree.body:
      if not _is_main_block(node):
        continue
      named = _pointer(node)
      if named is None and library:
        problems.append(
          f'{path}:{node.lineno}: runs as __main__ (a command is a root entry point; a moved '
          "one's module only raises SystemExit naming 'python NEW.py')"
        )
      elif named and not os.path.isfile(os.path.join(root, named)):
        problems.append(f'{path}:{node.lineno}: names python {named}, which is not a root file')
  return problems


def check(root: str) -> list[str]:
  """Every breach of the import rules and of the commands' place in the tree at `root`, one line
  each."""
  modules, edges = find_imports(root)
  return (
    layer_violations(modules, edges) + cycles(modules, edges) + command_violations(root, modules)
  )


def write_tree(root, files: dict[str, str]) -> None:
  """Writes `files` (path relative to `root` -> source) under the directory `root`."""
  for path, source in files.items():
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(source)


def test_the_tree_keeps_its_layers_and_has_no_import_cycle():
  """The repository itself: every import within its layer's rights, and no cycle."""
  modules, edges = find_imports(ROOT)
  # Guards against a checker that finds nothing and so passes: the tree has ~220 modules and
  # ~650 import edges.
  assert len(modules) > 100, sorted(modules)
  assert len(edges) > 300, len(edges)
  assert {'attention', 'models.transformer', 'training.loop', 'train'} <= set(modules)
  problems = check(ROOT)
  assert not problems, '\n'.join(problems)


def test_a_higher_layer_import_is_named(tmp_path):
  """attention/x.py imports models inside a function: the file, the line and the rule."""
  write_tree(
    tmp_path,
    {
      'attention/__init__.py': '',
      'attention/x.py': 'import numpy as np\n\n\ndef f():\n  from models import net\n',
      'models/__init__.py': '',
      'models/net.py': 'import jax\nimport attention\n',
    },
  )
  assert check(tmp_path) == [
    'attention/x.py:5: imports models.net (attention may import nothing else of the project)'
  ]


def test_an_import_cycle_is_named_as_its_chain_of_files(tmp_path):
  """A cycle closed by `importlib.import_module` in a function; models/c.py only joins it."""
  write_tree(
    tmp_path,
    {
      'models/__init__.py': '',
      'models/a.py': 'from models import b\n',
      'models/b.py': 'import importlib\n\n\ndef f():\n  importlib.import_module("models.a")\n',
      'models/c.py': 'import models.a\n',
    },
  )
  assert check(tmp_path) == [
    'import cycle: models/a.py:1 imports models.b -> models/b.py:5 imports models.a'
  ]


def test_each_rule_of_the_table(tmp_path):
  """Configs take only the schema from training; entry points never import each other; a lazy
  string map imports the modules it names; tests import anything; a new package needs a layer."""
  write_tree(
    tmp_path,
    {
      'training/__init__.py': '',
      'training/config.py': '',
      'training/loop.py': 'import tasks.lm\n',
      'tasks/__init__.py': '',
      'tasks/lm.py': 'import importlib\nLAZY = {"f": "training.loop"}\n'
      'def get(n):\n  return importlib.import_module(LAZY[n])\n',
      'configs/__init__.py': '',
      'configs/ok.py': 'from training import config\nfrom configs import bad\n',
      'configs/bad.py': 'from training import loop\n',
      'train.py': 'import training\nimport configs.ok\n',
      'eval.py': 'from train import main\n',
      'tests/conftest.py': 'import train\n',
      'tests/test_x.py': 'from conftest import helper\nimport eval\n',
      'utils/__init__.py': '',
    },
  )
  assert check(tmp_path) == [
    'utils/__init__.py: a package in no layer of ARCHITECTURE.md (add it to ALLOWED)',
    'configs/bad.py:1: imports training.loop (configs may import only training.config, '
    'models, data, attention)',
    f'eval.py:1: imports train (entry points may import only {", ".join(PACKAGES)}, never '
    'each other)',
    'tasks/lm.py:2: imports training.loop (tasks may import only models, data, attention)',
    'import cycle: tasks/lm.py:2 imports training.loop -> training/loop.py:1 imports tasks.lm',
  ]


def test_a_command_in_a_library_package_is_named(tmp_path):
  """Flags, argparse and a `__main__` that runs are the root's; a pointer to a root file that is
  not there is named; a benchmark's command may run."""
  main = "\n\nif __name__ == '__main__':\n  "
  moved = main + "raise SystemExit('python -m data.{} is now python {}.py.')\n"
  write_tree(
    tmp_path,
    {
      'data/__init__.py': '',
      'data/flagged.py': 'from absl import flags\n\nX = flags.DEFINE_string("x", None, "x")\n',
      'data/parsed.py': 'import argparse\n',
      'data/run.py': f'def main():\n  pass{main}main()\n',
      'data/moved.py': 'X = 1' + moved.format('moved', 'moved'),
      'data/lost.py': 'X = 1' + moved.format('lost', 'gone'),
      'benchmarks/__init__.py': '',
      'benchmarks/bench.py': f'import argparse{main}argparse.ArgumentParser()\n',
      'moved.py': 'from absl import flags\n\nX = flags.DEFINE_string("x", None, "x")\n',
    },
  )
  assert check(tmp_path) == [
    'data/flagged.py:3: defines a flag (only root entry points do)',
    'data/lost.py:3: names python gone.py, which is not a root file',
    'data/parsed.py:1: imports argparse (commands are root entry points)',
    "data/run.py:4: runs as __main__ (a command is a root entry point; a moved one's module only "
    "raises SystemExit naming 'python NEW.py')",
  ]
