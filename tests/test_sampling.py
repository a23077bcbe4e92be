"""Sampling: filter_logits against hand-computed top-k / nucleus sets, sample_search's frequencies,
seeding, EOS and per-row first tokens on hand-written toy models, and continue_prompt's contract."""

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_decoding import BOS, EOS, IDS, PAD, VOCAB, A, first_order, second_order

from models.decoding import beam_search, greedy_search, sample_search
from models.generation import continue_prompt
from models.sampling import filter_logits

NUCLEUS = np.array([0.5, 0.3, 0.15, 0.05])  # sorted, so the kept sets are easy to read


def _fixed(probs):
  """A model that predicts `probs` at every step, whatever came before."""
  logits = jnp.log(jnp.asarray(probs, jnp.float32))
  return lambda ids, step, cache: (jnp.broadcast_to(logits, (ids.shape[0], len(probs))), cache)


def _successor(ids, step, cache):
  """A deterministic model: the next token is the previous one plus one (mod VOCAB)."""
  return jnp.where(jnp.arange(VOCAB) == (ids[:, None] + 1) % VOCAB, 0.0, -1e9), cache


def _kept(logits) -> set[int]:
  """The ids `filter_logits` kept: those with a finite logit."""
  return set(np.flatnonzero(np.isfinite(np.asarray(logits))).tolist())


@pytest.mark.parametrize(
  'p, kept',
  [
    (0.3, {0}),
    (0.5, {0}),
    (0.6, {0, 1}),
    (0.8, {0, 1}),
    (0.81, {0, 1, 2}),
    (0.96, {0, 1, 2, 3}),
    (1.0, {0, 1, 2, 3}),
  ],
)
def test_top_p_keeps_the_smallest_set_reaching_p(p, kept):
  """probs .5 .3 .15 .05: the mass before each token is 0, .5, .8, .95; a token stays while that
  is < p. Row 1 holds the same probabilities in another order, so kept ids must follow them."""
  perm = np.array([2, 0, 3, 1])  # row 1's token perm[i] has probability NUCLEUS[i]
  row1 = np.empty(4)
  row1[perm] = NUCLEUS
  logits = np.log(np.stack([NUCLEUS, row1])).astype(np.float32)
  out = np.asarray(filter_logits(logits, top_p=p))
  assert _kept(out[0]) == kept
  assert _kept(out[1]) == {int(perm[i]) for i in kept}
  np.testing.assert_array_equal(out[0][sorted(kept)], logits[0][sorted(kept)])  # unchanged


def test_top_k_keeps_exactly_k():
  """The k largest logits stay unchanged; a tie at the k-th value keeps the lower ids, exactly k;
  k >= V keeps all."""
  logits = jnp.array([[1.0, 3.0, 2.0, 0.0], [2.0, 2.0, 5.0, 2.0]])
  out = filter_logits(logits, top_k=2)
  assert _kept(out[0]) == {1, 2} and _kept(out[1]) == {0, 2}
  np.testing.assert_array_equal(out[0, 1:3], [3.0, 2.0])
  assert _kept(filter_logits(logits, top_k=3)[1]) == {0, 1, 2}
  for k in (0, 4, 9):
    np.testing.assert_array_equal(filter_logits(logits, top_k=k), logits)


def test_top_k_then_top_p_on_the_renormalised_rest():
  """top_k=2 leaves .5 .3, renormalised .625 .375: p=.6 keeps only token 0, although the first
  token's original mass .5 is below .6. top_k=3 leaves .526 .316 .158: p=.9 keeps all three."""
  logits = np.log(NUCLEUS).astype(np.float32)
  assert _kept(filter_logits(logits, top_p=0.6)) == {0, 1}
  assert _kept(filter_logits(logits, top_k=2, top_p=0.6)) == {0}
  assert _kept(filter_logits(logits, top_k=3, top_p=0.9)) == {0, 1, 2}
  assert _kept(filter_logits(logits, top_k=3, top_p=0.8)) == {0, 1}


def test_top_k_one_sampling_equals_greedy():
  """With one token left, sampling at any temperature (and temperature 0) is greedy search."""
  fn, _ = second_order(0)  # conditioned on the last two tokens, the older one in the cache
  kwargs = dict(batch_size=3, max_length=6, **IDS)
  cache = {'prev': jnp.full((3,), BOS)}
  greedy = greedy_search(fn, cache, **kwargs)
  for seed, temperature in zip(range(4), (0.5, 1.0, 3.0, 10.0)):
    ids = sample_search(
      fn, cache, rng=jax.random.key(seed), temperature=temperature, top_k=1, **kwargs
    )
    np.testing.assert_array_equal(ids, greedy)
  ids = sample_search(fn, cache, rng=jax.random.key(0), temperature=0.0, **kwargs)
  np.testing.assert_array_equal(ids, greedy)


def _frequencies(ids, vocab=3):
  """How often each token occurs among all the draws."""
  return np.bincount(np.asarray(ids).ravel(), minlength=vocab) / np.asarray(ids).size


@pytest.mark.parametrize(
  'settings, want',
  [
    (dict(temperature=1.0), [0.6, 0.3, 0.1]),
    (dict(temperature=0.5), np.array([0.36, 0.09, 0.01]) / 0.46),  # p^2, normalised
    (dict(temperature=1.0, top_k=2), [0.6 / 0.9, 0.3 / 0.9, 0.0]),
    # Temperature first: at 0.5 the top token holds .78 >= .7, so the nucleus is that token alone
    # (on the untempered .6 .3 .1 it would be two tokens).
    (dict(temperature=0.5, top_p=0.7), [1.0, 0.0, 0.0]),
  ],
)
def test_sampled_frequencies_match_the_distribution(settings, want):
  """4000 rows x 2 steps from the fixed distribution .6 .3 .1: the token frequencies are within
  .025 (about 4 standard errors) of the tempered, filtered probabilities, and the two steps of a
  row agree as often as independent draws do (sum of p^2), so every step gets its own key."""
  ids = sample_search(
    _fixed([0.6, 0.3, 0.1]),
    {},
    batch_size=4000,
    max_length=2,
    bos_id=0,
    eos_id=-1,
    pad_id=0,
    rng=jax.random.key(0),
    **settings,
  )
  np.testing.assert_allclose(_frequencies(ids), want, atol=0.025)
  same = np.mean(np.asarray(ids[:, 0] == ids[:, 1]))
  np.testing.assert_allclose(same, np.sum(np.square(want)), atol=0.025)


def test_same_key_same_ids_other_key_other_ids():
  """Uniform over 8 tokens, 16 x 8 draws: two keys agreeing everywhere has probability 8^-128."""
  kwargs = dict(batch_size=16, max_length=8, bos_id=0, eos_id=-1, pad_id=0)
  fn = _fixed(np.full(8, 1 / 8))
  first = sample_search(fn, {}, rng=jax.random.key(7), **kwargs)
  np.testing.assert_array_equal(sample_search(fn, {}, rng=jax.random.key(7), **kwargs), first)
  assert np.any(np.asarray(sample_search(fn, {}, rng=jax.random.key(8), **kwargs) != first))


def test_rows_stop_at_eos_and_pad_after():
  """Each step ends a row with probability .5: rows end at different steps, hold EOS once, no
  PAD before it and only PAD after; rows that never draw EOS fill max_length."""
  fn = first_order({BOS: {A: 0.5, EOS: 0.5}, A: {A: 0.5, EOS: 0.5}, EOS: {A: 1.0}})
  ids = np.asarray(sample_search(fn, {}, batch_size=64, max_length=4, rng=jax.random.key(0), **IDS))
  lengths = []
  for row in ids:
    ends = np.flatnonzero(row == EOS)
    n = ends[0] + 1 if ends.size else len(row)
    assert np.all(row[:n] != PAD) and np.all(row[n:] == PAD) and ends.size <= 1
    lengths.append(n)
  assert len(set(lengths)) == 4  # lengths 1, 2, 3 and 4 all occur


def test_an_eos_that_never_occurs_generates_max_length_tokens():
  """eos_id=-1: the EOS token of the toy vocabulary is an ordinary token, followed by A; no row
  stops early in greedy, sampled or beam search."""
  fn = first_order({BOS: {EOS: 0.6, A: 0.4}, A: {EOS: 0.7, A: 0.3}, EOS: {A: 1.0}})
  ids = dict(bos_id=BOS, eos_id=-1, pad_id=PAD)
  np.testing.assert_array_equal(
    greedy_search(fn, {}, batch_size=1, max_length=4, **ids), [[EOS, A, EOS, A]]
  )
  beams, _ = beam_search(fn, {}, batch_size=1, beam_size=2, max_length=4, **ids)
  np.testing.assert_array_equal(beams[0, 0], [EOS, A, EOS, A])
  sampled = np.asarray(
    sample_search(fn, {}, batch_size=32, max_length=4, rng=jax.random.key(1), **ids)
  )
  assert np.all(sampled != PAD) and np.any(sampled[:, :3] == EOS)


def test_per_row_first_tokens():
  """bos_id as ids [B]: each row starts from its own token, in greedy, sampled and beam search."""
  first = jnp.array([3, 0, 4, 1], jnp.int32)
  want = (np.asarray(first)[:, None] + np.arange(1, 4)) % VOCAB  # the successor chain
  ids = dict(bos_id=first, eos_id=-1, pad_id=PAD)
  np.testing.assert_array_equal(
    greedy_search(_successor, {}, batch_size=4, max_length=3, **ids), want
  )
  np.testing.assert_array_equal(
    sample_search(_successor, {}, batch_size=4, max_length=3, rng=jax.random.key(0), **ids), want
  )
  beams, _ = beam_search(_successor, {}, batch_size=4, beam_size=2, max_length=3, **ids)
  np.testing.assert_array_equal(beams[:, 0], want)
  with pytest.raises(ValueError, match='bos_id'):
    greedy_search(_successor, {}, batch_size=3, max_length=3, **ids)


class _Shifter(nnx.Module):
  """A toy language model with the DecoderLM contract: the cache covers prompt positions 0..P-2,
  and `decode_step` at `step` predicts position P+step as (previous token + shift + step) % V."""

  def __init__(self, shift: int):
    self.shift = nnx.Param(jnp.int32(shift))

  def init_decode_cache(self, prompt, max_length):
    del max_length
    return {'seen': jnp.full((prompt.shape[0],), prompt.shape[1] - 1)}

  def decode_step(self, ids, step, cache):
    token = (ids + self.shift[...] + step) % VOCAB
    return jnp.where(jnp.arange(VOCAB) == token[:, None], 0.0, -1e9), cache


def test_continue_prompt_starts_from_the_last_prompt_token_at_step_0():
  """Prompts end in 3 and 0; with shift 1 the continuations are 4, (4+1+1)%5=1, (1+1+2)%5=4 and
  1, 3, 1: the first input is the last prompt token and the steps count from 0, whether sampled
  or greedy (temperature 0)."""
  prompt = jnp.array([[1, 2, 3], [4, 4, 0]], jnp.int32)
  for temperature in (1.0, 0.0):
    ids = continue_prompt(
      _Shifter(1), prompt, max_length=3, rng=jax.random.key(0), temperature=temperature, top_p=0.9
    )
    np.testing.assert_array_equal(ids, [[4, 1, 4], [1, 3, 1]])


@pytest.mark.parametrize(
  'settings, field',
  [
    (dict(top_p=0.0), 'top_p'),
    (dict(top_p=1.5), 'top_p'),
    (dict(top_k=-1), 'top_k'),
    (dict(top_k=2.0), 'top_k'),
    (dict(temperature=-0.1), 'temperature'),
    (dict(temperature=float('inf')), 'temperature'),
  ],
)
def test_bad_sampling_settings_raise(settings, field):
  """Out-of-range settings raise ValueError naming the field, in every entry point."""
  if field != 'temperature':
    with pytest.raises(ValueError, match=field):
      filter_logits(jnp.zeros((1, 3)), **settings)
  with pytest.raises(ValueError, match=field):
    sample_search(
      _successor, {}, batch_size=1, max_length=2, rng=jax.random.key(0), **IDS, **settings
    )
  with pytest.raises(ValueError, match=field):
    continue_prompt(
      _Shifter(1), jnp.ones((1, 2), jnp.int32), max_length=2, rng=jax.random.key(0), **settings
    )


def test_continue_prompt_rejects_an_empty_prompt():
  """P = 0 leaves no last token to start from: ValueError before any tracing."""
  with pytest.raises(ValueError, match='prompt'):
    continue_prompt(_Shifter(1), jnp.ones((2, 0), jnp.int32), max_length=2, rng=jax.random.key(0))
