"""generate.py and prompt.py on a converted tiny checkpoint. generate.py: a prompt continued
token by token as `continue_prompt` continues it, the chat template rendered as transformers
renders it, the checkpoint's template carried into the workdir. prompt.py: its three commands'
files and numbers (tests/test_head_effects.py checks the numbers against transformers). Each
fault is one sentence, and a refused command writes nothing."""

import io
import json
import os
import re
import subprocess
import sys

from conftest import build_model
from flax import nnx
import jax
import numpy as np
import pytest
from tiny_decoders import write_checkpoint

from attention import get_press
from data import chat
from interpret import effects as effects_lib
from models import compression, generation
from reports import prompt_commands, prompt_continuation
import sources
from training import pretrained_workdir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Words of the tiny checkpoint's vocabulary around the turn, and its BOS (which it lacks).
TEMPLATE = (
  "{% for message in messages %}w1 {{ message['role'] }} {{ message['content'] }} w2\n"
  '{% endfor %}{% if add_generation_prompt %}w3 {{ bos_token }}{% endif %}'
)


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
  """A converted tiny Llama whose folder ships a chat template in tokenizer_config.json."""
  base = tmp_path_factory.mktemp('generate')
  folder = write_checkpoint('llama', str(base / 'llama'))
  with open(os.path.join(folder, 'tokenizer_config.json'), 'w', encoding='utf-8') as f:
    json.dump(dict(chat_template=TEMPLATE, tokenizer_class='PreTrainedTokenizerFast'), f)
  from configs import pretrained_lm
  from models import pretrained

  read = pretrained.read(folder)
  assert read.chat_template == TEMPLATE
  pretrained_workdir.write_workdir(str(base / 'w'), read, pretrained_lm.converted(read))
  return folder, str(base / 'w')


@pytest.mark.parametrize('settings', [dict(temperature=0.0), dict(temperature=0.9, top_p=0.9)])
def test_streamed_tokens_are_continue_prompts(settings):
  """Token by token, the tokens of the compiled whole-loop search with the same key; a stop id
  ends the stream after it is yielded."""
  model = build_model(
    'decoder_lm',
    vocab_size=13,
    pad_id=0,
    num_layers=1,
    d_model=8,
    num_heads=2,
    d_ff=8,
    positions='rope',
    rngs=nnx.Rngs(0),
  )
  # Parameters placed on a mesh, as a restored run's are: the step's outputs then carry that
  # placement, and so must its first inputs, or the second token compiles the step again.
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ('data',))
  graphdef, state = nnx.split(model)
  placed = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  model = nnx.merge(graphdef, jax.device_put(state, placed))
  prompt = np.asarray([[3, 4, 5, 6]], np.int32)
  rng = jax.random.key(7)
  expected = np.asarray(
    generation.continue_prompt(model, prompt, max_length=12, rng=rng, **settings)
  )[0].tolist()
  generation._next_token.clear_cache()
  streamed = list(generation.stream_prompt(model, prompt, max_length=12, rng=rng, **settings))
  assert streamed == expected
  assert settings['temperature'] == 0 or len(set(expected)) > 1  # sampling is exercised
  stop = expected[4]
  stopped = list(
    generation.stream_prompt(model, prompt, max_length=12, rng=rng, stop_ids=(stop,), **settings)
  )
  assert stopped == expected[: expected.index(stop) + 1]
  # One compiled step for every token of both streams (the first token's placement included).
  assert generation._next_token._cache_size() == 1


def test_the_chat_template_renders_as_transformers_renders_it(workdir):
  """The same text as `apply_chat_template` for the same messages, from the workdir's vocab/."""
  import transformers

  folder, path = workdir
  assert sorted(os.listdir(os.path.join(path, 'vocab'))) == [
    'shared.chat_template.jinja',
    'shared.tokenizer.json',
    'vocab.json',
  ]
  reference = transformers.AutoTokenizer.from_pretrained(folder)
  messages = [{'role': 'user', 'content': 'w5 w6'}]
  expected = reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
  assert chat.render(TEMPLATE, messages) == expected == 'w1 user w5 w6 w2\nw3 '


def test_generate_prints_the_greedy_continuation_and_its_speed(workdir):
  _, path = workdir
  out = io.StringIO()
  request = prompt_continuation.Request(workdir=path, prompt='w5 w6', chat=True, max_new_tokens=6)
  result = prompt_continuation.continue_prompt(request, out)
  source = sources.resolve(path)
  ids = source.tokenizer.encode_pieces('w1 user w5 w6 w2\nw3 ')
  assert result['prompt_tokens'] == len(ids) == 6  # 'user' is not a word of it: w0

  expected = generation.continue_prompt(
    source.model(), np.asarray([ids]), max_length=6, rng=jax.random.key(0), temperature=0
  )
  assert result['ids'] == np.asarray(expected)[0].tolist()
  text = out.getvalue()
  assert text.startswith(' '.join(f'w{i}' for i in result['ids']))
  assert '[6 tokens after a prompt of 6: first in' in text and 'tokens/s]' in text


def test_a_press_that_keeps_everything_changes_nothing(workdir):
  _, path = workdir
  plain = dict(workdir=path, prompt='w5 w6 w7 w8', max_new_tokens=5)
  expected = prompt_continuation.continue_prompt(
    prompt_continuation.Request(**plain), io.StringIO()
  )
  out = io.StringIO()
  request = prompt_continuation.Request(**plain, press='knorm', press_ratio=0.0)
  assert prompt_continuation.continue_prompt(request, out)['ids'] == expected['ids']
  assert 'knorm kept 3 of its 3 cached positions per head' in out.getvalue()


@pytest.mark.parametrize(
  'changes, message',
  [
    (dict(prompt=' '), '--prompt is empty'),
    (dict(max_new_tokens=0), '--max_new_tokens must be at least 1'),
    (dict(max_new_tokens=100000), "past the model's context of"),
    (dict(top_p=0.0), 'top_p'),
    (dict(press='h2o'), "Unknown press 'h2o'; the presses are adakv, "),
    (dict(press='knorm', press_ratio=1.0), r'press ratio must be in \[0, 1\), got 1.0'),
    (dict(prompt='w5 w6 w7', press='knorm', press_every=-1), r'press_every must be 0 \(never\)'),
    (dict(prompt='w5 w6 w7', press='snapkv', press_every=2), 'takes a press that scores keys'),
    (dict(press='knorm'), 'the context must hold at least 2 tokens, got 0'),
  ],
)
def test_a_bad_request_is_refused(workdir, changes, message):
  _, path = workdir
  request = prompt_continuation.Request(**{'workdir': path, 'prompt': 'w5', **changes})
  with pytest.raises(ValueError, match=message):
    prompt_continuation.continue_prompt(request, io.StringIO())


def test_generate_py_says_a_fault_in_one_sentence(workdir):
  _, path = workdir
  done = subprocess.run(
    [
      sys.executable,
      os.path.join(ROOT, 'generate.py'),
      f'--workdir={path}',
      '--prompt=w5',
      '--max_new_tokens=0',
    ],
    capture_output=True,
    text=True,
    cwd=ROOT,
    check=False,
  )
  assert done.returncode != 0 and 'Traceback' not in done.stderr
  assert done.stderr.strip().splitlines()[-1].startswith('generate.py: --max_new_tokens must be')


def _request(path, command, out, **flags):
  return prompt_commands.Request(command=command, workdir=path, out=str(out), **flags)


def test_prompt_commands_write_their_files(workdir, tmp_path, capsys):
  """heads: heads.json's effects are `head_effects`' on the same ids; attribute and attention
  write their JSON, PNG and page; every picture is a real PNG."""
  _, path = workdir
  out = tmp_path / 'out'
  words = dict(prompt='w5 w9 w12 w30 w7')
  diff = dict(metric='logit_diff', target='w30', versus='w7')
  saved = prompt_commands.run_heads(_request(path, 'heads', out, **words, **diff))
  printed = capsys.readouterr().out
  assert 'Heads zero: 8/8' in printed and 'Heads by effect (zero):' in printed
  source = sources.resolve(path)
  ids = np.asarray([source.tokenizer.encode('w5 w9 w12 w30 w7')])
  model = source.model()
  clean, effects = effects_lib.head_effects(model, ids, effects_lib.Metric('logit_diff', 30, 7))
  np.testing.assert_allclose(json.loads((out / 'heads.json').read_text())['effects'], effects)
  assert saved['clean'] == pytest.approx(clean, abs=1e-6)
  lens = prompt_commands.run_attribute(_request(path, 'attribute', out, **words, target='w30'))
  assert len(lens['lens']) == 2
  press = dict(press='knorm', press_ratio=0.5)
  shown = prompt_commands.run_attention(
    _request(path, 'attention', out, **words, layers='1', **press)
  )
  assert shown['layers'] == [1]
  # The page's kept view: a row per layer's key/value head, what `kept_positions` keeps there.
  kept = shown['views'][-1]
  masks = compression.kept_positions(model, ids, get_press('knorm'), 0.5)
  assert kept['rows'] == [f'layer {l} kv head {h}' for l in range(2) for h in range(2)]
  np.testing.assert_array_equal(kept['kept'], np.concatenate([m[0] for m in masks]))
  assert kept['kept'].sum(axis=1).tolist() == [ids.shape[1] // 2] * 4  # half of each head's
  for name in ('heads.png', 'attribute.png', 'attention.png'):
    assert (out / name).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  assert (out / 'explorer.html').stat().st_size > 1000


@pytest.mark.parametrize(
  'command, flags, message',
  [
    ('heads', dict(target='w30 w31'), "--target='w30 w31' is 2 tokens ('w30', 'w31'), not one"),
    ('heads', dict(target='w30', heads='5.0'), 'layer 5, head 0 is not in the model'),
    ('heads', dict(target='w30', ablation='patch', source='w1'), '--source encodes to 1'),
    ('attention', dict(layers='7'), 'layer 7 is not in the model'),
    ('attention', dict(press='kvzip'), "press 'kvzip' scores the context by how the model repeats"),
    ('attention', dict(press='h2o'), "Unknown press 'h2o'; the presses are adakv, "),
    ('attribute', {}, 'attribute needs --target'),
  ],
)
def test_a_refused_prompt_command_writes_nothing(workdir, tmp_path, command, flags, message):
  _, path = workdir
  out = tmp_path / 'out'
  request = _request(path, command, out, prompt='w5 w9 w12', **flags)
  with pytest.raises(ValueError, match=re.escape(message)):
    prompt_commands.COMMANDS[command](request)
  assert not out.exists()


def test_prompt_py_says_a_fault_in_one_sentence(workdir, tmp_path):
  _, path = workdir
  done = subprocess.run(
    [sys.executable, os.path.join(ROOT, 'prompt.py'), 'heads', f'--workdir={path}']
    + ['--prompt=w5 w9', '--target=w30 w31', f'--out={tmp_path / "out"}'],
    capture_output=True,
    text=True,
    cwd=ROOT,
    check=False,
  )
  assert done.returncode != 0 and 'Traceback' not in done.stderr
  assert done.stderr.strip().splitlines()[-1].startswith("prompt.py heads: --target='w30 w31'")
  assert not (tmp_path / 'out').exists()


def test_chat_without_a_template_says_so(tmp_path):
  folder = write_checkpoint('llama', str(tmp_path / 'llama'))
  from models import pretrained

  read = pretrained.read(folder)
  assert read.chat_template == ''
  from data.pretrained_tokenizer import PretrainedTokenizer

  with pytest.raises(ValueError, match="--chat: this workdir's tokenizer has no chat template"):
    chat.chat_ids(PretrainedTokenizer(read.tokenizer_json), 'w5')
