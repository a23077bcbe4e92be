"""studies/streaming.py on a tiny random Llama checkpoint: each way's per-token losses against
cached decoding token by token and against transformers, the first-token mass against
transformers' attention weights, and the study end to end as a user runs it."""

import json
import os

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_decoders import VOCAB, write_checkpoint

from models import pretrained
from studies import streaming

pytest.importorskip('transformers', reason='builds the tiny checkpoint (test extra)')

TOKENS, CACHE = 40, 12


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
  """The tiny Llama (4 query heads, 2 key/value heads, rope), its folder, a text of its words
  and the stream's ids."""
  folder = write_checkpoint('llama', str(tmp_path_factory.mktemp('llama')))
  words = np.random.default_rng(0).integers(3, VOCAB, 60)
  text = os.path.join(folder, 'words.txt')
  with open(text, 'w', encoding='utf-8') as f:
    f.write(' '.join(f'w{i}' for i in words))
  model, _ = pretrained.load_decoder(pretrained.read(folder))
  return dict(folder=folder, text=text, model=model, ids=words[:TOKENS].astype(np.int32))


def _decoded_nll(model: nnx.Module, ids: np.ndarray) -> np.ndarray:
  """Per-token losses of decoding `ids [T]` one token at a time through the model's cache."""
  graphdef, state = nnx.split(model)

  @jax.jit
  def run(state, ids):
    model = nnx.merge(graphdef, state)
    cache = model.init_decode_cache(ids[None, :1], max_length=ids.shape[0] - 1)

    def step(cache, xs):
      logits, cache = model.decode_step(xs[0][None], xs[1], cache)
      return cache, logits[0]

    steps = jnp.arange(ids.shape[0] - 1, dtype=jnp.int32)
    _, logits = jax.lax.scan(step, cache, (ids[:-1], steps))  # [T-1, V]
    return -jnp.take_along_axis(jax.nn.log_softmax(logits), ids[1:, None], -1)[:, 0]

  return np.asarray(run(state, jnp.asarray(ids)))


@pytest.mark.parametrize('kept', [0, 3])
def test_each_full_pass_equals_decoding_the_stream_through_its_cache(tiny, kept):
  """Dense: every earlier token; a window of CACHE - kept latest tokens and `kept` first ones:
  the ring-buffer cache evicts past the window as the stream outgrows it."""
  model, ids = tiny['model'], tiny['ids']
  dense = streaming.next_token_nll(model)(ids[None])[0]
  np.testing.assert_allclose(dense, _decoded_nll(model, ids), atol=2e-5)
  windowed = streaming.with_cache(model, CACHE - kept, kept)
  losses = streaming.next_token_nll(windowed)(ids[None])[0]
  np.testing.assert_allclose(losses, _decoded_nll(windowed, ids), atol=2e-5)
  # Within the cache every way sees every token; past it they differ.
  np.testing.assert_allclose(losses[: CACHE - 1], dense[: CACHE - 1], atol=2e-5)
  assert np.abs(losses[CACHE:] - dense[CACHE:]).max() > 1e-3


def _reference(folder: str):
  import torch
  import transformers

  model = transformers.AutoModelForCausalLM.from_pretrained(
    folder, attn_implementation='eager', dtype=torch.float32
  )
  return model.eval()


def test_dense_and_recomputed_losses_and_the_first_token_mass_equal_transformers(tiny):
  import torch

  reference, ids = _reference(tiny['folder']), tiny['ids']
  with torch.no_grad():
    out = reference(torch.tensor(ids[None]).long(), output_attentions=True)
  log_probs = torch.log_softmax(out.logits[0, :-1], -1).numpy()
  dense = -log_probs[np.arange(TOKENS - 1), ids[1:]]
  losses = streaming.next_token_nll(tiny['model'])
  np.testing.assert_allclose(losses(ids[None])[0], dense, atol=2e-5)
  targets = np.array([CACHE, 17, TOKENS - 1])
  with torch.no_grad():
    windows = torch.tensor(np.stack([ids[t - CACHE : t] for t in targets])).long()
    last = torch.log_softmax(reference(windows).logits[:, -1], -1).numpy()
  recomputed = streaming.recompute_nll(losses, ids, targets, CACHE, batch=2)
  np.testing.assert_allclose(recomputed, -last[np.arange(3), ids[targets]], atol=2e-5)
  assert np.abs(recomputed - dense[targets - 1]).max() > 1e-3  # a shorter context
  weights = np.stack([w[0].numpy() for w in out.attentions])  # [L, N, T, T]
  np.testing.assert_allclose(
    streaming.first_token_mass(tiny['model'], ids), weights[:, :, 1:, 0].mean(-1), atol=1e-6
  )


def test_the_study_writes_its_table_and_figure(tiny, tmp_path):
  out = str(tmp_path / 'streaming')
  args = ['--checkpoint', tiny['folder'], '--text', tiny['text'], '--out', out]
  sizes = ['--tokens', str(TOKENS), '--cache', str(CACHE), '--every', '5']
  result = streaming.main([*args, *sizes, '--kept', '0,2'])
  with open(os.path.join(out, 'streaming.json'), encoding='utf-8') as f:
    assert json.load(f) == json.loads(json.dumps(result))
  assert os.path.getsize(os.path.join(out, 'streaming.png')) > 10_000
  assert list(result['perplexity']) == ['dense', 'window', 'kept 2', 'recompute']
  assert result['recompute']['targets'] == list(range(CACHE, TOKENS, 5))
  dense = np.asarray(result['losses']['dense'])
  assert result['perplexity']['dense']['past_cache'] == pytest.approx(
    np.exp(dense[CACHE - 1 :].mean()), rel=1e-4
  )
  assert np.asarray(result['first_token_mass']).shape == (2, 4)
  with pytest.raises(ValueError, match="--text='absent.txt' is not a file"):
    streaming.main(['--checkpoint', tiny['folder'], '--text', 'absent.txt', '--out', out])
  with pytest.raises(ValueError, match='has 60 tokens; --tokens=100 asks for more'):
    streaming.main([*args, '--tokens', '100', '--cache', str(CACHE), '--kept', '2'])
