"""compare: runs found, settings told apart, seeds averaged by hand-computed numbers, the report."""

import io
import json
import os
import subprocess
import sys

from PIL import Image
import pytest

from reports import compare, compare_against, figure_words
from reports import runs as runs_lib

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write_run(directory, *, seed=0, score='dot', d_k=16, lines=()):
  """A workdir as train.py leaves it: config.json and metrics.jsonl."""
  os.makedirs(directory)
  config = {
    'seed': seed,
    'num_train_steps': 300,
    'model': {'score': score, 'd_k': d_k},
    'dataset': {'eval_split': 'validation'},
  }
  with open(os.path.join(directory, 'config.json'), 'w', encoding='utf-8') as f:
    json.dump(config, f)
  with open(os.path.join(directory, 'metrics.jsonl'), 'w', encoding='utf-8') as f:
    f.writelines(json.dumps(line) + '\n' for line in lines)


def _lines(accuracy, loss, speeds=(2.0, 4.0, 5.0), parameters=1234567):
  """Train lines at steps 100, 200, 300 at `speeds` steps/s, one final eval, the model line."""
  train = [
    {
      'step': 100 * (i + 1),
      'split': 'train',
      'loss': 2.0 - i,
      'grad_norm': 1.0,
      'steps_per_s': speed,
    }
    for i, speed in enumerate(speeds)
  ]
  return [
    {'step': 0, 'split': 'model', 'parameters': parameters},
    *train,
    {'step': 300, 'split': 'validation', 'accuracy': accuracy, 'loss': loss},
  ]


@pytest.fixture
def study(tmp_path):
  """Two settings (model.score dot, additive) x 3 seeds; d_k is the same in all six."""
  values = {
    'dot': [(0.90, 0.30), (0.92, 0.20), (0.94, 0.10)],
    'additive': [(0.80, 0.60), (0.83, 0.50), (0.86, 0.70)],
  }
  for score, runs in values.items():
    for seed, (accuracy, loss) in enumerate(runs):
      _write_run(tmp_path / f'{score}_{seed}', seed=seed, score=score, lines=_lines(accuracy, loss))
  return tmp_path


def test_seeds_of_a_setting_are_averaged_with_sample_std(study):
  runs = [runs_lib.load_run(path) for path in runs_lib.find_runs([str(study)])]
  fields, settings = runs_lib.group_settings(runs)
  assert fields == ['model.score']  # seed varies too but is not a setting; d_k does not vary.
  assert [setting.label for setting in settings] == ['score=additive', 'score=dot']
  assert [len(setting.runs) for setting in settings] == [3, 3]
  additive, dot = (
    runs_lib.aggregate([runs_lib.summarize_run(run, ['accuracy', 'loss']) for run in setting.runs])
    for setting in settings
  )
  assert dot['accuracy'].mean == pytest.approx(0.92)
  assert dot['accuracy'].std == pytest.approx(0.02)  # sqrt((0.02² + 0 + 0.02²) / 2)
  assert dot['loss'].mean == pytest.approx(0.2) and dot['loss'].std == pytest.approx(0.1)
  assert additive['accuracy'].mean == pytest.approx(0.83)
  assert additive['accuracy'].std == pytest.approx(0.03)
  assert additive['loss'].mean == pytest.approx(0.6) and additive['loss'].std == pytest.approx(0.1)
  assert dot['parameters'] == runs_lib.Stat(1234567, 0.0, 3)


def test_markdown_table(study):
  markdown = compare.write_report([str(study)], str(study / 'report'))
  rows = [line for line in markdown.splitlines() if line.startswith('|')]
  assert rows[0] == '| model.score | n | accuracy | loss | train time (s) | ms/step | parameters |'
  # 100/2 + 100/4 + 100/5 = 95 s; median of 1000/4 and 1000/5 ms (the first interval compiles).
  assert rows[2] == (
    '| additive | 3 | 0.8300 ± 0.0300 | 0.6000 ± 0.1000 | 95.00 | 225.0 | 1,234,567 |'
  )
  assert rows[3] == '| dot | 3 | 0.9200 ± 0.0200 | 0.2000 ± 0.1000 | 95.00 | 225.0 | 1,234,567 |'
  assert '![curves](curves.png)' in markdown
  with open(study / 'report' / 'report.md', encoding='utf-8') as f:
    assert f.read() == markdown


def test_rows_sort_numbers_numerically_and_one_seed_shows_no_std(tmp_path):
  for d_k in (16, 8, 128):
    _write_run(tmp_path / f'dk{d_k}', d_k=d_k, lines=_lines(0.5, 1.0))
  markdown = compare.write_report([str(tmp_path)], str(tmp_path), metrics=['accuracy'])
  rows = [line for line in markdown.splitlines() if line.startswith('|')]
  assert rows[0].startswith('| model.d_k | n | accuracy |')
  assert [row.split(' | ')[0] for row in rows[2:]] == ['| 8', '| 16', '| 128']
  assert rows[2].startswith('| 8 | 1 | 0.5000 | ')


def test_a_single_run_is_labelled_by_its_directory(tmp_path):
  _write_run(tmp_path / 'baseline', lines=_lines(0.5, 1.0))
  runs = [runs_lib.load_run(path) for path in runs_lib.find_runs([str(tmp_path / 'baseline')])]
  fields, settings = runs_lib.group_settings(runs)
  assert fields == [] and settings[0].label == 'baseline'
  markdown = compare.markdown_table(fields, settings, ['loss'])
  assert markdown.splitlines()[2].startswith('| baseline | 1 | 1.000 |')


def test_train_time_and_ms_per_step():
  train = [
    {'step': 1, 'steps_per_s': 0.5},
    {'step': 101, 'steps_per_s': 10.0},
    {'step': 201, 'steps_per_s': 20.0},
    {'step': 301, 'steps_per_s': 5.0},
  ]
  assert runs_lib.train_time_s(train) == pytest.approx(1 / 0.5 + 100 / 10 + 100 / 20 + 100 / 5)
  assert runs_lib.ms_per_step(train) == pytest.approx(100.0)  # median of 100, 50, 200
  assert runs_lib.ms_per_step(train[:1]) == pytest.approx(2000.0)
  assert runs_lib.train_time_s([]) is None and runs_lib.ms_per_step([]) is None


def test_values_at_initialisation(tmp_path):
  lines = [
    {'step': 0, 'split': 'validation', 'accuracy': 0.25, 'loss': 1.4},
    {'step': 1, 'split': 'train', 'loss': 1.39, 'grad_norm': 3.5, 'steps_per_s': 1.0},
    {'step': 100, 'split': 'train', 'loss': 0.5, 'grad_norm': 0.7, 'steps_per_s': 9.0},
    {'step': 100, 'split': 'validation', 'accuracy': 0.75, 'loss': 0.6},
  ]
  _write_run(tmp_path / 'run', lines=lines)
  run = runs_lib.load_run(str(tmp_path / 'run'))
  summary = runs_lib.summarize_run(run, ['accuracy'])
  assert summary == {
    'accuracy': 0.75,
    'accuracy@init': 0.25,
    'grad_norm@init': 3.5,
    'train time (s)': pytest.approx(1 + 99 / 9),
    'ms/step': pytest.approx(1000 / 9),
  }  # The step-1 interval compiles.
  header = compare.write_report([str(tmp_path / 'run')], str(tmp_path)).splitlines()[4]
  assert '| accuracy | loss | accuracy@init | loss@init | grad_norm@init |' in header
  assert 'parameters' in header  # Always a column; '—' for a run without a 'model' line.


def test_a_resumed_run_uses_the_last_line_of_a_step(tmp_path):
  lines = [
    {'step': 100, 'split': 'train', 'loss': 1.0, 'steps_per_s': 1.0},
    {'step': 200, 'split': 'validation', 'accuracy': 0.1},
    {'step': 100, 'split': 'train', 'loss': 0.9, 'steps_per_s': 4.0},  # After the resume.
    {'step': 200, 'split': 'validation', 'accuracy': 0.2},
  ]
  _write_run(tmp_path / 'run', lines=lines)
  run = runs_lib.load_run(str(tmp_path / 'run'))
  assert [line['loss'] for line in run.lines['train']] == [0.9]
  assert runs_lib.summarize_run(run, ['accuracy'])['accuracy'] == 0.2
  assert runs_lib.train_time_s(run.lines['train']) == pytest.approx(25.0)


def test_bad_paths_and_metrics_are_one_sentence_errors(tmp_path, study):
  with pytest.raises(FileNotFoundError, match=r'^\S*nowhere does not exist\.$'):
    runs_lib.find_runs([str(tmp_path / 'nowhere')])
  (tmp_path / 'empty').mkdir()
  with pytest.raises(FileNotFoundError, match='empty is neither a training workdir'):
    runs_lib.find_runs([str(tmp_path / 'empty')])
  os.remove(study / 'dot_1' / 'config.json')
  with pytest.raises(FileNotFoundError, match='dot_1 has metrics.jsonl but no config.json'):
    compare.write_report([str(study)], str(tmp_path))
  _write_run(tmp_path / 'other', lines=_lines(0.5, 1.0))
  with pytest.raises(ValueError, match="'bleu'.*available: accuracy, loss"):
    compare.write_report([str(tmp_path / 'other')], str(tmp_path), metrics=['bleu'])
  assert not (tmp_path / 'report.md').exists()  # Nothing is written when the input is bad.


def test_curves_are_a_png(study):
  runs = [runs_lib.load_run(path) for path in runs_lib.find_runs([str(study)])]
  _, settings = runs_lib.group_settings(runs)
  png = compare.draw_curves(settings, ['accuracy', 'loss'])
  assert png.startswith(b'\x89PNG\r\n\x1a\n')
  width, height = Image.open(io.BytesIO(png)).size
  assert width > 600 and height > 200  # Three panels side by side, a legend below.


def _words(figure):
  """(suptitle, legend texts, [(panel title, x label, y label, x tick labels)]) of a Figure."""
  figure.canvas.draw()  # tick labels are set when drawn
  panels = [
    (ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), [t.get_text() for t in ax.get_xticklabels()])
    for ax in figure.axes
    if ax.get_visible()
  ]
  [legend] = figure.legends
  return figure.get_suptitle(), [text.get_text() for text in legend.get_texts()], panels


def test_curves_name_settings_by_what_differs_and_axes_in_words(study):
  runs = [runs_lib.load_run(path) for path in runs_lib.find_runs([str(study)])]
  _, settings = runs_lib.group_settings(runs)
  title, legend, panels = _words(compare.curves_figure(settings, ['exact_match', 'loss']))
  assert title == 'Training curves by score'
  assert legend == ['score=additive', 'score=dot']  # not 'model.score=...', nor the shared d_k
  assert [panel[:3] for panel in panels] == [
    ('training loss', 'training step', 'loss'),
    ('validation exact match', 'training step', 'exact match'),
    ('validation loss', 'training step', 'loss'),
  ]


def _length_study(directory):
  """The length study's shape: the learned table's run also sets dataset.eval_lengths=[64]."""
  table = {'alibi': [1.35, 1.32, 1.31, 1.32], 'rope': [1.28, 1.44, 2.03, 2.74], 'learned': [1.38]}
  for positions, bits in table.items():
    lengths = [64, 128, 256, 512][: len(bits)]
    final = {'step': 2000, 'split': 'validation', 'loss': 0.9, 'bits_per_char': bits[0]}
    final.update({f'bits_per_char@{n}': value for n, value in zip(lengths, bits)})
    run = directory / f'model.positions={positions}'
    _write_run(run, lines=[{'step': 1000, 'split': 'train', 'loss': 2.0}, final])
    config = json.loads((run / 'config.json').read_text())
    config['model'].update(positions=positions, name='gpt')
    config['dataset'].update(eval_lengths=lengths, name='text')  # two '.name' keys
    (run / 'config.json').write_text(json.dumps(config))
  return [runs_lib.load_run(path) for path in runs_lib.find_runs([str(directory)])]


def test_against_metrics_names_lines_by_positions_and_x_by_evaluation_length(tmp_path):
  _, settings = runs_lib.group_settings(_length_study(tmp_path))
  metrics = [f'bits_per_char@{n}' for n in (64, 128, 256, 512)]
  figure = compare_against.against_figure(settings, metrics, 'metrics')
  title, legend, [panel] = _words(figure)
  assert title == 'Final validation bits per character by evaluation length, by positions'
  # dataset.eval_lengths differs for the learned run only, and follows from its positions.
  assert legend == ['positions=alibi', 'positions=rope', 'positions=learned']
  assert panel == (
    '',
    'evaluation length (tokens)',
    'bits per character',
    ['64', '128', '256', '512'],
  )
  out = tmp_path / 'out'
  compare.write_report([str(tmp_path)], str(out), metrics=metrics, against='metrics')
  assert Image.open(out / 'against.png').size[0] > 500
  rows = [line for line in (out / 'report.md').read_text().splitlines() if line.startswith('|')]
  assert rows[0].startswith('| dataset.eval_lengths | model.positions | n |')  # the table: whole


def test_against_a_field_names_the_field_and_metrics_in_words(tmp_path):
  for score in ('dot', 'additive'):
    for d_k in (8, 16):
      _write_run(tmp_path / f'{score}_{d_k}', score=score, d_k=d_k, lines=_lines(d_k / 100, 1.0))
  _, settings = runs_lib.group_settings(
    [runs_lib.load_run(path) for path in runs_lib.find_runs([str(tmp_path)])]
  )
  figure = compare_against.against_figure(settings, ['accuracy', 'loss'], 'model.d_k')
  title, legend, panels = _words(figure)
  assert title == 'Final validation metrics against key dimension d_k, by score'
  assert legend == ['score=additive', 'score=dot']
  assert panels == [
    ('accuracy', 'key dimension d_k', 'accuracy', ['8', '16']),
    ('loss', 'key dimension d_k', 'loss', ['8', '16']),
  ]
  words = compare_against.against_words(settings, ['accuracy', 'loss'], 'metrics')
  assert words['ticks'] == ['accuracy', 'loss'] and words['xlabel'] == 'metric'
  assert words['title'] == 'Final validation metrics, by d_k and score'


def test_legend_keeps_what_tells_lines_apart_in_short_names():
  keys = {'model.positions', 'model.name', 'dataset.name', 'dataset.eval_lengths', 'seed'}
  values = [
    {'dataset.eval_lengths': [64, 128], 'model.name': 'gpt', 'model.positions': 'rope'},
    {'dataset.eval_lengths': [64, 128], 'model.name': 'gpt', 'model.positions': 'alibi'},
    {'dataset.eval_lengths': [64], 'model.name': 'gpt', 'model.positions': 'learned'},
  ]
  # Shared (model.name) and dependent (eval_lengths, fixed by positions, not fixing it) fields: out.
  assert figure_words.legend(values, keys) == (
    ['positions'],
    ['positions=rope', 'positions=alibi', 'positions=learned'],
  )
  # Fields that fix each other (a pair count and its sequence length) are both kept; a last
  # component shared by two keys keeps its prefix.
  pairs = [
    {'dataset.name': 'pairs_4', 'dataset.seq_length': 16, 'model.window': 0},
    {'dataset.name': 'pairs_8', 'dataset.seq_length': 32, 'model.window': 0},
    {'dataset.name': 'pairs_8', 'dataset.seq_length': 32, 'model.window': 16},
  ]
  names, labels = figure_words.legend(pairs, keys | {'dataset.seq_length', 'model.window'})
  assert names == ['dataset.name', 'seq_length', 'window']
  assert labels[2] == 'dataset.name=pairs_8, seq_length=32, window=16'
  assert figure_words.legend([{'model.d_k': 16}, {'model.d_k': 16}], keys) == ([], ['', ''])
  assert figure_words.short_names(['seed', 'model.seed'], {'seed', 'model.seed'}) == {
    'seed': 'seed',
    'model.seed': 'model.seed',
  }


def test_metric_words():
  assert figure_words.metric_words('bits_per_char') == 'bits per character'
  assert figure_words.metric_words('bits_per_char@128') == 'bits per character at 128 tokens'
  assert figure_words.metric_words('accuracy@init') == 'accuracy at initialisation'
  assert figure_words.metric_words('attention_hit_rate/head0') == 'attention hit rate (head0)'
  assert figure_words.metric_words('sequence_accuracy') == 'sequence accuracy'  # not in the mapping
  assert figure_words.field_words('model.num_kv_heads') == 'key/value heads'
  assert figure_words.field_words('dataset.max_rows') == 'max rows'


def test_command_line(study, tmp_path):
  done = subprocess.run(
    [sys.executable, 'compare.py', str(study), '--metrics=accuracy'],
    cwd=_REPO,
    capture_output=True,
    text=True,
    timeout=60,
    check=False,
  )
  assert done.returncode == 0, done.stderr
  assert '| dot | 3 | 0.9200 ± 0.0200 |' in done.stdout
  assert len(done.stdout.splitlines()) == 10  # heading, note, 4 table lines, image; 4 blank lines.
  assert (study / 'curves.png').exists()
  missing = subprocess.run(
    [sys.executable, 'compare.py', str(tmp_path / 'nowhere')],
    cwd=_REPO,
    capture_output=True,
    text=True,
    timeout=60,
    check=False,
  )
  assert missing.returncode != 0
  assert 'compare.py:' in missing.stderr and 'nowhere does not exist' in missing.stderr


def test_against_a_field_draws_one_line_per_other_setting_and_skips_tied_fields(tmp_path):
  # model.d_k is the x axis; num_train_steps moves with it (tied), so it labels no line.
  for score in ('dot', 'additive'):
    for d_k in (8, 16, 32):
      directory = tmp_path / f'{score}_{d_k}'
      _write_run(directory, score=score, d_k=d_k, lines=_lines(d_k / 100, 1.0))
      config = json.loads((directory / 'config.json').read_text())
      config['num_train_steps'] = 10 * d_k
      (directory / 'config.json').write_text(json.dumps(config))
  runs = [runs_lib.load_run(path) for path in runs_lib.find_runs([str(tmp_path)])]
  _, settings = runs_lib.group_settings(runs)
  lines = compare_against.lines(settings, 'model.d_k')
  assert list(lines) == ['score=additive', 'score=dot']
  assert [s.values['model.d_k'] for s in lines['score=dot']] == [8, 16, 32]
  with pytest.raises(
    ValueError,
    match=r'--against=model.heads is not a field that differs among '
    r'these runs; valid: metrics, model.d_k, model.score, num_train_steps',
  ):
    compare_against.lines(settings, 'model.heads')
  assert list(compare_against.lines(settings, 'metrics')) == [s.label for s in settings]
  markdown = compare.write_report(
    [str(tmp_path)], str(tmp_path / 'out'), metrics=['accuracy'], against='model.d_k'
  )
  assert markdown.endswith('![curves](curves.png)\n\n![against](against.png)\n')
  width, height = Image.open(tmp_path / 'out' / 'against.png').size
  assert width > 500 and height > 300


def test_eval_results_replace_the_last_validation_with_the_config_evaluated(tmp_path):
  for window in (0, 64):
    directory = tmp_path / f'window_{window}'
    _write_run(directory, lines=_lines(0.5, 1.0))
    os.makedirs(directory / 'eval')
    config = json.loads((directory / 'config.json').read_text())
    config['model']['window'] = window  # evaluated with another window
    (directory / 'eval' / 'config.json').write_text(json.dumps(config))
    (directory / 'eval' / 'metrics.json').write_text(
      json.dumps(
        {
          'accuracy': 0.7 + window / 1000,
          'step': 300,
          'split': 'validation',
          'population': {'accuracy': 'all of validation'},
        }
      )
    )
  markdown = compare.write_report(
    [str(tmp_path)], str(tmp_path / 'out'), metrics=['accuracy'], from_eval=True
  )
  assert '| 0 | 1 | 0.7000 |' in markdown and '| 64 | 1 | 0.7640 |' in markdown
  assert 'validation metrics of eval.py' in markdown
  (tmp_path / 'window_0' / 'eval' / 'metrics.json').unlink()
  with pytest.raises(
    FileNotFoundError, match='window_0 has no eval/metrics.json; run python eval.py'
  ):
    compare.write_report([str(tmp_path)], str(tmp_path / 'out'), from_eval=True)


def test_importing_training_and_reports_leaves_matplotlibs_backend_alone():
  # Every module of the training core and of the reports, imported in a fresh process whose
  # backend is set to 'svg': a module that chose one at import (matplotlib.use('Agg')) changes it.
  # Pictures are drawn by Agg outside pyplot, so pyplot, which switches backends, never loads.
  check = (
    'import importlib, pkgutil, sys\n'
    'import reports, training\n'
    'for package in (training, reports):\n'
    '  for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):\n'
    '    importlib.import_module(module.name)\n'
    'import matplotlib\n'
    'print(matplotlib.get_backend(), "matplotlib.pyplot" in sys.modules)\n'
  )
  done = subprocess.run(
    [sys.executable, '-c', check],
    cwd=_REPO,
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
    env={**os.environ, 'MPLBACKEND': 'svg'},
  )
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.split() == ['svg', 'False']


def test_a_model_field_added_since_a_run_counts_as_its_default(tmp_path):
  """A study whose runs straddle the addition of a model field: the older run's config lacks it,
  the newer one's has it at its default; they do not differ in it. At another value they do."""
  for name, extra in (('old', {}), ('new', {'copy_source': False}), ('on', {'copy_source': True})):
    os.makedirs(tmp_path / name)
    config = {'seed': 0, 'model': {'name': 'transformer', 'score': 'dot', **extra}}
    (tmp_path / name / 'config.json').write_text(json.dumps(config))
    (tmp_path / name / 'metrics.jsonl').write_text('')
  configs = [runs_lib.load_run(str(tmp_path / name)).config for name in ('old', 'new', 'on')]
  assert configs[0]['model.copy_source'] is False
  assert runs_lib.setting_fields(configs[:2]) == []
  assert runs_lib.setting_fields(configs) == ['model.copy_source']
