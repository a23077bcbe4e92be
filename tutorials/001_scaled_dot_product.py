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
# # Lecture 001: scaled dot-product attention and multi-head attention
#
# This notebook follows course note 001 section by section and computes every formula with
# Attend's own functions (`attention/`, `models/`). Run it from the repository root
# (`python tutorials/001_scaled_dot_product.py`) or open it as a notebook in `tutorials/`.

# %%
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__)) if '__file__' in globals() else os.getcwd()
sys.path.insert(0, os.path.dirname(HERE))  # the repository root is Attend's import root

from flax import nnx
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import attention
from models import interventions
from models.attention_layer import MultiHeadAttention
from models.stack_config import AttentionConfig

np.set_printoptions(precision=4, suppress=True)
rng = np.random.default_rng(0)  # inputs from NumPy: Attend's functions take NumPy arrays

# %% [markdown]
# ## Scaled dot-product attention (note 001, "缩放点积注意力")
#
# $$\text{Attention}(Q, K, V) = \text{softmax}\Big(\frac{QK^T}{\sqrt{d_k}}\Big) V$$
#
# `attention.scaled_dot_product_attention` is this formula, and `attention.attention_weights` of
# the same arguments is its softmax. We check both against the formula written out in NumPy.

# %%
q = rng.standard_normal((3, 4), np.float32)  # [T, d_k]
k = rng.standard_normal((5, 4), np.float32)  # [S, d_k]
v = rng.standard_normal((5, 2), np.float32)  # [S, d_v]
out = attention.scaled_dot_product_attention(q, k, v)
weights = attention.attention_weights(q, k)

scores = q @ k.T / np.sqrt(4)
by_hand = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)
print('weights [T, S]:\n', np.asarray(weights))
print('rows sum to', np.asarray(weights).sum(-1))
np.testing.assert_allclose(weights, by_hand, rtol=1e-5)
np.testing.assert_allclose(out, by_hand @ v, rtol=1e-5, atol=1e-6)

# %% [markdown]
# ### Why divide by √d_k
#
# The note: if the components of q and k are independent with mean 0 and variance 1, then
# $q \cdot k = \sum_{i=1}^{d_k} q_i k_i$ has mean 0 and variance $d_k$; dividing by $\sqrt{d_k}$
# brings the variance back to 1. We sample many pairs and measure it with `attention.dot_scores`
# and `attention.scaled_dot_scores`.

# %%
D_KS = (4, 16, 64, 256, 1024)
for d_k in D_KS:
  qs = rng.standard_normal((2000, 1, d_k), np.float32)  # 2000 independent (q, k) pairs
  ks = rng.standard_normal((2000, 1, d_k), np.float32)
  dot = np.asarray(attention.dot_scores(qs, ks))
  scaled = np.asarray(attention.scaled_dot_scores(qs, ks))
  print(f'd_k={d_k:5d}  var(q·k)={dot.var():8.1f}  var(q·k/√d_k)={scaled.var():.3f}')

# %% [markdown]
# Large scores saturate the softmax: one key takes (almost) all the weight, and the gradient
# through the softmax vanishes. The entropy of a row of weights, $-\sum_s \alpha_s \log \alpha_s$
# (`attention.attention_entropy`), measures it: $\log S$ for uniform weights, 0 for one key. Over
# 16 keys, unscaled scores lose their entropy as d_k grows; scaled ones keep it.


# %%
@jax.jit
def mean_entropies(qs, ks):
  """Mean entropy of the weights under the unscaled and the scaled score."""
  return {
    name: attention.attention_entropy(
      attention.masked_softmax(attention.SCORES[name](qs, ks))
    ).mean()
    for name in ('dot', 'scaled_dot')
  }


entropy = {'dot': [], 'scaled_dot': []}
for d_k in D_KS:
  qs = rng.standard_normal((256, 1, d_k), np.float32)  # 256 queries, each over its own 16 keys
  ks = rng.standard_normal((256, 16, d_k), np.float32)
  for name, value in mean_entropies(qs, ks).items():
    entropy[name].append(float(value))
for name, values in entropy.items():
  print(f'{name:10s}', ' '.join(f'{e:.2f}' for e in values))

fig, ax = plt.subplots(figsize=(5, 3.2))
for name, values in entropy.items():
  ax.plot(D_KS, values, marker='o', label=name)
ax.axhline(np.log(16), color='gray', linestyle=':', label='uniform (log 16)')
ax.set_xscale('log', base=2)
ax.set_xlabel('d_k')
ax.set_ylabel('entropy of the weights (nats)')
ax.set_title('Softmax saturation over 16 keys')
ax.legend()
fig.tight_layout()
fig.savefig('saturation.png', dpi=100)
print('wrote saturation.png')
assert entropy['dot'][-1] < 0.5 < 2.0 < entropy['scaled_dot'][-1]

# %% [markdown]
# The gradient tells the same story: the Jacobian of the softmax shrinks when one weight is
# near 1. The norm of the gradient of the first weight with respect to the scores:


# %%
@jax.jit
def gradient_norms(qs, ks):
  """|∂α_max/∂s| of one query's strongest weight, for the unscaled and the scaled score."""
  largest = lambda s: jax.nn.softmax(s)[jnp.argmax(s)]
  return {
    name: jnp.linalg.norm(jax.grad(largest)(attention.SCORES[name](qs, ks)[0]))
    for name in ('dot', 'scaled_dot')
  }


for d_k in (16, 1024):
  norms = gradient_norms(
    rng.standard_normal((1, d_k), np.float32), rng.standard_normal((16, d_k), np.float32)
  )
  print(f'd_k={d_k:4d}', '  '.join(f'{n}: {float(g):.2e}' for n, g in norms.items()))

# %% [markdown]
# ## The note's PyTorch reference, in Attend (note 001, "代码")
#
# The note's `ScaledDotProductAttention(temperature, attn_dropout)` divides by a temperature,
# fills masked positions with -1e9, applies dropout to the weights and tests on q, k, v of shape
# (2, 3, 4) with temperature 0.5. `attention.scaled_dot_scores(q, k, temperature=0.5)` is the
# score, `attention.masked_softmax` the masked softmax and `attention.drop_weights` the dropout.

# %%
q = rng.standard_normal((2, 3, 4), np.float32)  # (batch_size, query_len, query_dim)
k = rng.standard_normal((2, 3, 4), np.float32)  # (batch_size, key_len, key_dim)
v = rng.standard_normal((2, 3, 4), np.float32)  # (batch_size, value_len, value_dim)
mask = jnp.ones((2, 3, 3), bool)  # the note's torch.ones(2, 3, 3): every key visible
attn = attention.masked_softmax(attention.scaled_dot_scores(q, k, temperature=0.5), mask)
attn = attention.drop_weights(attn, 0.1, jax.random.PRNGKey(0))  # training only
output = attention.attend(attn, v)
print('Output Shape:', output.shape)
print('Attention Shape:', attn.shape)
assert output.shape == (2, 3, 4) and attn.shape == (2, 3, 3)

# %% [markdown]
# One difference matters. With `masked_fill(mask == 0, -1e9)`, a query whose keys are *all*
# masked (a padded query row) gets uniform weights, 1/S each: it attends to padding. Attend's
# `masked_softmax` gives such a row exact zeros, and masked keys get exactly 0 elsewhere.

# %%
scores = attention.scaled_dot_scores(q, k, temperature=0.5)[0]  # [3, 3]
mask = jnp.array([[True, True, False], [True, False, False], [False, False, False]])
note_style = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
print('fill with -1e9:\n', np.asarray(note_style))
print('attention.masked_softmax:\n', np.asarray(attention.masked_softmax(scores, mask)))

# %% [markdown]
# ## Self-attention (note 001, "自注意力")
#
# In self-attention Q, K and V come from the same sequence. Unlike encoder–decoder attention,
# where the queries come from the target and the keys and values from the source, every position
# attends to every position of its own sequence.

# %%
x = rng.standard_normal((5, 8), np.float32)  # one sequence: 5 positions, 8 features
w = attention.attention_weights(x, x)
print('self-attention weights [5, 5]:\n', np.asarray(w))

# %% [markdown]
# ## Multi-head attention (note 001, the second "代码")
#
# The note's `MultiHeadAttention(n_head, d_model, d_k, d_v)` projects with `w_qs`, `w_ks`,
# `w_vs` to `n_head` heads of size `d_k` (`d_v`), runs scaled dot-product attention per head,
# concatenates the heads and projects with `fc`. Attend's `MultiHeadAttention` holds the same
# four projections (`w_q`, `w_k`, `w_v`, `w_o`); below we rebuild its output by hand from its
# parameters with `attention.split_heads` / `merge_heads`. (The note's module also adds the
# residual and a LayerNorm: in Attend they belong to the Transformer block, `models/blocks.py`.)

# %%
n_head, d_model, d_k, d_v = 2, 8, 4, 3
config = AttentionConfig(d_model=d_model, num_heads=n_head, d_k=d_k, d_v=d_v)
mha = MultiHeadAttention(config, rngs=nnx.Rngs(0))
x = rng.standard_normal((2, 5, d_model), np.float32)  # [B, T, D]
# The layer returns its output; its weights are read by capture, by name (models.interventions).
out, captured = interventions.capture(mha, x)
weights = captured['weights']
print('output', out.shape, 'weights [B, N, T, S]', weights.shape)


def project(layer, x):
  return x @ layer.kernel[...] + layer.bias[...]


heads_q = attention.split_heads(project(mha.w_q, x), n_head)  # [B, N, T, d_k]
heads_k = attention.split_heads(project(mha.w_k, x), n_head)
heads_v = attention.split_heads(project(mha.w_v, x), n_head)  # [B, N, T, d_v]
heads = attention.scaled_dot_product_attention(heads_q, heads_k, heads_v)
by_hand = project(mha.w_o, attention.merge_heads(heads))  # Concat(heads) W^O
np.testing.assert_allclose(out, by_hand, rtol=1e-4, atol=1e-5)
print('MultiHeadAttention == Concat(head_1, ..., head_h) W^O: checked')
