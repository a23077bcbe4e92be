"""Where a train step's time goes: the XLA ops of a `config.profile_steps` trace, charged to the
line of Attend's code that made each of them.

    XLA_FLAGS='--xla_dump_to=WORKDIR/hlo --xla_dump_hlo_module_re=jit_train_step' \
      python train.py --config=configs/tsv.py --workdir=WORKDIR --config.profile_steps=2:5 ...
    python -m benchmarks.step_profile --workdir=WORKDIR --png=step_profile.png

The trace (WORKDIR/profile/, `training/profiling.py`) times every XLA op the traced steps ran,
each named by its program and its op; XLA's dump of the compiled train step (`--xla_dump_to`)
holds each op's Python stack. An op is charged to the innermost frame of its stack in Attend's
own code (attention/, models/, tasks/, training/), or to the optimizer when the stack passes
through optax, or else to its innermost library frame (XLA often keeps no more of a dense layer's
stack than flax's `Linear.__call__`). Times are self times (an op's own, less the ops it runs
inside it, as a `while` runs its body), summed over the traced steps' threads and divided by the
number of steps. A fused op is charged to the stack XLA kept for the fusion: the line of one of
the ops it fused.
"""

import argparse
import collections
import glob
import json
import os
import re
from typing import Any

from jax.profiler import ProfileData

from training import layout, profiling

ROOTS = ('attention', 'models', 'tasks', 'training')  # Attend's own code, where a frame counts
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_INSTRUCTION = re.compile(r'^\s*(?:ROOT\s+)?%?([\w.-]+) = (?:.*stack_frame_id=(\d+))?')


def self_seconds(spans: list[tuple[int, int, Any]]) -> collections.Counter:
  """Per key, the seconds of its spans `(start ns, end ns, key)` of one thread less those of the
  spans nested in them."""
  totals = collections.Counter()
  enclosing = []  # (end, key) of the spans the current one runs inside
  for start, neg_end, key in sorted((start, -end, key) for start, end, key in spans):
    while enclosing and enclosing[-1][0] <= start:
      enclosing.pop()
    seconds = (-neg_end - start) / 1e9
    totals[key] += seconds
    if enclosing:
      totals[enclosing[-1][1]] -= seconds
    enclosing.append((-neg_end, key))
  return totals


def op_self_seconds(xplane: str, module: str = 'jit_train_step') -> dict[tuple[int, str], float]:
  """Per `(program id, HLO op)` of the jitted function `module`, the seconds the trace spent in
  the op itself, over all calls."""
  totals = collections.Counter()
  for line in ProfileData.from_file(xplane).find_plane_with_name('/host:CPU').lines:
    spans = []
    for event in line.events:
      stats = dict(event.stats)
      if stats.get('hlo_module') == module:
        spans.append((event.start_ns, event.end_ns, (int(stats['program_id']), stats['hlo_op'])))
    totals.update(self_seconds(spans))
  return dict(totals)


def _table(text: str, name: str) -> dict[int, str]:
  """The numbered rows of one of an HLO dump's tables (FileNames, StackFrames, ...)."""
  body = text.split(f'\n{name}\n', 1)[1].split('\n\n', 1)[0]
  return {int(m[1]): m[2] for m in re.finditer(r'^(\d+) (.*)$', body, re.M)}


def stack_frames(text: str) -> dict[int, tuple[str, str, int, int]]:
  """Per stack frame id of an HLO dump, `(file, function, line, parent frame id)`."""
  files, functions = _table(text, 'FileNames'), _table(text, 'FunctionNames')
  frames = {}
  for key, value in _table(text, 'StackFrames').items():
    location, parent = re.search(r'file_location_id=(\d+) parent_frame_id=(\d+)', value).groups()
    file_id, function_id, line = re.search(
      r'file_name_id=(\d+) function_name_id=(\d+) line=(\d+)',
      _table(text, 'FileLocations')[int(location)],
    ).groups()
    frames[key] = (
      files[int(file_id)].strip('"'),
      functions[int(function_id)].strip('"'),
      int(line),
      int(parent),
    )
  return frames


def place(frame: int, frames: dict, repo: str = REPO) -> str:
  """What an op made at stack frame `frame` is charged to (module docstring); a stack XLA kept
  without a frame of Attend's code (flax's `Linear` is often all that is left of a dense layer's)
  is charged to its innermost frame's library file."""
  own, library, seen = None, None, set()
  while frame in frames and frame not in seen:  # a frame without a parent names itself
    seen.add(frame)
    path, function, _, parent = frames[frame]
    if f'{os.sep}optax{os.sep}' in path:
      return 'optimizer (optax)'
    relative = os.path.relpath(path, repo)
    if own is None and relative.split(os.sep)[0] in ROOTS:
      own = f'{relative} {function}'
    if library is None and 'site-packages' in path:
      library = f'{path.split("site-packages" + os.sep)[-1]} {function}'
    frame = parent
  return own or library or 'other'


def dumped_programs(
  dump_dir: str, repo: str = REPO, module: str = 'jit_train_step'
) -> list[dict[str, str]]:
  """Per program of the jitted function `module` XLA dumped, where each of its ops was made
  (Attend's code in `repo`)."""
  programs = []
  pattern = os.path.join(dump_dir, f'module_*.{module}.*after_optimizations.txt')
  for path in sorted(glob.glob(pattern)):
    with open(path, encoding='utf-8') as f:
      text = f.read()
    frames = stack_frames(text)
    matches = filter(None, map(_INSTRUCTION.match, text.splitlines()))
    programs.append({m[1]: place(int(m[2]), frames, repo) if m[2] else 'other' for m in matches})
  return programs


def dump_flags(dump_dir: str, module: str) -> str:
  """The XLA_FLAGS that make XLA dump the programs of the jitted function `module` into
  `dump_dir` (with each op's Python stack), as `charge` reads them; set before JAX starts."""
  return f'--xla_dump_to={dump_dir} --xla_dump_hlo_module_re={module}'


def newest_trace(folder: str) -> str | None:
  """The newest `jax.profiler` trace (`plugins/profile/RUN/HOST.xplane.pb`) written into
  `folder`, or None."""
  traces = sorted(glob.glob(os.path.join(folder, '*', '*', '*', '*.xplane.pb')))
  return traces[-1] if traces else None


def breakdown(workdir: str, dump_dir: str) -> tuple[dict[str, float], int]:
  """`(milliseconds per traced step of each place, largest first; the traced steps)` of the
  workdir's newest trace (`charge`)."""
  with open(os.path.join(workdir, layout.CONFIG_FILE), encoding='utf-8') as f:
    steps = profiling.parse_steps(json.load(f).get('profile_steps', ''))
  xplane = newest_trace(layout.profile_dir(workdir))
  if steps is None or xplane is None:
    raise ValueError(f'{workdir} holds no trace: train it with --config.profile_steps=FIRST:END.')
  return charge(xplane, dump_dir, 'jit_train_step', steps[1] - steps[0]), steps[1] - steps[0]


def charge(xplane: str, dump_dir: str, module: str, calls: int) -> dict[str, float]:
  """Milliseconds per call of the jitted function `module` charged to each place (largest
  first), from a trace of `calls` calls and XLA's dump of the process that ran them.

  A program of the trace is matched to the dumped program that holds every op it ran (the
  trace's program ids do not number the dump's files); an op the dump keeps no stack for (a
  copy XLA added) is charged to 'other'.
  """
  programs = dumped_programs(dump_dir, module=module)
  ran = collections.defaultdict(dict)  # per program of the trace, the seconds of each op
  for (program, op), seconds in op_self_seconds(xplane, module).items():
    ran[program][op] = seconds
  per_place = collections.Counter()
  for program, ops in ran.items():
    holders = [places for places in programs if set(ops) <= set(places)]
    if len(holders) != 1:
      raise ValueError(
        f'{len(holders)} of the {len(programs)} {module} programs in {dump_dir} hold every op '
        f'of program {program} of the trace (1 needed): dump the run that wrote the trace.'
      )
    for op, seconds in ops.items():
      per_place[holders[0][op]] += seconds * 1e3 / calls
  return dict(per_place.most_common())


def draw(ms: dict[str, float], path: str, title: str, top: int) -> None:
  """A bar per place, its share of the step's XLA op time: the `top` largest and the rest
  together; attention/ in its own colour."""
  import matplotlib  # pylint: disable=import-outside-toplevel

  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

  total = sum(ms.values())
  # The largest places, and every one in attention/ however small.
  names = [n for i, n in enumerate(ms) if i < top or n.startswith('attention' + os.sep)]
  shares = [100 * ms[n] / total for n in names]
  if len(ms) > len(names):
    names.append(f'the other {len(ms) - len(names)} places')
    shares.append(100 - sum(shares))
  colours = ['tab:orange' if n.startswith('attention' + os.sep) else 'tab:blue' for n in names]
  fig, ax = plt.subplots(figsize=(9, 0.3 * len(names) + 1.3))
  rows = range(len(names))[::-1]
  ax.barh(rows, shares, color=colours)
  ax.set_yticks(rows, names, fontsize=8)
  ax.set_xlabel('% of the XLA op time of a train step (self time, all threads)')
  ax.set_title(title, fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, float]:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--workdir', required=True, help='a run trained with config.profile_steps')
  parser.add_argument('--hlo', default='', help="XLA's dump folder (default: WORKDIR/hlo)")
  parser.add_argument('--top', type=int, default=15, help='places shown one by one')
  parser.add_argument('--png', default='', help='also draw the places as bars in this file')
  parser.add_argument('--title', default='', help="the picture's name of the run")
  args = parser.parse_args(argv)
  ms, steps = breakdown(args.workdir, args.hlo or os.path.join(args.workdir, 'hlo'))
  total = sum(ms.values())
  attention = sum(v for k, v in ms.items() if k.startswith('attention' + os.sep))
  print(
    f'{total:.1f} ms of XLA ops per step over {steps} traced steps; attention/: '
    f'{attention:.1f} ms ({attention / total:.0%})'
  )
  for name, value in list(ms.items())[: args.top]:
    print(f'{value:9.2f} ms  {value / total:6.1%}  {name}')
  if args.png:
    title = (
      f'Where a train step of {args.title or args.workdir} goes\n'
      f'attention/ (orange): {attention / total:.0%} of its XLA op time'
    )
    draw(ms, args.png, title, args.top)
  return ms


if __name__ == '__main__':
  main()
