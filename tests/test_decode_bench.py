"""benchmarks/decode_bench and decoding_searches: the uncached search produces the tokens of the
cached `generate` (for the language model: `continue_prompt`), so the speed comparison is between
two ways of producing the same output; the flax.linen peer's cached decoder produces the tokens of
its own uncached forward and, with Attend's weights, Attend's tokens, and the bench times it beside
Attend.

That Seq2Seq's `decode_step` scanned over a prefix, which the uncached callback runs, reproduces
`__call__`'s teacher-forced logits is tested in test_seq2seq.py."""

import functools

from conftest import build_model
from flax import nnx
import jax
import numpy as np
import pytest

from benchmarks import decode_bench, decoding_searches, linen_peer
from configs import default
from models.generation import continue_prompt, generate
from models.language import DecoderLM
from models.seq2seq import Seq2Seq


def _rngs(seed: int = 0) -> nnx.Rngs:
  """'rbg' keys: their initialisers compile faster on CPU than threefry's."""
  return nnx.Rngs(params=jax.random.key(seed, impl='rbg'))


# The layer sizes of test_transformer and test_seq2seq, so their compiled initialisers are reused;
# one Transformer layer per stack keeps the four searches quick to compile. A tied output layer
# makes a random Transformer repeat its input token forever, which would hide a decoder that
# ignores the history: untied here.
TINY = {
  'transformer': lambda: build_model(
    'transformer',
    input_vocab_size=11,
    output_vocab_size=13,
    pad_id=0,
    num_layers=1,
    d_model=8,
    num_heads=2,
    d_k=3,
    d_v=5,
    d_ff=10,
    tie_output=False,
    rngs=_rngs(),
  ),
  'seq2seq': lambda: Seq2Seq(
    input_vocab_size=12, output_vocab_size=12, pad_id=0, embed_dim=16, hidden_dim=16, rngs=_rngs()
  ),
}
# Source padding (0) in the second and third examples.
SRC = np.array([[3, 4, 5, 6, 7, 8], [9, 10, 3, 0, 0, 0], [4, 5, 0, 0, 0, 0]], np.int32)
LENGTH = 7


@pytest.mark.parametrize('beam_size', (1, 4))
@pytest.mark.parametrize('family', sorted(TINY))
def test_uncached_search_generates_what_generate_does(family, beam_size):
  """Greedy and beam 4 without a cache give the tokens of the cached `generate`, over the full
  length (EOS never occurs, as in the benchmark); the tokens change along every sequence, so a
  decoder that misplaces or drops earlier tokens would show."""
  model = TINY[family]()
  expected = np.asarray(
    generate(
      model,
      SRC,
      max_length=LENGTH,
      beam_size=beam_size,
      bos_id=decoding_searches.BOS_ID,
      eos_id=decoding_searches.NEVER_EOS,
      pad_id=decoding_searches.PAD_ID,
    )
  )
  uncached = decoding_searches.search(
    model,
    SRC,
    cached=False,
    method='greedy' if beam_size == 1 else 'beam',
    beam_size=beam_size,
    max_length=LENGTH,
  )
  np.testing.assert_array_equal(uncached, expected)
  assert np.all(np.any(expected[:, 1:] != expected[:, :-1], axis=1))


def _tiny_lm() -> DecoderLM:
  """Untied for the reason above; a vocabulary of 7 puts several tokens in every top-p nucleus."""
  return build_model(
    'decoder_lm',
    vocab_size=7,
    pad_id=0,
    num_layers=1,
    d_model=8,
    num_heads=2,
    d_ff=10,
    tie_output=False,
    rngs=_rngs(),
  )


PROMPT = np.array([[3, 4, 5, 6, 3], [6, 5, 4, 3, 3], [4, 4, 6, 5, 4]], np.int32)


def test_lm_searches_continue_the_prompt_as_continue_prompt_does():
  """For the language model, greedy and sampled search (the benchmark's temperature, top-p and
  key) give the tokens of the cached `continue_prompt` with and without the cache. Sampling is
  compared exactly: cached and uncached logits differ by float rounding only, which could change a
  draw only if it fell within that rounding of a boundary, and with these fixed keys none does.
  The sample differs from the greedy continuation, so sampling is exercised, and the tokens change
  along every row."""
  model = _tiny_lm()
  outputs = {}
  for method, settings in (
    ('greedy', dict(temperature=0.0)),
    ('sample', decoding_searches.SAMPLING),
  ):
    expected = np.asarray(
      continue_prompt(
        model,
        PROMPT,
        max_length=LENGTH,
        rng=jax.random.key(decoding_searches.SAMPLE_SEED),
        eos_id=decoding_searches.NEVER_EOS,
        pad_id=decoding_searches.PAD_ID,
        **settings,
      )
    )
    for cached in (True, False):
      ids = decoding_searches.search(model, PROMPT, cached=cached, method=method, max_length=LENGTH)
      np.testing.assert_array_equal(ids, expected, err_msg=f'{method}, cached={cached}')
    assert np.all(np.any(expected[:, 1:] != expected[:, :-1], axis=1)), method
    outputs[method] = expected
  assert np.any(outputs['sample'] != outputs['greedy'])


# The Linen peer mirrors d_k = d_v = d_model / num_heads only; untied for the reason above.
PEER_CONFIG = dict(
  input_vocab_size=11,
  output_vocab_size=13,
  num_encoder_layers=1,
  num_decoder_layers=1,
  d_model=8,
  num_heads=2,
  d_ff=10,
  dropout_rate=0.1,
  attention_dropout_rate=0.0,
  share_embeddings=False,
  tie_output=False,
)


def test_linen_peer_decodes_as_its_uncached_forward_and_as_attend():
  """The Linen peer's cached greedy search (wmt-style `'cache'` collection, one `apply` per token)
  picks, at every step, the argmax of its own uncached teacher-forced forward over the tokens it
  produced, so uncached greedy decoding gives the same ids; with Attend's weights they are
  Attend's `generate` tokens. Source padding in two rows; the tokens change along every row."""
  c = PEER_CONFIG
  attend = build_model(
    'transformer',
    input_vocab_size=c['input_vocab_size'],
    output_vocab_size=c['output_vocab_size'],
    pad_id=0,
    num_layers=1,
    d_model=c['d_model'],
    num_heads=c['num_heads'],
    d_ff=c['d_ff'],
    tie_output=False,
    rngs=_rngs(3),
  )  # seed 3: no row repeats one token
  params = linen_peer.params_from_attend(
    nnx.to_pure_dict(nnx.state(attend, nnx.Param)), c['num_heads']
  )
  cached = linen_peer.Transformer(c, cached=True, max_length=LENGTH)
  ids = np.asarray(
    jax.jit(
      functools.partial(
        linen_peer.greedy_search, cached, max_length=LENGTH, eos_id=decoding_searches.NEVER_EOS
      )
    )(params, SRC)
  )
  decoder_inputs = np.concatenate(
    [np.full((len(SRC), 1), decoding_searches.BOS_ID), ids[:, :-1]], 1
  )
  logits = jax.jit(linen_peer.Transformer(c).apply)({'params': params}, SRC, decoder_inputs)
  np.testing.assert_array_equal(np.argmax(logits, axis=-1), ids)
  expected = generate(
    attend,
    SRC,
    max_length=LENGTH,
    bos_id=decoding_searches.BOS_ID,
    eos_id=decoding_searches.NEVER_EOS,
    pad_id=decoding_searches.PAD_ID,
  )
  np.testing.assert_array_equal(ids, expected)
  assert np.all(np.any(ids[:, 1:] != ids[:, :-1], axis=1))


def test_bench_times_the_linen_row_beside_attends(monkeypatch):
  """At a tiny size the greedy row times Attend's cached search and the Linen peer's, reports
  their ratio and that they produced the same tokens, and leaves the skipped variant empty."""
  tiny = decode_bench.Bench(
    default,
    dict(input_vocab_size=11, output_vocab_size=13),
    ('greedy',),
    dict(d_model=8, num_heads=2, d_ff=10, num_layers=1, tie_output=False),
  )
  monkeypatch.setitem(decode_bench.BENCHES, 'tiny', tiny)
  [row] = decode_bench.main(
    ['--models=tiny', '--batch=3', '--length=5', '--repeats=1', '--variants=cached,linen']
  )
  assert row['cached_s'] > 0 and row['linen_s'] > 0 and row['uncached_s'] is None
  assert row['x_linen'] == pytest.approx(row['linen_s'] / row['cached_s'])
  assert row['linen_tokens_per_s'] == pytest.approx(3 * 5 / row['linen_s'])
  assert row['linen_agreement'] == 1.0
  assert row['speedup'] is None and row['meets_target'] is None
