"""Attend decoders with the 2025 mechanisms exported (models/pretrained/fitting.py, writer.py) as
the one transformers architecture that computes each, and back through convert.py.

A tiny random DecoderLM, built from its `config.model` as a workdir builds it, with differential
attention (DiffLlama), latent attention (DeepSeek-V3), latent attention with DeepSeek Sparse
Attention's indexer (DeepSeek-V3.2) or Gated DeltaNet layers under a gated softmax layer with
partial rotary positions (Qwen3-Next), every one in Attend's default 'pairs' rotary layout, is
written as a Hugging Face folder that `transformers.AutoModelForCausalLM` loads alone and that
gives Attend's logits in float64. What no architecture computes is one sentence, and so is the
GGUF format for these architectures. A DeepSeek-V3.2 folder converted into a workdir continues a
prompt as the folder does, and exports back to the folder's tensors.

Tolerances (logits of magnitude about 1): transformers computes the RMSNorms and rotary angles of
these families (and DiffLlama's λ, DeepSeek-V3.2's indexer scores, Qwen3-Next's delta rule and
gated norm) in float32 even in a float64 model, so its logits carry float32 rounding: 1e-5 as
tests/test_diffllama.py and tests/test_deepseek_decoders.py allow, 1e-4 for Qwen3-Next as
tests/test_qwen3_next.py (its float32 delta rule). Measured: at most 5e-7, and 2e-5 for
Qwen3-Next, on logits up to 5.5; the rows left in pairs (or DeepSeek-V3 told rope_interleave=False)
move them by 0.2 to 1.6.
"""

import io
import os

from flax import nnx
import float64
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_deepseek_decoders import CONFIGS

from configs import pretrained_lm
import models
from models import pretrained
from models.pretrained import fitting, formats, writer
from reports import export, prompt_continuation
from training import pretrained_workdir

transformers = pytest.importorskip('transformers', reason='the reference (test extra)')
torch = pytest.importorskip('torch', reason='the reference (test extra)')
VOCAB = 61
IDS = np.random.default_rng(0).integers(0, VOCAB, (2, 12))
_LLAMA_LAYOUT = dict(
  d_model=32, num_heads=4, d_ff=48, dropout_rate=0.0, norm='pre', norm_type='rmsnorm',
  activation='silu', gated_mlp=True, mlp_bias=False, qkv_bias=False, out_bias=False,
  positions='rope', rope_layout='pairs', max_length=64, tie_output=False, output_bias=False,
  scale_embeddings=False,
)  # fmt: skip
_NO = 'only an Attend workdir holds it'
_LATENT = dict(d_k=8, d_v=12, kv_lora_rank=16, rope_head_dim=8, num_layers=2)
# model_type -> (config.model's fields but the Llama layout's, logits' tolerance).
MECHANISMS = {
  # Biased projections: a query or key bias is reordered with its rows.
  'diffllama': (
    dict(attention='differential', num_layers=2, num_kv_heads=2, qkv_bias=True, out_bias=True),
    1e-5,
  ),
  # No query latent: its full-rank query is `q_proj`, which stays as it is (rope_interleave).
  'deepseek_v3': (dict(_LATENT, q_lora_rank=0), 1e-5),
  # Fewer chosen keys (4) than positions: the indexer's choice matters.
  'deepseek_v32': (
    dict(_LATENT, q_lora_rank=24, index_topk=4, index_heads=16, index_head_dim=16), 1e-5
  ),
  # Rotary positions on half of each head, whose query rows lie before its gate rows in
  # `q_proj` (and in its bias); sizes apart from each other (as tests/test_qwen3_next.py's).
  'qwen3_next': (
    dict(
      num_layers=4, layer_pattern='gated_deltanet,gated_deltanet,gated_deltanet,softmax',
      num_kv_heads=2, d_k=8, rope_dims=4, qk_norm=True, output_gate=True, norm_plus_one=True,
      delta_heads=4, delta_key_heads=2, delta_key_dim=8, delta_value_dim=6, qkv_bias=True,
      out_bias=True,
    ),
    1e-4,
  ),
}  # fmt: skip


def _config(**fields) -> dict:
  """A workdir's `config.model` (every field, as configs/ write it)."""
  return dict(models.default_config('decoder_lm', **{**_LLAMA_LAYOUT, **fields}))


def _model(config: dict):
  """The model of `config` in the shapes `models.build` gives it (as train.py builds it), its
  parameters drawn at random with NumPy (eager initialisation compiles each initialiser apart:
  seconds): matrices of unit-variance outputs, vectors (norms, biases, λ, decays) 0.5 +- 0.3,
  so that a scale or bias left out cannot agree by accident."""
  build = lambda: models.build(config, rngs=models.traced_rngs(0), vocab_size=VOCAB, pad_id=0)
  model = nnx.eval_shape(build)
  rng = np.random.default_rng(1)
  for _, variable in nnx.iter_graph(model):
    if isinstance(variable, nnx.Param):
      shape = variable.get_value().shape
      value = rng.standard_normal(shape)
      value = 0.5 + 0.3 * value if len(shape) == 1 else value / np.sqrt(shape[0])
      variable.set_value(value.astype(np.float32))
  return model


def _tokenizer_json() -> str:
  import tokenizers

  words = tokenizers.models.WordLevel({f'w{i}': i for i in range(VOCAB)}, unk_token='w0')
  tokenizer = tokenizers.Tokenizer(words)
  tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
  return tokenizer.to_str()


def _write(model, config: dict, out: str) -> fitting.Fit:
  """What export.py does with a workdir: the fit of its `config.model`, the folder written."""
  fit = fitting.fit(fitting.decoder_arguments(config, VOCAB))
  vocabulary = writer.Vocabulary(_tokenizer_json(), '', None, None, None)
  with writer.staged(out, folder=True) as folder:
    writer.write_folder(folder, fit, model, vocabulary)
  return fit


def _theirs(folder: str) -> np.ndarray:
  model = transformers.AutoModelForCausalLM.from_pretrained(
    folder, dtype=torch.float64, attn_implementation='eager'
  ).eval()
  with torch.no_grad():
    return model(torch.tensor(IDS)).logits.numpy()


def _ours(model) -> np.ndarray:
  with float64.model_in_float64(model) as model64:
    return np.asarray(jax.jit(model64.token_logits)(jnp.asarray(IDS)))  # compiled: faster


@pytest.mark.parametrize('model_type', sorted(MECHANISMS))
def test_a_2025_mechanism_exports_as_its_architecture_and_transformers_gives_its_logits(
  tmp_path, model_type
):
  fields, tolerance = MECHANISMS[model_type]
  config = _config(**fields)
  model = _model(config)
  out = str(tmp_path / 'hf')
  fit = _write(model, config, out)
  assert fit.model_type == model_type
  ours, theirs = _ours(model), _theirs(out)
  assert np.abs(ours).max() > 0.5  # logits of order 1: a wrong row moves them visibly
  np.testing.assert_allclose(ours, theirs, atol=tolerance, rtol=0)
  # The folder's tokenizer is read as written (transformers rebuilds Qwen2's, not Qwen3-Next's).
  assert transformers.AutoTokenizer.from_pretrained(out)('w5 w6 w7')['input_ids'] == [5, 6, 7]


def _one_sentence(error: pytest.ExceptionInfo, *names: str) -> None:
  message = str(error.value)
  assert message.endswith('.') and '\n' not in message and '. ' not in message, message
  assert all(name in message for name in names), message


@pytest.mark.parametrize(
  'fields, words',
  [
    (dict(attention='linear'), ("config.model.attention='linear'", _NO)),
    (dict(attention='deltanet'), ("config.model.attention='deltanet'", _NO)),
    (
      dict(num_layers=2, layer_pattern='deltanet,softmax'),
      ("config.model.layer_pattern='deltanet,softmax'", "its 'deltanet' layers", _NO),
    ),
    # A Gated DeltaNet stack is Qwen3-Next's only with its softmax layers' gate.
    (
      dict(MECHANISMS['qwen3_next'][0], output_gate=False),
      ('config.model.output_gate=False does not fit qwen3_next', _NO),
    ),
    (
      dict(MECHANISMS['deepseek_v32'][0], rope_layout='halves'),
      ("config.model.rope_layout='halves' does not fit deepseek_v32", _NO),
    ),
  ],
)
def test_what_no_architecture_computes_is_one_sentence(fields, words):
  with pytest.raises(ValueError) as error:
    fitting.fit(fitting.decoder_arguments(_config(**fields), VOCAB))
  _one_sentence(error, *words)


@pytest.mark.parametrize('model_type', sorted(MECHANISMS))
def test_gguf_holds_none_of_these_architectures_in_one_sentence(model_type):
  fit = fitting.fit(fitting.decoder_arguments(_config(**MECHANISMS[model_type][0]), VOCAB))
  vocabulary = writer.Vocabulary(_tokenizer_json(), '', 1, 2, 0)
  with pytest.raises(ValueError) as error:
    formats.get_format('gguf').check(fit, vocabulary, None)
  _one_sentence(error, '--format=gguf writes only', f'a {model_type} model', '--format=hf')


def _deepseek_v32_folder(folder: str) -> str:
  """A tiny random DeepSeek-V3.2 (tests/test_deepseek_decoders.py's, 4 keys chosen per query)
  as transformers saves it, with a word tokenizer that splits on spaces."""
  import tokenizers

  torch.manual_seed(0)
  config = transformers.AutoConfig.for_model('deepseek_v32', **CONFIGS['deepseek_v32'])
  transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
  vocab = {f'w{i}': i for i in range(config.vocab_size)}
  tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token='w0'))
  tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
  tokenizer.save(os.path.join(folder, 'tokenizer.json'))
  return folder


def test_a_deepseek_v32_folder_converts_continues_and_exports_back_as_it_was(tmp_path):
  """convert.py's work (the folder as a workdir), generate.py's (greedy tokens, equal to
  transformers' of the folder: Attend's float32 against float64, at a fixed seed, so a near tie
  of two tokens would fail every run, not now and then), export.py's (the folder's tensors, bit
  for bit)."""
  folder = _deepseek_v32_folder(str(tmp_path / 'folder'))
  read, workdir = pretrained.read(folder), str(tmp_path / 'workdir')
  pretrained_workdir.write_workdir(workdir, read, pretrained_lm.converted(read))
  request = prompt_continuation.Request(workdir=workdir, prompt='w5 w6 w7', max_new_tokens=6)
  ours = prompt_continuation.continue_prompt(request, io.StringIO())['ids']
  reference = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64)
  prompt = torch.tensor([[5, 6, 7]])
  with torch.no_grad():
    theirs = reference.eval().generate(
      prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=6,
      min_new_tokens=6, eos_token_id=None, pad_token_id=0,
    )  # fmt: skip
  assert ours == theirs[0, 3:].tolist() and len(set(ours)) > 3  # a text, not one token
  out = str(tmp_path / 'out')
  said = export.export(export.request(workdir, '', 'hf', out, 'f32'))
  assert said.startswith('Wrote step 0 of') and 'deepseek_v32 model' in said
  back = pretrained.read(out)
  assert set(back.tensors) == set(read.tensors) and back.config['index_topk'] == 4
  for name, tensor in read.tensors.items():
    np.testing.assert_array_equal(back.tensors[name], tensor, err_msg=name)
