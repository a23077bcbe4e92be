"""Decoders written back out (models/pretrained/writer.py, gguf_writer.py, export.py) equal
Attend on the way back.

A Hugging Face folder of a tiny random Llama, Gemma 3 and GPT-2 (tests/tiny_decoders.py), and of
Attend's own from-scratch decoders, loaded by `transformers.AutoModelForCausalLM.from_pretrained`
alone, gives Attend's logits in float64 and the same greedy tokens; a converted checkpoint comes
back with its tensors bit for bit. A GGUF file of a workdir converted from a tiny GGUF
(tests/tiny_gguf.py) reads back through Attend's reader with every tensor bit for bit at float32
and within each format's rounding otherwise, with the origin's metadata, or a tokenizer built
anew that gives the same ids; transformers reads it as its origin too, and so a Qwen2 and a
GPT-2 file. A run on Attend's own character vocabulary leaves with a tokenizer.json that gives
its ids. What no format holds, and each fault, is one sentence, and the output path is left as
it was.
"""

import dataclasses
import functools
import json
import os
import shutil

from fine_tunes import train
from flax import nnx
import float64
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tiny_decoders
import tiny_gguf

from benchmarks import export_agreement
from data.pretrained_tokenizer import PretrainedTokenizer
from data.tokenizers import load_tokenizers
from models import DecoderLM, generation, pretrained
from models.pretrained import fitting, gguf_writer, writer
from models.pretrained.gguf_file import read_header
from models.stack_config import StackConfig
from reports import export
from training import layout

transformers = pytest.importorskip('transformers', reason='the reference (test extra)')
torch = pytest.importorskip('torch', reason='the reference (test extra)')
gguf = pytest.importorskip('gguf', reason='writes GGUF files (the gguf extra)')
IDS = np.random.default_rng(0).integers(0, tiny_decoders.VOCAB, (2, 12))
# Allowed difference of float64 logits: GPT-2 is float64 throughout in transformers (float64
# rounding); the Llama family's and Gemma's RMSNorm and rotary angles are float32 there even in a
# float64 model, so its logits carry float32 rounding (tests/test_pretrained_decoders.py: 1.7e-6
# at most measured against 1e-5 allowed).
TOLERANCE = {'gpt2': float64.ATOL}
HALF_FLOAT32 = 1e-5
NEW_TOKENS = 8
# From-scratch decoders that one architecture holds exactly: rotary positions in Attend's own
# 'pairs' layout, RMSNorm and SwiGLU as Llama (with grouped-query heads); learned positions and
# LayerNorm with biases as GPT-2.
SCRATCH = {
  'llama': dict(
    stack=StackConfig(
      num_layers=2, d_model=32, num_heads=4, num_kv_heads=2, d_ff=64, dropout_rate=0.1,
      norm='pre', norm_type='rmsnorm', activation='silu', gated_mlp=True, mlp_bias=False,
      qkv_bias=False, out_bias=False, positions='rope', rope_layout='pairs', max_length=64,
    ),
    tie_output=False, output_bias=False, scale_embeddings=False,
  ),
  'gpt2': dict(
    stack=StackConfig(
      num_layers=2, d_model=32, num_heads=4, d_ff=64, norm='pre', norm_eps=1e-5,
      activation='gelu', positions='learned', max_length=64,
    ),
    tie_output=True, scale_embeddings=False,
  ),
}  # fmt: skip


def _run_export(reference: str, out: str, fmt: str = 'hf', dtype: str = 'f32') -> str:
  """export.py's work: its flags resolved, then the export."""
  return export.export(export.request(reference, '', fmt, out, dtype))


def _one_sentence(error: pytest.ExceptionInfo, *names: str) -> None:
  message = str(error.value)
  assert message.endswith('.') and '\n' not in message and '. ' not in message, message
  assert all(name in message for name in names), message


def _vocabulary(tokenizer_json: str, chat_template: str = '') -> writer.Vocabulary:
  tokenizer = PretrainedTokenizer(tokenizer_json, chat_template=chat_template)
  pad = tokenizer.pad_id if tokenizer.has_pad else None
  return writer.Vocabulary(tokenizer_json, chat_template, tokenizer.bos_id, tokenizer.eos_id, pad)


def _export(model, args: dict, out: str, tokenizer_json: str, **options) -> fitting.Fit:
  fit = fitting.fit(args)
  with writer.staged(out, folder=True) as folder:
    writer.write_folder(folder, fit, model, _vocabulary(tokenizer_json), **options)
  return fit


def _args(model_args: dict, vocab_size: int = tiny_decoders.VOCAB) -> dict:
  """A model's arguments as a workdir's config.model keeps them, read back by the exporter."""
  flat = pretrained.tables.config_fields({**model_args, 'pad_id': 0, 'vocab_size': 0})
  fields = {'name': 'decoder_lm', **flat}
  return fitting.decoder_arguments(fields, vocab_size)


def _assert_transformers_equals_attend(model, folder: str, name: str) -> None:
  """transformers' float64 logits and greedy tokens of `folder`, loaded by `from_pretrained`
  alone, equal Attend's of `model`."""
  theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()
  prompt = IDS[:, :4]
  with torch.no_grad():
    logits = theirs(torch.tensor(IDS)).logits.numpy()
    greedy = theirs.generate(
      torch.tensor(prompt),
      attention_mask=torch.ones(prompt.shape, dtype=torch.long),
      do_sample=False,
      max_new_tokens=NEW_TOKENS,
      min_new_tokens=NEW_TOKENS,
    )[:, prompt.shape[1] :].numpy()
  with float64.model_in_float64(model) as model64:
    ours = model64.token_logits(jnp.asarray(IDS))
    tokens = generation.continue_prompt(
      model64, jnp.asarray(prompt), max_length=NEW_TOKENS, rng=jax.random.key(0), temperature=0.0
    )
  np.testing.assert_allclose(ours, logits, atol=TOLERANCE.get(name, HALF_FLOAT32), rtol=0)
  np.testing.assert_array_equal(np.asarray(tokens), greedy)
  assert len(np.unique(greedy)) > 2  # a text, not one token repeated


@pytest.mark.parametrize('name', ['llama', 'mistral', 'qwen2', 'gemma3_text', 'gpt2'])
def test_a_converted_checkpoint_exports_as_transformers_reads_it(tmp_path, name):
  # transformers builds a Qwen2 folder's tokenizer as Qwen2's byte-level BPE, whatever the folder
  # says (writer.REBUILT_TOKENIZERS): this one has such a vocabulary.
  tokenizer = tiny_gguf.byte_level_tokenizer_json('qwen2') if name == 'qwen2' else ''
  source = tiny_decoders.write_checkpoint(name, str(tmp_path / 'source'), tokenizer_json=tokenizer)
  checkpoint = pretrained.read(source)
  model, _ = pretrained.load_decoder(checkpoint)
  args = pretrained.decoders.decoder_args(checkpoint.config)[0]
  args = _args(args, checkpoint.config['vocab_size'])
  out = str(tmp_path / 'out')
  assert _export(model, args, out, checkpoint.tokenizer_json).model_type == name
  _assert_transformers_equals_attend(model, out, name)
  exported = pretrained.read(out)  # the round trip gives back the checkpoint's tensors
  assert set(exported.tensors) == set(checkpoint.tensors)
  for tensor in checkpoint.tensors:
    np.testing.assert_array_equal(exported.tensors[tensor], checkpoint.tensors[tensor])
  theirs = transformers.AutoTokenizer.from_pretrained(out)
  ours = PretrainedTokenizer(checkpoint.tokenizer_json)
  for text in tiny_gguf.TEXTS if tokenizer else ['w3 w5 w96']:
    assert theirs(text)['input_ids'] == ours.encode(text), text


def test_a_qwen2_folder_holds_only_a_tokenizer_transformers_builds_as_qwen2s():
  stack = dataclasses.replace(SCRATCH['llama']['stack'], qkv_bias=True)  # no output bias: Qwen2
  fit = fitting.fit(_args({**SCRATCH['llama'], 'stack': stack}))
  assert fit.model_type == 'qwen2'
  writer.check_tokenizer(fit, _vocabulary(tiny_gguf.byte_level_tokenizer_json('qwen2')))
  for other in ('llama-bpe', 'gpt2'):  # byte-level BPE split otherwise
    with pytest.raises(ValueError) as error:
      writer.check_tokenizer(fit, _vocabulary(tiny_gguf.byte_level_tokenizer_json(other)))
    _one_sentence(error, 'qwen2 folder', "split by qwen2's pattern", '(BPE)')


@pytest.mark.parametrize('name', sorted(SCRATCH))
def test_a_from_scratch_decoder_exports_as_the_architecture_that_holds_it(tmp_path, name):
  model = DecoderLM(vocab_size=tiny_decoders.VOCAB, pad_id=0, **SCRATCH[name], rngs=nnx.Rngs(0))
  rng = np.random.default_rng(1)
  for _, variable in nnx.iter_graph(model):  # norms away from 1, biases away from 0
    if isinstance(variable, nnx.Param) and variable.get_value().ndim == 1:
      value = variable.get_value()
      variable.set_value(value + 0.1 * rng.standard_normal(value.shape).astype(np.float32))
  words = tiny_decoders.write_checkpoint('llama', str(tmp_path / 'words'))
  with open(os.path.join(words, 'tokenizer.json'), encoding='utf-8') as f:
    tokenizer_json = f.read()
  out = str(tmp_path / 'out')
  assert _export(model, _args(SCRATCH[name]), out, tokenizer_json).model_type == name
  _assert_transformers_equals_attend(model, out, name)


def test_sharded_weights_read_back_as_one_file(tmp_path):
  source = tiny_decoders.write_checkpoint('llama', str(tmp_path / 'source'))
  checkpoint = pretrained.read(source)
  model, _ = pretrained.load_decoder(checkpoint)
  args = _args(pretrained.decoders.decoder_args(checkpoint.config)[0])
  _export(model, args, str(tmp_path / 'sharded'), checkpoint.tokenizer_json, shard_bytes=20_000)
  files = os.listdir(tmp_path / 'sharded')
  assert pretrained.files.INDEX in files and sum(f.endswith('.safetensors') for f in files) > 2
  sharded = pretrained.read(str(tmp_path / 'sharded')).tensors
  for tensor in checkpoint.tensors:
    np.testing.assert_array_equal(sharded[tensor], checkpoint.tensors[tensor])


@pytest.mark.parametrize(
  'change, field',
  [
    (dict(attention='linear'), "attention='linear'"),
    (dict(attention='sigmoid'), "attention='sigmoid'"),
    (dict(positions='alibi'), "positions='alibi'"),
    (dict(positions='t5'), "positions='t5'"),
    (dict(window=4, sink_tokens=2), 'sink_tokens=2'),
    (dict(attention='linear', feature_map='hedgehog'), "attention='linear'"),
    (dict(norm_type='layernorm'), "norm_type='layernorm'"),
  ],
)
def test_what_no_architecture_holds_is_one_sentence_naming_the_field(change, field):
  args = _args(SCRATCH['llama'])
  args['stack'] = dataclasses.replace(args['stack'], **change)
  with pytest.raises(ValueError) as error:
    fitting.fit(args)
  _one_sentence(error, f'config.model.{field}', 'Hugging Face folder', 'GGUF')


def _converted(base, origin: str) -> tuple[str, str]:
  """`(workdir, origin)`: the workdir convert.py makes of the GGUF file `origin`."""
  from configs import pretrained_lm
  from training import pretrained_workdir

  checkpoint = pretrained.read(origin)
  pretrained_workdir.write_workdir(
    str(base / 'wd'), checkpoint, pretrained_lm.converted(checkpoint)
  )
  return str(base / 'wd'), origin


def _transformers_reads(gguf_path: str, source) -> None:
  """transformers reads the GGUF file (`from_pretrained(..., gguf_file=)`) as the checkpoint
  `source`: every tensor bit for bit, and its tokenizer gives the same ids."""
  folder, name = os.path.split(gguf_path)
  model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
  state = {k: v.numpy() for k, v in model.state_dict().items()}
  for tensor, value in source.tensors.items():
    np.testing.assert_array_equal(state[tensor], value, err_msg=tensor)
  theirs = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
  ours = PretrainedTokenizer(source.tokenizer_json)
  for text in tiny_gguf.TEXTS:
    assert theirs(text)['input_ids'] == ours.encode(text), text


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
  """A workdir convert.py made of a tiny Llama GGUF (grouped-query heads, a byte-level BPE
  vocabulary that adds <bos>), and that file."""
  base = tmp_path_factory.mktemp('export')
  return _converted(base, tiny_gguf.write_llama(str(base / 'llama.gguf'), {}))


def test_a_gguf_export_reads_back_bit_for_bit_at_float32(workdir, tmp_path):
  path, origin = workdir
  source = pretrained.read(origin)
  # Each format's rounding: half a unit in the last place of float16 (11 significant bits) and
  # bfloat16 (8); Q8_0 keeps 8-bit steps of a block's largest value (at most the tensor's) / 127.
  bounds = dict(f32=lambda w: 0, f16=lambda w: 2**-11 * np.abs(w) + 1e-7)
  bounds |= dict(bf16=lambda w: 2**-8 * np.abs(w), q8_0=lambda w: np.abs(w).max() / 127)
  for dtype, bound in bounds.items():
    out = str(tmp_path / f'{dtype}.gguf')
    _run_export(path, out, 'gguf', dtype=dtype)
    back = pretrained.read(out)
    assert back.config == source.config and back.tokenizer_json == source.tokenizer_json
    for name, tensor in source.tensors.items():
      assert np.all(np.abs(back.tensors[name] - tensor) <= bound(tensor)), (dtype, name)
    assert read_header(out).metadata['general.file_type'] == gguf_writer.TYPES[dtype][1]
  # Without its origin, the tokenizer is written from tokenizer.json, and gives the same ids.
  moved = origin + '.moved'
  os.rename(origin, moved)
  try:
    out = str(tmp_path / 'rebuilt.gguf')
    _run_export(path, out, 'gguf')
  finally:
    os.rename(moved, origin)
  ours, theirs = (PretrainedTokenizer(pretrained.read(p).tokenizer_json) for p in (out, origin))
  for text in tiny_gguf.TEXTS:
    assert ours.encode(text) == theirs.encode(text), text
  _transformers_reads(out, source)  # the metadata written anew, read by another reader


def test_a_gemma3_gguf_export_reads_back_bit_for_bit_with_its_own_tokenizer(tmp_path):
  """Gemma 3 (a SentencePiece vocabulary, sliding-window layers, norms stored as 1 + w): the
  file's metadata is copied, so its tokenizer comes back as it was; without that file there is
  no byte-level tokenizer.json to write one from, and the refusal says so."""
  path, origin = _converted(tmp_path, tiny_gguf.write_gemma3(str(tmp_path / 'gemma3.gguf')))
  out = str(tmp_path / 'back.gguf')
  _run_export(path, out, 'gguf')
  source, back = pretrained.read(origin), pretrained.read(out)
  assert back.config == source.config and back.tokenizer_json == source.tokenizer_json
  for name, tensor in source.tensors.items():
    np.testing.assert_array_equal(back.tensors[name], tensor, err_msg=name)
  _transformers_reads(out, source)
  # A fine-tune's workdir names its start in config.init_from (the file, or a workdir made of
  # it): the file's metadata is found through it.
  for count, start in enumerate((origin, path)):
    tuned = str(tmp_path / f'tuned_{count}')
    shutil.copytree(path, tuned)
    os.remove(os.path.join(tuned, layout.PRETRAINED_FILE))
    with open(os.path.join(tuned, 'config.json'), encoding='utf-8') as f:
      config = json.load(f)
    with open(os.path.join(tuned, 'config.json'), 'w', encoding='utf-8') as f:
      json.dump({**config, 'init_from': start}, f)
    _run_export(tuned, tuned + '.gguf', 'gguf')
    assert pretrained.read(tuned + '.gguf').tokenizer_json == source.tokenizer_json
  os.rename(origin, origin + '.moved')
  with pytest.raises(ValueError) as error:
    _run_export(path, str(tmp_path / 'no.gguf'), 'gguf')
  _one_sentence(error, 'byte-level BPE tokenizer.json', '--format=hf')
  assert not os.path.exists(tmp_path / 'no.gguf')


def test_a_workdir_exports_a_folder_transformers_and_its_tokenizer_read(workdir, tmp_path):
  path, origin = workdir
  out = str(tmp_path / 'hf')
  said = _run_export(path, out, 'hf')
  assert said.startswith('Wrote step 0 of') and 'llama' in said
  ours = PretrainedTokenizer(pretrained.read(origin).tokenizer_json)
  theirs = transformers.AutoTokenizer.from_pretrained(out)
  for text in tiny_gguf.TEXTS:
    assert theirs(text)['input_ids'] == ours.encode(text), text
  config = json.loads(open(os.path.join(out, 'config.json'), encoding='utf-8').read())
  assert config['architectures'] == ['LlamaForCausalLM'] and config['bos_token_id'] == 1
  model = transformers.AutoModelForCausalLM.from_pretrained(out)
  state = {k: v.numpy() for k, v in model.state_dict().items()}
  for name, tensor in pretrained.read(origin).tensors.items():
    np.testing.assert_array_equal(state[name], tensor, err_msg=name)
  # The benchmark that checks a real export (docs/export.md), on this one: float32 logits on
  # the held-out split within float32 rounding, the same greedy tokens.
  agreed = export_agreement.compare(path, out, tiny_gguf.TEXTS[:1], windows=2, max_new=8)
  assert agreed['windows'][0] == 2 and agreed['max_abs_difference'] < 1e-4
  assert agreed['same_next_token'] == 1.0
  assert [row['equal'] for row in agreed['greedy']] == [True] and agreed['greedy'][0]['attend']
  for dtype in ('f32', 'q8_0'):  # the f32 file holds the folder's tensors; Q8_0 rounds them
    gguf = str(tmp_path / f'{dtype}.gguf')
    _run_export(path, gguf, 'gguf', dtype=dtype)
    read = export_agreement.gguf_against_folder(gguf, out)
    assert read['tensors'] == len(pretrained.read(origin).tensors), read
    assert (read['differ'] == {}) == (dtype == 'f32'), read


def _tree(path: str):
  return sorted((root, sorted(files)) for root, _, files in os.walk(path))


def test_each_fault_is_one_sentence_and_leaves_the_output_as_it_was(workdir, tmp_path, monkeypatch):
  path, _ = workdir
  request = lambda out, **kw: functools.partial(
    _run_export, kw.pop('workdir', path), str(out), **kw
  )
  full = tmp_path / 'full'
  full.mkdir()
  (full / 'keep.txt').write_text('mine')
  empty = tmp_path / 'empty'
  (empty / 'checkpoints').mkdir(parents=True)
  alibi = tmp_path / 'alibi'
  alibi.mkdir()
  config = json.loads(open(os.path.join(path, 'config.json'), encoding='utf-8').read())
  config['model']['positions'] = 'alibi'
  (alibi / 'config.json').write_text(json.dumps(config))
  os.symlink(os.path.join(path, 'checkpoints'), alibi / 'checkpoints')
  os.symlink(os.path.join(path, 'vocab'), alibi / 'vocab')
  before = _tree(tmp_path)
  faults = [
    (request(full), (ValueError,), ('--out=', 'exists and is not empty')),
    (request(tmp_path / 'a', workdir=str(empty)), (FileNotFoundError,), ('No checkpoint in',)),
    (request(tmp_path / 'b', workdir=str(alibi)), (ValueError,), ("positions='alibi'",)),
    (request(tmp_path / 'c', fmt='gguf', dtype='q2'), (ValueError,), ("--dtype='q2'",)),
  ]
  for fault, kinds, words in faults:
    with pytest.raises(kinds) as error:
      fault()
    _one_sentence(error, *words)
  assert _tree(tmp_path) == before

  # A disk that fills part-way through the weights: one sentence, and the staged files removed.
  def no_space(self, *args, **kwargs):
    raise OSError(28, 'No space left on device')

  monkeypatch.setattr(gguf.GGUFWriter, 'write_tensor_data', no_space)
  real = writer._write_safetensors

  def half_written(file, tensors, names):
    real(file, tensors, names[: len(names) // 2])
    no_space(None)

  monkeypatch.setattr(writer, '_write_safetensors', half_written)
  for fmt in ('hf', 'gguf'):
    with pytest.raises(ValueError) as error:
      request(tmp_path / fmt, fmt=fmt)()
    _one_sentence(error, str(tmp_path / fmt), 'No space left on device', 'nothing was written')
  assert _tree(tmp_path) == before


def test_a_run_on_its_own_vocabulary_exports_with_a_tokenizer_that_gives_its_ids(tmp_path):
  """configs/gpt_text.py in the shape GPT-2 holds (learned positions, no output bias, embeddings
  not scaled), trained on a character vocabulary: the folder's tokenizer gives the pipeline's
  ids, transformers gives Attend's logits and greedy tokens; GGUF has no tokenizer for it."""
  from configs import gpt_text
  import models

  text = tmp_path / 'book.txt'
  text.write_text('It was the best of times, it was the worst of times.\n' * 40)
  config = gpt_text.get_config()
  config.model = models.default_config(
    'decoder_lm', num_layers=1, d_model=16, num_heads=2, d_ff=32, max_length=64,
    positions='learned', output_bias=False, scale_embeddings=False,
  )  # fmt: skip
  config.dataset.update(text_path=str(text), seq_length=32, batch_size=8, eval_batch_size=8)
  config.update(num_train_steps=2, checkpoint_every_steps=2, eval_every_steps=0, warmup_steps=1)
  config.update(num_eval_decode=0, eval_at_start=False)
  workdir, out = str(tmp_path / 'run'), str(tmp_path / 'hf')
  train(config, workdir)
  said = _run_export(workdir, out, 'hf')
  assert said.startswith('Wrote step 2 of') and 'gpt2 model' in said
  ours = load_tokenizers(layout.vocab_dir(workdir))[0]
  theirs = transformers.AutoTokenizer.from_pretrained(out)
  for sample in tiny_gguf.TEXTS:
    assert theirs(sample)['input_ids'] == ours.encode(sample), sample
  agreed = export_agreement.compare(workdir, out, ['It was the'], windows=2, max_new=8)
  assert agreed['windows'] == [2, 32] and agreed['max_abs_difference'] < 1e-5
  assert agreed['same_next_token'] == 1.0
  assert [row['equal'] for row in agreed['greedy']] == [True] and agreed['greedy'][0]['attend']
  assert agreed['greedy'][0]['same_prompt_ids']
  with pytest.raises(ValueError) as error:
    _run_export(workdir, str(tmp_path / 'x.gguf'), 'gguf')
  _one_sentence(error, '--format=hf')


@pytest.mark.parametrize('model_type', ['qwen2', 'gpt2'])
def test_a_qwen2_or_gpt2_gguf_export_reads_back_in_attend_and_transformers(tmp_path, model_type):
  """Qwen2 (biases on its queries, keys and values; halves rotated as llama.cpp rotates them, so
  no rows reordered) and GPT-2 (a fused c_attn, block matrices stored transposed, learned
  positions), each from a Hugging Face folder with a byte-level BPE vocabulary split as its
  family splits, exported to GGUF: Attend's reader gives back the same model and every tensor
  bit for bit, and so does transformers', with the same ids."""
  tokenizer = tiny_gguf.byte_level_tokenizer_json(model_type)  # its pre-tokenizer's GGUF name
  # transformers 5 reads a gpt2 file's context length into no field its GPT-2 reads, so it
  # reads only files of GPT-2's own 1,024 positions.
  positions = dict(n_positions=1024) if model_type == 'gpt2' else {}
  folder = tiny_decoders.write_checkpoint(
    model_type, str(tmp_path / 'folder'), tokenizer_json=tokenizer, **positions
  )
  path, _ = _converted(tmp_path, folder)
  out = str(tmp_path / f'{model_type}.gguf')
  _run_export(path, out, 'gguf')
  assert read_header(out).metadata['general.architecture'] == model_type
  source, back = pretrained.read(folder), pretrained.read(out)
  ours, theirs = (pretrained.decoders.decoder_args(c.config)[0] for c in (source, back))
  assert fitting.differences(ours, theirs) == []
  # GPT-2's tied head is written again as output.weight, as llama.cpp's converter writes it.
  head = (
    {'lm_head.weight': source.tensors['transformer.wte.weight']} if model_type == 'gpt2' else {}
  )
  assert set(back.tensors) == set(source.tensors) | set(head)
  for name, tensor in {**source.tensors, **head}.items():
    np.testing.assert_array_equal(back.tensors[name], tensor, err_msg=name)
  ours, theirs = (PretrainedTokenizer(c.tokenizer_json) for c in (source, back))
  for text in tiny_gguf.TEXTS:  # digits tell Qwen2's split from Llama 3's
    assert ours.encode(text) == theirs.encode(text), text
  _transformers_reads(out, source)
