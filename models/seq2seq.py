"""Seq2Seq with attention: a GRU encoder and a GRU decoder that attends to it every step.

Three decoders, picked by `attention`:

- `'bahdanau'` (Bahdanau et al. 2015): score the previous state `s_{t-1}` against every encoder
  state `h_s`, build the context `c_t = Σ_s a_ts h_s`, step the cell `s_t = f([y_{t-1}; c_t],
  s_{t-1})`, and predict from the deep output `W_o [s_t; c_t; y_{t-1}]` (the paper's maxout layer
  reduced to one linear map).
- `'luong'` (Luong et al. 2015): step the cell first, `s_t = f([y_{t-1}; h~_{t-1}], s_{t-1})` (input
  feeding), score `s_t`, and predict from the attentional state `h~_t = tanh(W_c [c_t; s_t])`.
- `'none'`: the same GRU encoder-decoder without attention, the fixed-vector model the attention
  papers improve on (Cho et al. 2014; Sutskever et al. 2014): Bahdanau's decoder with the context
  fixed to one vector per source, the mean of the encoder states, `c_t = c` at every step.

`score` picks the score function (see `models.rnn_attention`). Encoder states have size
`Dv = hidden_dim * (2 if bidirectional else 1)`; dot, scaled_dot and cosine scores compare them with
a decoder state of size `hidden_dim`, so when the sizes differ the layer first projects the encoder
states (once per source) to `hidden_dim`. The context always averages the unprojected states.

`pad_id` (the tokenizer's) marks padding: padded source positions never receive attention weight,
and the encoder's GRUs skip them (the carry passes through unchanged), so padded tokens cannot
change any output.
Dropout acts on embeddings, between encoder layers and on the decoder's output features, all
outside the recurrences, so the scanned step stays deterministic and needs no random keys.
"""

from collections.abc import Sequence

from flax import nnx
import jax
import jax.numpy as jnp

from models import interventions, rnn_attention
from models.embeddings import lookup

Array = jax.Array

ATTENTION_KINDS = ('bahdanau', 'luong', 'none')
DEFAULT_SCORE = {'bahdanau': 'additive', 'luong': 'general'}
_CROSS = {'cross': 'attn/weights'}
_MEMORY = ('keys', 'values', 'mask')  # the cache entries that stay fixed while decoding


def _scan_gru(cell: nnx.GRUCell, xs: Array, mask: Array, reverse: bool = False) -> Array:
  """Runs `cell` over `xs` [B, S, D] from a zero carry and returns its states [B, S, H].

  Where `mask` [B, S] is False the carry passes through unchanged and the output is zero, so a
  backward pass starts at the last real token and padding cannot leak into real positions.
  """

  def step(h, inputs):
    x_t, m_t = inputs  # [B, D], [B]
    h_new, _ = cell(h, x_t)
    h = jnp.where(m_t[:, None], h_new, h)  # [B, H]
    return h, jnp.where(m_t[:, None], h, 0.0)

  h0 = jnp.zeros((xs.shape[0], cell.hidden_features), xs.dtype)
  _, ys = jax.lax.scan(step, h0, (jnp.swapaxes(xs, 0, 1), mask.T), reverse=reverse)  # [S, B, H]
  return jnp.swapaxes(ys, 0, 1)


def run_cells(cells: Sequence[nnx.GRUCell], state: Array, x: Array) -> Array:
  """One step of a stacked GRU: state [B, L, H], input x [B, In] to the first cell -> [B, L, H]."""
  new = []
  for i, cell in enumerate(cells):
    x, _ = cell(state[:, i], x)
    new.append(x)
  return jnp.stack(new, axis=1)


def bahdanau_step(
  attn: rnn_attention.RNNAttention,
  cells: Sequence[nnx.GRUCell],
  state: Array,
  y_prev: Array,
  keys: Array,
  values: Array,
  mask: Array | None,
) -> tuple[Array, Array, Array]:
  """One step of a Bahdanau decoder: attend from s_{t-1}, then step the cells on [y_{t-1}; c_t].

  Args:
    attn: the attention layer.
    cells: the stacked decoder GRU, L cells of size H.
    state: s_{t-1}, [B, L, H]; the top layer's state is the query.
    y_prev: the embedded previous token [B, E].
    keys: `attn.prepare(values)`, [B, S, K].
    values: the states attended to [B, S, Dv].
    mask: [B, 1, S], True = real position; or None.

  Returns:
    `(s_t [B, L, H], deep-output features [s_t; c_t; y_{t-1}] [B, H + Dv + E], weights [B, S])`.
  """
  context, weights = attn(state[:, -1:], keys, values, mask)  # [B, 1, Dv], [B, 1, S]
  context = context[:, 0]  # [B, Dv]
  state = run_cells(cells, state, jnp.concatenate([y_prev, context], axis=-1))
  features = jnp.concatenate([state[:, -1], context, y_prev], axis=-1)  # [B, H + Dv + E]
  return state, features, weights[:, 0]


class GRUEncoder(nnx.Module):
  """Stacked, optionally bidirectional GRU over embedded tokens."""

  def __init__(
    self,
    in_dim: int,
    hidden_dim: int,
    *,
    num_layers: int,
    bidirectional: bool,
    dropout_rate: float,
    rngs: nnx.Rngs,
  ):
    self.out_dim = hidden_dim * (2 if bidirectional else 1)
    dims = [in_dim] + [self.out_dim] * (num_layers - 1)
    self.forward = nnx.List([nnx.GRUCell(d, hidden_dim, rngs=rngs) for d in dims])
    self.backward = nnx.List(
      [nnx.GRUCell(d, hidden_dim, rngs=rngs) for d in dims] if bidirectional else []
    )
    self.dropout = nnx.Dropout(dropout_rate)

  def __call__(self, x: Array, mask: Array, *, deterministic: bool, rngs: nnx.Rngs | None) -> Array:
    """Encodes `x` [B, S, E] with `mask` [B, S] into states [B, S, out_dim] (zero on padding)."""
    for i, cell in enumerate(self.forward):
      if i:
        x = self.dropout(x, deterministic=deterministic, rngs=rngs)
      outputs = [_scan_gru(cell, x, mask)]
      if self.backward:
        outputs.append(_scan_gru(self.backward[i], x, mask, reverse=True))
      x = jnp.concatenate(outputs, axis=-1)  # [B, S, out_dim]
    return x


class Seq2Seq(nnx.Module):
  """Encoder-decoder with Bahdanau or Luong attention; the common model interface of Attend.

  Args:
    input_vocab_size: source vocabulary size.
    output_vocab_size: target vocabulary size.
    pad_id: the tokenizer's padding id; padded source positions are skipped and never attended.
    embed_dim: token embedding size E.
    hidden_dim: GRU size H of the decoder and of each encoder direction.
    num_layers: stacked GRU layers in the encoder and in the decoder.
    bidirectional: whether the encoder also reads the source right to left.
    attention: 'bahdanau', 'luong' or 'none' (no attention: a fixed context vector).
    score: additive | dot | general | scaled_dot | cosine; None = 'additive' for bahdanau,
      'general' for luong; must be None for 'none'.
    dropout_rate: dropout on embeddings, between encoder layers and on the output features.
    rngs: parameter initialisation keys.

  `attention_names`: `cross`, the decoder's attention per step `[B, T, 1, S]` (one query a step);
  none with `attention='none'`.
  """

  @property
  def attention_names(self) -> dict[str, str]:
    return {} if self.attention_kind == 'none' else _CROSS

  def __init__(
    self,
    *,
    input_vocab_size: int,
    output_vocab_size: int,
    pad_id: int,
    embed_dim: int = 128,
    hidden_dim: int = 256,
    num_layers: int = 1,
    bidirectional: bool = True,
    attention: str = 'bahdanau',
    score: str | None = None,
    dropout_rate: float = 0.0,
    rngs: nnx.Rngs,
  ):
    sizes = dict(
      input_vocab_size=input_vocab_size,
      output_vocab_size=output_vocab_size,
      embed_dim=embed_dim,
      hidden_dim=hidden_dim,
      num_layers=num_layers,
    )
    for field, value in sizes.items():
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f'Seq2Seq: {field} must be a positive integer, got {value!r}.')
    if attention not in ATTENTION_KINDS:
      raise ValueError(
        f'Seq2Seq: attention must be one of {", ".join(ATTENTION_KINDS)}, got {attention!r}.'
      )
    if attention == 'none':
      if score is not None:
        raise ValueError(f"Seq2Seq: score={score!r} does nothing with attention='none'; leave it.")
    else:
      score = DEFAULT_SCORE[attention] if score is None else score
      rnn_attention.check_score(score, 'Seq2Seq: score')
    if not 0.0 <= dropout_rate < 1.0:
      raise ValueError(f'Seq2Seq: dropout_rate must be in [0, 1), got {dropout_rate!r}.')
    self.pad_id = pad_id
    self.attention_kind = attention
    self.num_layers, self.hidden_dim = num_layers, hidden_dim
    self.src_embed = nnx.Embed(input_vocab_size, embed_dim, rngs=rngs)
    self.tgt_embed = nnx.Embed(output_vocab_size, embed_dim, rngs=rngs)
    self.encoder = GRUEncoder(
      embed_dim,
      hidden_dim,
      num_layers=num_layers,
      bidirectional=bidirectional,
      dropout_rate=dropout_rate,
      rngs=rngs,
    )
    enc_dim = self.encoder.out_dim
    self.attn = (
      None
      if attention == 'none'
      else rnn_attention.make_attention(score, query_dim=hidden_dim, key_dim=enc_dim, rngs=rngs)
    )
    # s_0 = tanh(W_b mean_s h_s) for every decoder layer: the mean ignores padding and needs no
    # choice of which direction's final state to use.
    self.bridge = nnx.Linear(enc_dim, num_layers * hidden_dim, rngs=rngs)
    # Bahdanau (and the fixed context) feed the context into the cell; Luong feeds the previous
    # attentional state.
    first_in = embed_dim + (hidden_dim if attention == 'luong' else enc_dim)
    self.cells = nnx.List(
      [
        nnx.GRUCell(first_in if i == 0 else hidden_dim, hidden_dim, rngs=rngs)
        for i in range(num_layers)
      ]
    )
    if attention != 'luong':
      self.combine = None
      features = hidden_dim + enc_dim + embed_dim  # [s_t; c_t; y_{t-1}]
    else:
      self.combine = nnx.Linear(enc_dim + hidden_dim, hidden_dim, use_bias=False, rngs=rngs)
      features = hidden_dim  # h~_t
    self.output = nnx.Linear(features, output_vocab_size, rngs=rngs)
    self.dropout = nnx.Dropout(dropout_rate)

  def _encode(
    self, inputs: Array, deterministic: bool, rngs: nnx.Rngs | None
  ) -> tuple[dict[str, Array], dict[str, Array]]:
    """Source ids [B, S] -> (memory: keys, values, mask; initial decoder carry)."""
    if inputs.ndim != 2:
      raise ValueError(f'Seq2Seq: inputs must be int ids [B, S], got shape {inputs.shape}.')
    mask = inputs != self.pad_id  # [B, S]
    x = self.dropout(lookup(self.src_embed, inputs), deterministic=deterministic, rngs=rngs)
    values = self.encoder(x, mask, deterministic=deterministic, rngs=rngs)  # [B, S, Dv]
    m = mask[..., None].astype(values.dtype)  # [B, S, 1]
    mean = jnp.sum(values * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)  # [B, Dv]
    state = jnp.tanh(self.bridge(mean)).reshape(-1, self.num_layers, self.hidden_dim)  # [B, L, H]
    carry = {'state': state}
    if self.attention_kind == 'luong':
      carry['feed'] = jnp.zeros((inputs.shape[0], self.hidden_dim), values.dtype)  # h~_0 = 0
    if self.attention_kind == 'none':
      carry['context'] = mean  # the one vector the decoder sees of the source, every step
      return {'keys': values, 'values': values, 'mask': mask}, carry
    memory = {'keys': self.attn.prepare(values), 'values': values, 'mask': mask}
    return memory, carry

  def _step(
    self, carry: dict[str, Array], y_prev: Array, memory: dict[str, Array]
  ) -> tuple[dict[str, Array], Array]:
    """One decoder step from the embedded previous token y_prev [B, E].

    Returns:
      `(new carry, output features [B, F])`; the attention weights are the tap `attn/weights`.
    """
    mask = memory['mask'][:, None, :]  # [B, 1, S]: one query per step
    state = carry['state']
    if self.attention_kind == 'none':
      context = carry['context']  # [B, Dv]
      state = run_cells(self.cells, state, jnp.concatenate([y_prev, context], axis=-1))
      features = jnp.concatenate([state[:, -1], context, y_prev], axis=-1)
      return {'state': state, 'context': context}, features
    if self.attention_kind == 'bahdanau':
      state, features, _ = bahdanau_step(
        self.attn, self.cells, state, y_prev, memory['keys'], memory['values'], mask
      )
      return {'state': state}, features
    state = run_cells(self.cells, state, jnp.concatenate([y_prev, carry['feed']], axis=-1))
    # Query s_t, the top layer's state after the cell: [B, 1, H].
    context, _ = self.attn(state[:, -1:], memory['keys'], memory['values'], mask)
    h_tilde = jnp.tanh(self.combine(jnp.concatenate([context[:, 0], state[:, -1]], axis=-1)))
    return {'state': state, 'feed': h_tilde}, h_tilde

  def __call__(
    self,
    inputs: Array,
    decoder_inputs: Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
  ) -> Array:
    """Teacher-forced forward pass.

    Args:
      inputs: source ids int32 [B, S] (`pad_id` = padding).
      decoder_inputs: [BOS] + targets[:-1], int32 [B, T].
      deterministic: False turns dropout on.
      rngs: an `nnx.Rngs` with a 'dropout' stream, needed when dropout is on.

    Returns:
      logits float32 [B, T, V_out]. The attention weights are the tap `attention_names` lists.
    """
    if not deterministic and rngs is None and self.dropout.rate > 0:
      raise ValueError(
        'Seq2Seq: deterministic=False with dropout_rate > 0 needs rngs=nnx.Rngs(dropout=...).'
      )
    if decoder_inputs.ndim != 2 or decoder_inputs.shape[0] != inputs.shape[0]:
      raise ValueError(
        f'Seq2Seq: decoder_inputs must be int ids [B, T] with B={inputs.shape[0]}, '
        f'got shape {decoder_inputs.shape}.'
      )
    memory, carry = self._encode(inputs, deterministic, rngs)
    y = self.dropout(lookup(self.tgt_embed, decoder_inputs), deterministic=deterministic, rngs=rngs)
    _, features = interventions.scan(
      lambda c, y_t: self._step(c, y_t, memory), carry, jnp.swapaxes(y, 0, 1)
    )  # [T, B, F]
    features = jnp.swapaxes(features, 0, 1)  # [B, T, F]
    return self.output(self.dropout(features, deterministic=deterministic, rngs=rngs))

  def init_decode_cache(self, inputs: Array, max_length: int) -> dict[str, Array]:
    """Encodes the source once for incremental decoding.

    Args:
      inputs: source ids int32 [B, S].
      max_length: the decoding length; an RNN's state does not grow with it, so it is unused.

    Returns:
      A dict whose leaves all lead with B: keys [B, S, K] (prepared by the attention layer),
      values [B, S, Dv], mask [B, S], state [B, L, H] and, for Luong, feed [B, H].
    """
    del max_length  # the recurrent state has a fixed size
    memory, carry = self._encode(inputs, deterministic=True, rngs=None)
    return {**memory, **carry}

  def decode_step(
    self, ids: Array, step: Array, cache: dict[str, Array]
  ) -> tuple[Array, dict[str, Array]]:
    """Logits for the next token given the previous ones `ids` [B]; pure in the module.

    `step` is part of the common interface; the recurrent state already knows the position.
    """
    del step
    memory = {k: cache[k] for k in _MEMORY}
    carry = {k: v for k, v in cache.items() if k not in _MEMORY}
    carry, features = self._step(carry, lookup(self.tgt_embed, ids), memory)
    return self.output(features), {**memory, **carry}
