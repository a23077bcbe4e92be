"""studies/presses.py end to end on a tiny random Llama with a chat template (word-level: every
RULER word is the unknown `w0`, so its answers are wrong and the task is dropped, which the table
says): the framing, one prefill for every press, the JSON, table and figures."""

import contextlib
from io import StringIO
import itertools
import json
import os

from flax import nnx
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_decoders import write_checkpoint

from attention import get_press
from data import retrieval_tasks
import sources
from studies import press_prompts, presses

TEMPLATE = "{% for m in messages %}w1 {{ m['role'] }} {{ m['content'] }} w2\n{% endfor %}w3 "


def _study(folder: str, out, *options: str):
  with pytest.MonkeyPatch.context() as patch:  # 128 positions: one short needle task
    patch.setattr(retrieval_tasks, 'TASKS', {'needle_noise': retrieval_tasks.needle_noise})
    args = ['--checkpoint', folder, '--out', str(out), '--lengths=100', '--samples=1', *options]
    with contextlib.redirect_stdout(StringIO()) as printed:
      report = presses.main(args)
  return out, report, printed.getvalue(), folder


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory):
  folder = write_checkpoint('llama', str(tmp_path_factory.mktemp('llama')))
  with open(os.path.join(folder, 'tokenizer_config.json'), 'w', encoding='utf-8') as f:
    json.dump(dict(chat_template=TEMPLATE, tokenizer_class='PreTrainedTokenizerFast'), f)
  return folder


@pytest.fixture(scope='module')
def study(checkpoint, tmp_path_factory):
  """Every press judged (`--floor=0`), though the model answers nothing right."""
  out = tmp_path_factory.mktemp('presses')
  return _study(checkpoint, out, '--presses=knorm,adakv', '--ratios=0.5', '--floor=0')


def test_every_press_answers_after_one_prefill_and_the_files_say_so(study):
  out, report, printed, _ = study
  (row,) = report['results']
  assert set(row['answers']) == {'none', 'knorm@0.5', 'adakv@0.5'}
  assert row['tokens'] <= 100 + 40  # the context, then the question under the template
  saved = json.loads((out / 'presses.json').read_text())
  assert saved['dropped_tasks'] == {} and saved['kept_tasks'] == ['needle_noise']
  summary = json.loads((out / 'summary.json').read_text())  # what a page commits: no answers
  assert summary == {key: value for key, value in saved.items() if key != 'results'}
  assert summary['curves'] == {'knorm': [0.0], 'adakv': [0.0]}
  table = (out / 'presses.md').read_text()
  assert '| knorm | 0 |' in table and 'Uncompressed: 0% on needle_noise' in table
  assert table.strip() in printed
  # What each head kept at the ratio, per layer: half of each head's (knorm), half of the
  # layer's over its heads (adakv), and the figures drawn.
  knorm, adakv = row['kept']['knorm'], row['kept']['adakv']
  length = len(knorm[0][0])
  assert all(head.count('1') == length // 2 for layer in knorm for head in layer)
  assert all(sum(head.count('1') for head in layer) == 2 * (length // 2) for layer in adakv)
  assert row['needle'] is not None and 0 < row['needle'] < length
  assert (out / 'presses.png').stat().st_size > 10_000 and (
    out / 'kept.png'
  ).stat().st_size > 10_000


def test_a_task_the_model_fails_uncompressed_is_dropped_before_any_press(checkpoint, tmp_path):
  out, report, printed, _ = _study(checkpoint, tmp_path, '--presses=knorm', '--ratios=0.5')
  (row,) = report['results']
  assert row['answers'].keys() == {'none'} and row['correct'] == {'none': False}
  assert 'needle_noise 100: uncompressed 0% < --floor=0.7, dropped' in printed
  table = (out / 'presses.md').read_text()
  assert 'Dropped (uncompressed below the floor): needle_noise (0%)' in table


def test_presses_answer_as_one_batch_as_each_would_alone(study):
  """The study answers the presses of one cache shape at every ratio as rows of one batch (a row
  keeping fewer positions ends in empty entries): each row's greedy ids equal that press's answer
  on its own cache; and a press scored once for all ratios keeps what it keeps at each alone."""
  decoder = sources.load_decoder(study[3])
  assert decoder.tokenizer.chat_template == TEMPLATE  # the study frames prompts with it
  model = decoder.model
  graphdef, state = nnx.split(model)
  prompt = jnp.asarray([np.arange(3, 103) % 50], jnp.int32)  # a 99-token context
  question = jnp.asarray([[5, 6, 7]], jnp.int32)
  settings = dict(length=99, room=12, max_new=8, eos=-1)
  cache, queries = presses._prefill(graphdef, state, prompt, room=12)
  entries = lambda name, ratios: presses._entries(
    graphdef, state, cache, queries, press=get_press(name), ratios=ratios, context=99, prefix=0
  )
  ratios, names = (0.5, 0.875), ('knorm', 'snapkv', 'streaming_llm')
  kept = {name: entries(name, ratios) for name in names}
  for name, (at, ratio) in itertools.product(names, enumerate(ratios)):
    for ours, alone in zip(kept[name][at], entries(name, (ratio,))[0]):
      np.testing.assert_array_equal(ours, alone)
  pairs = [(name, at) for at in range(len(ratios)) for name in names]
  stacked = presses._stacked([kept[name][at] for name, at in pairs])
  together = presses._answer(graphdef, state, cache, stacked, question, **settings)
  alone = [
    presses._answer(graphdef, state, cache, kept[name][at], question, **settings)[0]
    for name, at in pairs
  ]
  np.testing.assert_array_equal(together, np.stack(alone))
  assert len({tuple(map(int, row)) for row in alone}) > 1  # the presses' caches do differ


class _WordsWithBos:
  """A tokenizer with no chat template that opens every text with a BOS (id 2), as Gemma's."""

  chat_template, eos_id = '', 1

  def encode_pieces(self, text: str) -> list[int]:
    return [10 + len(word) for word in text.split()]

  def encode(self, text: str) -> list[int]:
    return [2, *self.encode_pieces(text)]


def test_kvzips_repeat_block_leaves_out_the_tokenizers_bos():
  """Without a template, the BOS the tokenizer opens the context with is its opening (KVzip's
  `prefix`): the repeat block repeats the text after it, never a BOS in mid-sequence."""
  sample = retrieval_tasks.Sample('needle_noise', 'one two three', 'Which?', 'It is', ('7',))
  ids = press_prompts.framed(_WordsWithBos(), sample)
  assert ids['context'] == [2, 13, 13, 15] and ids['prefix'] == 1
  full = press_prompts.padded(ids, 6, len(ids['question']), filler=0)
  assert full['repeat'] == ids['request'] + [13, 13, 15, 0, 0] and 2 not in full['repeat']
