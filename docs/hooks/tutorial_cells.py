"""The subprocess of `tutorials.run` (beside this file): runs one tutorial cell by cell and writes
its executed notebook, the record the site's tutorial pages show.

    python docs/hooks/tutorial_cells.py TUTORIAL RECORD   # as `tutorials.run` starts it

The cells run in this process, in order, in one namespace, as the script would run
(`__name__ == '__main__'`, `__file__` the tutorial). Each code cell keeps what it printed and
each picture it saved in the working directory, or drew and left unsaved.
"""

import base64
import builtins
import contextlib
import datetime
import io
import linecache
import os
import sys
import time
import traceback

from tutorials import IMAGES, MIME, ROOT, source_sha256  # docs/hooks/tutorials.py: the format


class _Tee(io.TextIOBase):
  """Writes to the cell's buffer and to the process's stream (the test's failure message)."""

  def __init__(self, *streams):
    self.streams = streams

  def writable(self):
    return True

  def write(self, text):
    for stream in self.streams:
      stream.write(text)
    return len(text)

  def flush(self):
    for stream in self.streams:
      stream.flush()

  def fileno(self):  # for code that asks; what it writes there directly is not recorded
    return self.streams[-1].fileno()


def _images(directory: str) -> dict[str, int]:
  return {
    entry.name: entry.stat().st_mtime_ns
    for entry in os.scandir(directory)
    if entry.is_file() and entry.name.lower().endswith(IMAGES)
  }


def _image_output(nbformat, data: bytes, filename: str):
  extension = os.path.splitext(filename)[1].lower()
  payload = data.decode() if extension == '.svg' else base64.b64encode(data).decode('ascii')
  return nbformat.v4.new_output(
    'display_data', data={MIME[extension]: payload}, metadata={'filename': filename}
  )


def execute(path: str, record: str) -> int:
  """Runs the tutorial's cells in this process, in order, in one namespace; writes the executed
  notebook to `record` if every cell ran. Returns the exit status."""
  import jupytext
  from matplotlib._pylab_helpers import Gcf
  import matplotlib.figure
  import nbformat

  path = os.path.abspath(path)
  notebook = jupytext.read(path)
  saved = set()  # the figures the tutorial saved itself
  savefig = matplotlib.figure.Figure.savefig

  def recording_savefig(figure, *args, **kwargs):
    saved.add(id(figure))
    return savefig(figure, *args, **kwargs)

  matplotlib.figure.Figure.savefig = recording_savefig
  namespace = {'__name__': '__main__', '__file__': path, '__builtins__': builtins}
  sys.argv = [path]
  sys.path[0] = os.path.dirname(path)  # as for `python TUTORIAL`
  shown = set()
  start = time.monotonic()
  count = 0
  for index, cell in enumerate(notebook.cells):
    if cell.cell_type != 'code':
      continue
    count += 1
    filename = f'<{os.path.basename(path)}, cell {index}>'
    linecache.cache[filename] = (len(cell.source), None, cell.source.splitlines(True), filename)
    before = _images(os.getcwd())
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
      with (
        contextlib.redirect_stdout(_Tee(stdout, sys.stdout)),
        contextlib.redirect_stderr(_Tee(stderr, sys.stderr)),
      ):
        exec(compile(cell.source, filename, 'exec'), namespace)
    except BaseException:  # SystemExit included: the cell did not run through
      traceback.print_exc()
      print(f'{os.path.basename(path)}: cell {index} raised; nothing recorded', file=sys.stderr)
      return 1
    outputs = []
    for stream, text in (('stdout', stdout.getvalue()), ('stderr', stderr.getvalue())):
      if text:
        outputs.append(nbformat.v4.new_output('stream', name=stream, text=text))
    for filename, mtime in sorted(_images(os.getcwd()).items()):
      if before.get(filename) != mtime:
        with open(filename, 'rb') as f:
          outputs.append(_image_output(nbformat, f.read(), filename))
    for manager in Gcf.get_all_fig_managers():  # drawn, not saved: shown as a notebook would
      figure = manager.canvas.figure
      if id(figure) not in saved and id(figure) not in shown:
        shown.add(id(figure))
        buffer = io.BytesIO()
        savefig(figure, buffer, format='png', dpi=80)
        filename = f'cell{index}_figure{manager.num}.png'
        outputs.append(_image_output(nbformat, buffer.getvalue(), filename))
    cell.outputs = outputs
    cell.execution_count = count
  notebook.metadata['attend'] = {
    'source': os.path.relpath(path, ROOT),
    'source_sha256': source_sha256(path),
    'recorded': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
    'seconds': round(time.monotonic() - start, 1),
  }
  os.makedirs(os.path.dirname(os.path.abspath(record)), exist_ok=True)
  partial = f'{record}.{os.getpid()}.partial'
  nbformat.write(notebook, partial)
  os.replace(partial, record)  # a reader never sees half a record
  return 0


if __name__ == '__main__':
  sys.exit(execute(sys.argv[1], sys.argv[2]))
