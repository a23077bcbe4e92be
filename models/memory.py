"""End-To-End Memory Networks (Sukhbaatar et al. 2015) for question answering over a story.

Inputs are token ids: a story `[B, M, J]` of M sentence slots of J words and a query `[B, J]`;
the model's `pad_id` marks padding words and padding slots (all words padding). The output is
float32 logits `[B, V]` over the vocabulary, the paper's single-word answer.
"""

from typing import Any, ClassVar

from flax import nnx
import jax
import jax.numpy as jnp

from attention.core import attend, masked_softmax
from attention.positions import sentence_position_encoding
from attention.scores import dot_scores
from models import interventions
from models.layers import check_choice, check_positive_ints, check_vocab, is_int

Array = jax.Array
TYINGS = ('adjacent', 'layerwise')


class MemN2N(nnx.Module):
  """End-To-End Memory Network (Sukhbaatar et al. 2015), the bAbI model of sections 2 and 4.

  Every sentence (story slots and query) is embedded as `Σ_j l_j ⊙ E x_j` with the position
  encoding `l` of section 4.1 (`position_encoding=True`) or as a bag of words (`l_j = 1`);
  padding words add nothing. Each hop k scores the memories `m_i = Σ_j l_j ⊙ A^k x_ij + T_A^k(i)`
  against the controller `u^k`, `p = softmax(u^k · m_i)` over the real slots (padding slots get
  exactly zero weight), reads `o^k = Σ_i p_i c_i` with `c_i = Σ_j l_j ⊙ C^k x_ij + T_C^k(i)`, and
  updates `u^{k+1} = u^k + o^k`. The answer logits are `W u^{K+1}`.

  Weight tying (section 2.2), all tables `[V, d]`, stored stacked in `embeddings [n, V, d]`:

  - `'adjacent'`: `A^{k+1} = C^k`, `B = A^1` and `W = C^K`: K + 1 tables, table k-1 is `A^k`
    and table k is `C^k`; table 0 embeds the query and table K gives the logits.
  - `'layerwise'`: `A^1 = ... = A^K` (table 0), `C^1 = ... = C^K` (table 1), separate query
    embedding B (table 2) and answer matrix W (table 3), and `u^{k+1} = H u^k + o^k` with a
    learned linear map `h` (no bias).

  Temporal encoding (section 4.1, `temporal=True`): learned `temporal [n, memory_size, d]`, tied
  across hops like the memory tables (K + 1 adjacent, 2 layerwise). Row r is added to the
  sentence with r real sentences after it, so "the latest sentence" is row 0 whatever the story
  length, as in the paper, where memories are indexed from the most recent.

  All weights start from N(0, 0.1), as in section 4.2. `linear=True` in `answer` removes the
  softmax from every hop (the "linear start" of section 4.2); `linear_start_steps` says for how
  many training steps the question-answering task asks for it (the paper switches when the
  validation loss stops falling; a step count is the reproducible version).

  `attention_names`: `hops`, each hop's weights over the memory slots `[B, 1, M]` (one query).
  """

  attention_names: ClassVar[dict[str, str]] = {'hops': 'hop_*/weights'}

  def __init__(
    self,
    *,
    vocab_size: int,
    pad_id: int,
    memory_size: int,
    sentence_length: int,
    embed_dim: int = 32,
    hops: int = 3,
    tying: str = 'adjacent',
    position_encoding: bool = True,
    temporal: bool = True,
    linear_start_steps: int = 0,
    rngs: nnx.Rngs,
  ):
    """Builds the model; bad settings raise ValueError before any parameter is created.

    Args:
      vocab_size: vocabulary size V, words of stories, queries and answers alike.
      pad_id: the tokenizer's padding id.
      memory_size: most story sentences M the memory holds (rows of the temporal tables).
      sentence_length: words per sentence and query J.
      embed_dim: embedding size d.
      hops: memory hops K.
      tying: `'adjacent'` or `'layerwise'`, the weight tying of section 2.2.
      position_encoding: weight words by their position (section 4.1) instead of a bag of words.
      temporal: add the learned temporal encoding to the memories (section 4.1).
      linear_start_steps: training steps whose hops skip the softmax (0 = none).
      rngs: `params` stream for initialisation.
    """
    check_vocab(vocab_size, pad_id)
    check_positive_ints(
      memory_size=memory_size, sentence_length=sentence_length, embed_dim=embed_dim, hops=hops
    )
    check_choice('tying', tying, TYINGS)
    check_choice('position_encoding', position_encoding, (True, False))
    check_choice('temporal', temporal, (True, False))
    if not is_int(linear_start_steps) or linear_start_steps < 0:
      raise ValueError(f'linear_start_steps must be an integer >= 0, got {linear_start_steps!r}.')
    self.linear_start_steps = linear_start_steps
    self.pad_id = pad_id
    self.memory_size = memory_size
    self.sentence_length = sentence_length
    self.hops = hops
    self.tying = tying
    self.position_encoding = position_encoding
    init = nnx.initializers.normal(0.1)
    adjacent = tying == 'adjacent'
    # Tables the story is embedded with (A^k and C^k); the query and answer tables follow them.
    self.memory_tables = hops + 1 if adjacent else 2
    self.query_table = 0 if adjacent else 2
    self.answer_table = hops if adjacent else 3
    num_tables = self.memory_tables if adjacent else 4
    self.embeddings = nnx.Param(init(rngs.params(), (num_tables, vocab_size, embed_dim)))
    self.temporal = (
      nnx.Param(init(rngs.params(), (self.memory_tables, memory_size, embed_dim)))
      if temporal
      else None
    )
    self.h = (
      None
      if adjacent
      else nnx.Linear(embed_dim, embed_dim, use_bias=False, kernel_init=init, rngs=rngs)
    )

  def _hop_tables(self, hop: int) -> tuple[int, int]:
    """The indices of `A^k` and `C^k` in `embeddings` for 0-based hop k."""
    return (hop, hop + 1) if self.tying == 'adjacent' else (0, 1)

  def _embed(self, ids: Array, tables: Array) -> Array:
    """Sentences `[..., J]` through each table `[n, V, d]` as `[n, ..., d]`, padding words zero."""
    words = (ids != self.pad_id).astype(tables.dtype)  # [..., J]
    if self.position_encoding:
      weights = sentence_position_encoding(self.sentence_length, tables.shape[-1])  # [J, d]
    else:
      weights = jnp.ones((self.sentence_length, tables.shape[-1]), tables.dtype)
    weights = words[..., None] * weights.astype(tables.dtype)  # [..., J, d]
    embedded = jnp.take(tables, ids, axis=1)  # [n, ..., J, d]
    return jnp.einsum('n...jd,...jd->n...d', embedded, weights)

  def _check_call(self, story: Any, query: Any) -> tuple[Array, Array]:
    """`story` and `query` as JAX arrays; raises ValueError on ids no call can run with."""
    story, query = jnp.asarray(story), jnp.asarray(query)
    j = self.sentence_length
    if (
      story.ndim != 3
      or not jnp.issubdtype(story.dtype, jnp.integer)
      or not 1 <= story.shape[1] <= self.memory_size
      or story.shape[2] != j
    ):
      raise ValueError(
        f'story must be integer ids [B, M, J] with M <= memory_size='
        f'{self.memory_size} and J = sentence_length={j}; got {story.dtype}'
        f'{tuple(story.shape)}.'
      )
    if (
      query.ndim != 2
      or not jnp.issubdtype(query.dtype, jnp.integer)
      or query.shape != (story.shape[0], j)
    ):
      raise ValueError(
        f'query must be integer ids [B, J] = [{story.shape[0]}, {j}] (the '
        f"story's batch, sentence_length); got {query.dtype}{tuple(query.shape)}."
      )
    return story, query

  def answer(
    self,
    story: Array,
    query: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    linear: bool | Array = False,
  ) -> Array:
    """Answer logits float32 `[B, V]` for a story and a query (`pad_id` = padding).

    Args:
      story: int ids `[B, M, J]`, M <= memory_size; slot 0 holds the oldest sentence kept and
        padding slots (all words `pad_id`) may follow the real ones.
      query: int ids `[B, J]`.
      deterministic: accepted for the task interface; the model has no dropout.
      rngs: accepted for the task interface; unused.
      linear: leave out the softmax in the hops (linear start): the weights are then the raw
        scores `u^k · m_i` on real slots and 0 on padding slots. A bool, or a traced boolean
        scalar (e.g. `step < linear_start_steps` inside a compiled train step).

    Returns:
      logits. Hop k's weights over the slots are the tap `hop_<k>/weights` `[B, 1, M]`
      (`attention_names`): padding slots at exactly 0 and, without `linear`, every story with a
      real slot summing to 1.
    """
    del deterministic, rngs  # no dropout
    story, query = self._check_call(story, query)
    tables = self.embeddings[...]  # [n, V, d]
    slots = jnp.any(story != self.pad_id, axis=-1)  # [B, M]
    memories = self._embed(story, tables[: self.memory_tables])  # [n', B, M, d]
    if self.temporal is not None:
      # Real sentences after each slot: 0 for the latest, whatever the story's length.
      newer = jnp.cumsum(slots[:, ::-1], axis=1)[:, ::-1] - slots  # [B, M]
      memories = memories + jnp.take(self.temporal[...], newer, axis=1)  # [n', B, M, d]
    u = self._embed(query, tables[self.query_table][None])[0]  # [B, d]
    mask = slots[:, None, :]  # [B, 1, M]
    for hop in range(self.hops):
      a, c = self._hop_tables(hop)
      scores = dot_scores(u[:, None, :], memories[a])  # [B, 1, M]
      weights = jnp.where(linear, jnp.where(mask, scores, 0.0), masked_softmax(scores, mask))
      weights = interventions.tap(self, f'hop_{hop}/weights', weights)  # [B, 1, M]
      o = attend(weights, memories[c])[:, 0]  # [B, d]
      u = (u if self.h is None else self.h(u)) + o  # [B, d]
    return jnp.einsum('bd,vd->bv', u, tables[self.answer_table]).astype(jnp.float32)

  __call__ = answer
