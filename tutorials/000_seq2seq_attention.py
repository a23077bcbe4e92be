# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lecture 000: attention in a seq2seq decoder, and the attention layer
#
# Course note 000 starts from the RNN encoder–decoder, whose fixed-length context vector loses
# information on long inputs, and lets the decoder look back at every encoder state. It then
# turns that into a general attention layer (one query, many queries, keys and values,
# self-attention, masks, heads) and ends with the Transformer block, post-norm or pre-norm. This
# notebook computes each step with Attend's functions, in the note's order, and ends by training
# a small Seq2Seq with attention for a few seconds and drawing what it attends to. Run it from
# the repository root (`python tutorials/000_seq2seq_attention.py`) or open it in `tutorials/`.

# %%
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__)) if '__file__' in globals() else os.getcwd()
sys.path.insert(0, os.path.dirname(HERE))  # the repository root is Attend's import root

from flax import nnx
import jax
import matplotlib.pyplot as plt
import numpy as np
import optax

import attention
import models
from models import interventions
from models.blocks import EncoderLayer
from models.stack_config import StackConfig

np.set_printoptions(precision=3, suppress=True)
rng = np.random.default_rng(0)

# %% [markdown]
# ## Attention Mechanism → Attention (note 000)
#
# The encoder produced four hidden states $h_1 \dots h_4$ and the decoder starts from $s_0$. At
# step $t$:
#
# $$e_{t,i} = f_{att}(s_{t-1}, h_i), \qquad \alpha_{t,i} = \frac{\exp e_{t,i}}{\sum_j \exp e_{t,j}},
# \qquad c_t = \sum_i \alpha_{t,i} h_i$$
#
# with $f_{att}$ an MLP: Bahdanau's additive score $v^\top \tanh(W_q s + W_k h)$,
# `attention.additive_scores`. `attention.masked_softmax` is the softmax and `attention.attend`
# the weighted sum.

# %%
hidden, att = 6, 5
h = rng.standard_normal((4, hidden), np.float32)  # h_1..h_4: [S, H]
s0 = rng.standard_normal((1, hidden), np.float32)  # the query s_0: [1, H]
w_q = rng.standard_normal((hidden, att), np.float32) / 3  # W_q
w_k = rng.standard_normal((hidden, att), np.float32) / 3  # W_k
v = rng.standard_normal((att,), np.float32)  # v

e = attention.additive_scores(s0, h, w_q, w_k, v)  # e_{1,i}: [1, 4]
alpha = attention.masked_softmax(e)  # α_{1,i}
c = attention.attend(alpha, h)  # c_1 = Σ α h: [1, H]
print('e =', np.asarray(e), '\nα =', np.asarray(alpha), ' (sums to', float(alpha.sum()), ')')
np.testing.assert_allclose(e, (np.tanh(s0 @ w_q + h @ w_k) @ v)[None], rtol=1e-5)  # by hand
np.testing.assert_allclose(c, alpha @ h, rtol=1e-5)

# %% [markdown]
# The decoder then computes $s_t = f_{dec}(y_{t-1}, s_{t-1}, c_t)$ and repeats with $s_t$ as the
# next query. `models.Seq2Seq` (with `attention='bahdanau'`) is exactly this loop; we train one
# at the end.
#
# ## Attention Layer (note 000)
#
# The general layer takes a query $q$, input vectors $X$ and a similarity: with the scaled dot
# product, $e_i = q \cdot x_i / \sqrt{D_Q}$, $a = \text{softmax}(e)$, $y = \sum_i a_i x_i$.
# `attention.attention(q, k, v, score_fn=...)` is score → masked softmax → weighted sum.

# %%
X = rng.standard_normal((4, 8), np.float32)  # N_X = 4 inputs of D_Q = 8
q = rng.standard_normal((1, 8), np.float32)
y, a = attention.attention(q, X, X, score_fn=attention.scaled_dot_scores)
e_by_hand = q @ X.T / np.sqrt(8)
np.testing.assert_allclose(a, np.exp(e_by_hand) / np.exp(e_by_hand).sum(), rtol=1e-5)
print('a =', np.asarray(a), ' y shape', y.shape)

# %% [markdown]
# ### Multiple query vectors
#
# With queries $Q$ of shape $N_Q \times D_Q$: $E = QX^T/\sqrt{D_Q}$ is $N_Q \times N_X$,
# $A = \text{softmax}(E, \text{dim}=1)$ and $Y = AX$. The same call: leading dimensions are free.

# %%
Q = rng.standard_normal((3, 8), np.float32)
Y, A = attention.attention(Q, X, X)
print('E, A:', A.shape, ' rows of A sum to', np.asarray(A.sum(-1)), ' Y:', Y.shape)

# %% [markdown]
# ### Key-Value Attention
#
# Keys and values get their own projections, $K = XW_K$ and $V = XW_V$, so that what a position
# is matched on and what it contributes can differ: $E = QK^T/\sqrt{D_Q}$, $Y = AV$ with
# $V$ of width $D_V$. `attention.scaled_dot_product_attention` returns $Y$;
# `attention.attention_weights`, given the same queries, keys and options, returns $A$.

# %%
W_K = rng.standard_normal((8, 8), np.float32) / np.sqrt(8)
W_V = rng.standard_normal((8, 5), np.float32) / np.sqrt(8)  # D_V = 5
Y = attention.scaled_dot_product_attention(Q, X @ W_K, X @ W_V)
A = attention.attention_weights(Q, X @ W_K)
np.testing.assert_allclose(Y, A @ (X @ W_V), rtol=1e-5, atol=1e-6)
print('A:', A.shape, ' Y = AV:', Y.shape)

# %% [markdown]
# ### Self-Attention
#
# Queries too come from the inputs, $Q = XW_Q$. The note's info box: self-attention is
# permutation equivariant, $f(s(x)) = s(f(x))$ for a reordering $s$. We check it, then add
# sinusoidal positional encodings (`attention.sinusoidal_positions`) and see that it no longer
# holds: positions are what let the layer know the order.

# %%
W_Q = rng.standard_normal((8, 8), np.float32) / np.sqrt(8)


def self_attention(x):
  return attention.scaled_dot_product_attention(x @ W_Q, x @ W_K, x @ W_V)


perm = np.array([2, 0, 3, 1])
print(
  'f(s(x)) == s(f(x)):', np.allclose(self_attention(X[perm]), self_attention(X)[perm], atol=1e-5)
)
pe = np.asarray(attention.sinusoidal_positions(4, 8))
print(
  'with positions added:',
  np.allclose(self_attention(X[perm] + pe), self_attention(X + pe)[perm], atol=1e-5),
)

# %% [markdown]
# ### Masked self-attention
#
# A decoder must not look ahead: scores of later positions are set to $-\infty$ before the
# softmax, so their weights are 0. `attention.causal_mask(T)` is the boolean mask (True = may
# attend) and `is_causal=True` applies it.

# %%
print(np.asarray(attention.causal_mask(4)).astype(int))
A = attention.attention_weights(X @ W_Q, X @ W_K, is_causal=True)
print('causal weights:\n', np.asarray(A))

# %% [markdown]
# ### Multi-head self-attention
#
# The inputs are projected into $h$ heads, each attends on its own, and the heads' outputs are
# concatenated and projected. `attention.split_heads` turns `[T, N·H]` into `[N, T, H]` (heads
# become a batch-like axis), `attention.merge_heads` undoes it.

# %%
heads = attention.split_heads(X @ W_Q, 2)  # [N=2, T=4, H=4]
print('split:', heads.shape, ' merged back:', attention.merge_heads(heads).shape)
np.testing.assert_allclose(attention.merge_heads(heads), X @ W_Q)

# %% [markdown]
# ## Transformer → Post-Norm and Pre-Norm (note 000)
#
# A Transformer block is self-attention and an MLP, each inside a residual connection with a
# LayerNorm. Post-norm (the original) normalises after the sum, `LayerNorm(x + sublayer(x))`;
# pre-norm normalises inside the branch, `x + sublayer(LayerNorm(x))`, which keeps an identity
# path from input to output. `models.blocks.EncoderLayer` builds either from a `StackConfig`.
# The difference is visible in the outputs: each post-norm output vector is normalised (mean 0,
# standard deviation 1 before the LayerNorm's learned scale), a pre-norm one is not.

# %%
x = 3.0 * rng.standard_normal((1, 6, 16), np.float32) + 1.0  # [B, T, D], not normalised
for norm in ('post', 'pre'):
  stack = StackConfig(d_model=16, num_heads=2, d_ff=32, num_layers=1, norm=norm, dropout_rate=0.0)
  # Built and run inside one jitted function: one compilation instead of one per operation.
  out = jax.jit(lambda x, stack=stack: EncoderLayer(stack, rngs=nnx.Rngs(0))(x, None))(x)
  print(
    f'{norm}-norm: per-vector mean {float(out.mean(-1).mean()):+.3f}, '
    f'std {float(out.std(-1).mean()):.3f}'
  )

# %% [markdown]
# ## Trained: a Seq2Seq with Bahdanau attention
#
# The note's example figure shows English → French attention: the decoder looks at the source
# words in the order it needs them, even where the two languages order words differently. A
# task whose alignment we know: reverse a string of six digits. We train `models.Seq2Seq`
# (a bidirectional GRU encoder, a GRU decoder scoring $s_{t-1}$ against every $h_i$ with the
# additive score above) for 150 steps, then draw its attention: output digit $t$ should attend
# to source position $7 - t$, the anti-diagonal.

# %%
PAD, BOS, EOS, LENGTH = 0, 1, 2, 6  # digits 0-9 are the ids 3..12


def reversal_batch(n):
  """Source digit strings, decoder inputs ([BOS] + target) and targets (reversed + EOS)."""
  src = rng.integers(3, 13, size=(n, LENGTH))
  tgt = np.concatenate([src[:, ::-1], np.full((n, 1), EOS)], axis=1)
  dec = np.concatenate([np.full((n, 1), BOS), tgt[:, :-1]], axis=1)
  return src, dec, tgt


model = nnx.jit(
  lambda: models.Seq2Seq(
    input_vocab_size=13,
    output_vocab_size=13,
    pad_id=PAD,
    embed_dim=16,
    hidden_dim=32,
    attention='bahdanau',
    rngs=nnx.Rngs(0),
  )
)()  # initialised in one compiled call
optimizer = nnx.Optimizer(model, optax.adam(5e-3), wrt=nnx.Param)


@nnx.jit
def train_step(model, optimizer, src, dec, tgt):
  def loss_fn(model):
    logits = model(src, dec)  # [B, T, V]
    return optax.softmax_cross_entropy_with_integer_labels(logits, tgt).mean()

  loss, grads = nnx.value_and_grad(loss_fn)(model)
  optimizer.update(model, grads)
  return loss


for step in range(150):
  loss = train_step(model, optimizer, *reversal_batch(64))
  if step % 50 == 0 or step == 149:
    print(f'step {step:3d}  loss {float(loss):.4f}')


@nnx.jit
def forward(model, src, dec):
  """Logits and cross-attention weights; the capture opens inside the compiled function."""
  logits, captured = interventions.capture(model, src, dec)
  return logits, interventions.stack(captured, model.attention_names['cross'])


src, dec, tgt = reversal_batch(256)
logits, weights = forward(model, src, dec)
accuracy = float((logits.argmax(-1) == tgt).mean())
print(f'token accuracy (teacher forced) on 256 new strings: {accuracy:.3f}')
assert accuracy > 0.9

# %% [markdown]
# The cross-attention weights of the first string: rows are output steps, columns source
# digits. A model does not return its weights: its attention layer records them under a name,
# which `Seq2Seq.attention_names` lists, and `interventions.capture` reads every such name of
# one call. `weights` is `[B, layers, T, 1, S]`, one query per decoder step.

# %%
alpha = np.asarray(weights[0, 0, :, 0])  # [T = 7, S = 6]
print(alpha)
fig, ax = plt.subplots(figsize=(3.6, 3.6))
ax.imshow(alpha, cmap='viridis', vmin=0, vmax=1)
ax.set_xticks(range(LENGTH), [str(d - 3) for d in src[0]])
ax.set_yticks(range(LENGTH + 1), [str(d - 3) for d in tgt[0, :-1]] + ['EOS'])
ax.set_xlabel('source')
ax.set_ylabel('output')
ax.set_title('Bahdanau attention, reversing digits')
fig.tight_layout()
fig.savefig('reversal_attention.png', dpi=80)
print('wrote reversal_attention.png')
assert (alpha[np.arange(LENGTH), LENGTH - 1 - np.arange(LENGTH)] > 0.5).all()
