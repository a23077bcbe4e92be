"""A checkpoint reference is parsed once (sources/): every command takes the same forms and
refuses one that names nothing in the same sentence, and a command that reads a language model
builds no task for it."""

import io
import os

import ml_collections
import numpy as np
import pytest
from tiny_decoders import write_checkpoint
import tiny_gguf

from configs import pretrained_lm
from models import pretrained
from reports import export, prompt_commands, prompt_continuation, run_eval
import sources
import tasks
from training import pretrained_workdir


@pytest.fixture(scope='module')
def forms(tmp_path_factory):
  """The same tiny Llama as a Hugging Face folder, a converted workdir and that workdir's step
  0; another tiny Llama as a GGUF file."""
  base = tmp_path_factory.mktemp('sources')
  folder = write_checkpoint('llama', str(base / 'llama'))
  read = pretrained.read(folder)
  workdir = str(base / 'workdir')
  pretrained_workdir.write_workdir(workdir, read, pretrained_lm.converted(read))
  step = os.path.join(workdir, 'checkpoints', '0')
  gguf = tiny_gguf.write_llama(str(base / 'llama.gguf'), {})
  return dict(workdir=workdir, step=step, folder=folder, gguf=gguf)


def test_each_form_is_parsed_to_what_it_names(forms):
  parsed = lambda text, **kw: sources.parse(text, **kw)
  assert parsed(forms['workdir']) == sources.Reference(
    forms['workdir'], '--workdir', sources.WORKDIR, forms['workdir'], ''
  )
  step = parsed(forms['step'])
  assert (step.kind, step.path, step.choice) == (sources.WORKDIR, forms['workdir'], '0')
  chosen = parsed(forms['workdir'], checkpoint=forms['step'])  # export.py's --checkpoint=PATH
  assert (chosen.path, chosen.choice) == (forms['workdir'], '0')
  assert parsed(forms['workdir'], checkpoint='latest').choice == 'latest'
  for name in ('folder', 'gguf'):
    assert parsed(forms[name]).kind == sources.PRETRAINED
  name = next(iter(pretrained.PACKAGES))  # a short name: nothing read to parse it
  assert parsed(name, flag='--checkpoint') == sources.Reference(
    name, '--checkpoint', sources.PRETRAINED, name, ''
  )
  with pytest.raises(ValueError, match='names step 0; --checkpoint=3 another'):
    parsed(forms['step'], checkpoint='3')
  with pytest.raises(ValueError, match='is a pretrained checkpoint, read whole'):
    parsed(forms['folder'], checkpoint='best')
  with pytest.raises(ValueError, match='is not a checkpoint of'):
    parsed(forms['folder'], checkpoint=forms['step'])


def test_every_command_refuses_a_reference_that_names_nothing_in_one_sentence(tmp_path):
  bad = str(tmp_path / 'nowhere')
  config = ml_collections.ConfigDict(dict(init_from=bad))
  calls = {
    'config.init_from': lambda: sources.resolve_init_from(config),  # train.py
    '--workdir': [
      lambda: run_eval.evaluate(run_eval.Request(bad)),  # eval.py
      lambda: prompt_continuation.continue_prompt(
        prompt_continuation.Request(workdir=bad, prompt='w1')
      ),  # generate.py
      lambda: prompt_commands.run_heads(
        prompt_commands.Request(command='heads', workdir=bad, prompt='w1')
      ),  # prompt.py
      lambda: export.request(bad, '', 'hf', str(tmp_path / 'out'), 'f32'),  # export.py
    ],
    '--checkpoint': lambda: sources.load_decoder(bad),  # the studies and benchmarks
  }
  for flag, each in calls.items():
    for call in each if isinstance(each, list) else [each]:
      with pytest.raises(FileNotFoundError) as error:
        call()
      assert str(error.value) == sources.unknown(flag, bad)
  assert os.listdir(tmp_path) == []


def test_generate_reads_each_form_of_the_same_weights_alike(forms):
  """The folder, its converted workdir and that workdir's step 0 continue a prompt with the same
  tokens; the GGUF file is read too. eval.py refuses a pretrained checkpoint in one sentence."""
  continued = {}
  for name in ('workdir', 'step', 'folder', 'gguf'):
    request = prompt_continuation.Request(workdir=forms[name], prompt='w5 w6', max_new_tokens=4)
    continued[name] = prompt_continuation.continue_prompt(request, io.StringIO())['ids']
  assert continued['workdir'] == continued['step'] == continued['folder']
  assert len(continued['gguf']) > 0
  with pytest.raises(ValueError, match='is a pretrained checkpoint, which holds no run to eval'):
    run_eval.evaluate(run_eval.Request(forms['folder']))


def test_export_writes_the_folder_and_its_workdir_alike(forms, tmp_path):
  """A pretrained folder goes out as export.py writes its converted workdir: the same weights."""
  for name in ('folder', 'workdir'):
    out = str(tmp_path / name)
    export.export(export.request(forms[name], '', 'hf', out, 'f32'))
  ours, theirs = (pretrained.read(str(tmp_path / name)) for name in ('folder', 'workdir'))
  assert sorted(ours.tensors) == sorted(theirs.tensors)
  for key, tensor in ours.tensors.items():
    np.testing.assert_array_equal(tensor, theirs.tensors[key], err_msg=key)


def test_prompt_heads_builds_no_task_and_reads_no_training_rows(forms, tmp_path, monkeypatch):
  """A language model's shapes come from its vocabulary alone: prompt.py heads never builds
  the run's task (which would read and cut its training text)."""

  def refused(*args, **kwargs):
    raise AssertionError('tasks.build was called')

  monkeypatch.setattr(tasks, 'build', refused)
  request = prompt_commands.Request(
    command='heads',
    workdir=forms['workdir'],
    prompt='w5 w9 w12',
    target='w13',
    out=str(tmp_path / 'heads'),
  )
  saved = prompt_commands.run_heads(request)
  assert len(saved['effects']) == 2  # the tiny model's layers
  with pytest.raises(ValueError, match='is a pretrained checkpoint, not a workdir to write into'):
    prompt_commands.run_heads(
      prompt_commands.Request(command='heads', workdir=forms['gguf'], prompt='w5', target='w9')
    )
