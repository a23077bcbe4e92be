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
# # Lecture 002: attention in translation, captioning, memory networks and the NTM
#
# Course note 002 ("Attention & Transformer") shows attention on sensory information (machine
# translation, image captioning), attention on memory (memory networks, the Neural Turing
# Machine), then self-attention, multi-head attention and sinusoidal positional encoding with
# worked values. This notebook computes each with Attend's functions, in the note's order. Run
# it from the repository root (`python tutorials/002_attention_applications.py`) or open it in
# `tutorials/`.

# %%
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__)) if '__file__' in globals() else os.getcwd()
sys.path.insert(0, os.path.dirname(HERE))  # the repository root is Attend's import root

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits

import attention
from attention import addressing
from models.vision import patchify

np.set_printoptions(precision=3, suppress=True)
rng = np.random.default_rng(0)

# %% [markdown]
# ## Machine Translation with Attention (note 002)
#
# The encoder gives hidden states $h^1 \dots h^4$; the decoder's state $z_0$ is the query. Match
# scores between $z_0$ and each $h^i$ go through a softmax to weights $\alpha_i$ (summing to 1),
# and the context is $c^0 = \sum_i \alpha_i h^i$. With the dot product as the match this is the
# note's dot-product attention, $A(q, K, V) = \sum_i \frac{\exp(q \cdot k_i)}{\sum_j \exp(q
# \cdot k_j)} v_i$, where keys and values are both the $h^i$.

# %%
h = rng.standard_normal((4, 5), np.float32)  # h^1..h^4
z0 = rng.standard_normal((1, 5), np.float32)  # the query
c0, alpha = attention.attention(z0, h, h, score_fn=attention.dot_scores)
print('α =', np.asarray(alpha), ' c^0 =', np.asarray(c0))
np.testing.assert_allclose(c0, alpha @ h, rtol=1e-5)

# %% [markdown]
# ## Image (video) Captioning with Attention (note 002)
#
# A CNN turns the image into region features; when generating each word the decoder scores every
# region, weights them and sums them into a context vector. Here the regions are the 16 patches
# of 2×2 pixels of a real handwritten digit (scikit-learn's digits, bundled), cut by
# `models.vision.patchify`. As a stand-in for the decoder's query we take the brightest region's
# features: the weights then light up the regions that look like it (Attend's captioner learns
# its queries: `configs/caption_digits.py`).

# %%
digit = load_digits().images[0].astype(np.float32) / 16.0  # [8, 8], a zero
regions = patchify(digit[None, :, :, None], 2)[0]  # [16 regions, 4 pixels]
query = regions[int(np.argmax(np.asarray(regions).sum(-1)))][None]  # [1, 4]
_, weights = attention.attention(
  query, regions, regions, score_fn=lambda q, k: 4.0 * attention.cosine_scores(q, k)
)
fig, axes = plt.subplots(1, 2, figsize=(5, 2.6))
axes[0].imshow(digit, cmap='gray')
axes[0].set_title('image')
axes[1].imshow(np.asarray(weights).reshape(4, 4), cmap='viridis')
axes[1].set_title('weights over 4×4 regions')
for ax in axes:
  ax.axis('off')
fig.tight_layout()
fig.savefig('region_attention.png', dpi=80)
print('wrote region_attention.png')

# %% [markdown]
# Show, Attend and Tell adds a "doubly stochastic" regulariser $\lambda \sum_i (1 - \sum_t
# \alpha_{ti})^2$: each step's weights sum to 1 over the regions, and the penalty asks each
# region's weights summed over the caption to approach 1 too, so that every region is looked at
# some time. `attention.doubly_stochastic_penalty` (`--config.attention_penalty=λ` in training):

# %%
steps, num_regions = 4, 4
focused = np.eye(steps, num_regions, dtype=np.float32)  # each word, its own region
stuck = np.tile(np.eye(1, num_regions, dtype=np.float32), (steps, 1))  # every word, region 0
print(
  'every region once:',
  float(attention.doubly_stochastic_penalty(focused)),
  ' one region always:',
  float(attention.doubly_stochastic_penalty(stuck)),
)

# %% [markdown]
# ## Memory Network (note 002)
#
# An end-to-end memory network stores each story sentence as a memory vector, matches the
# question against them with a softmax (a "hop"), adds the weighted sum of the memories to the
# question and hops again. A sentence becomes $\sum_j l_j \odot A x_j$ with the position encoding
# $l_{kj} = (1 - j/J) - (k/d)(1 - 2j/J)$, so word order matters:
# `attention.sentence_position_encoding`.

# %%
l = attention.sentence_position_encoding(4, 6)  # J = 4 words, d = 6 features
print('l [J, d]:\n', np.asarray(l))
J, d = 4, 6
j, k = 2, 3  # word 2, feature 3 (1-based)
assert np.isclose(l[j - 1, k - 1], (1 - j / J) - (k / d) * (1 - 2 * j / J))

# %% [markdown]
# One hop over the note's task-16 story, with random embeddings (so the weights mean nothing
# yet): memories $m_i$, weights $p = \text{softmax}(u \cdot m_i)$, output $o = \sum_i p_i c_i$,
# next question state $u + o$. `models.MemN2N` learns the embeddings; trained on the generated
# task 16 (`configs/memn2n_babi.py:qa16`), its three hops reproduce the note's table: hop 1
# finds what the asked animal is, hop 2 another animal of that kind, hop 3 that one's colour
# (the table is in the memory family's page of the docs).

# %%
story = ['brian is a frog', 'lily is gray', 'brian is yellow', 'julius is green', 'greg is a frog']
question = 'what color is greg'
vocab = sorted({w for s in story + [question] for w in s.split()})
embed_a, embed_c, embed_b = (rng.standard_normal((len(vocab), d), np.float32) for _ in range(3))


def encode(sentence, table):
  ids = [vocab.index(w) for w in sentence.split()]
  return (np.asarray(attention.sentence_position_encoding(len(ids), d)) * table[ids]).sum(0)


memories = np.stack([encode(s, embed_a) for s in story])  # m_i: [5, d]
outputs = np.stack([encode(s, embed_c) for s in story])  # c_i: [5, d]
u = encode(question, embed_b)[None]  # [1, d]
o, p = attention.attention(u, memories, outputs, score_fn=attention.dot_scores)
print('hop weights p:', np.asarray(p)[0], ' next u = u + o:', (u + o).shape)

# %% [markdown]
# ## Neural Turing Machines (note 002)
#
# An NTM's controller reads and writes an external memory through attention. A head finds its
# weighting over the N rows in four steps (`attention.addressing`): content addressing
# $w^c = \text{softmax}(\beta \cos(k, M_i))$, interpolation with the previous weighting
# $w^g = g w^c + (1 - g) w_{t-1}$, a circular shift by a few rows, and sharpening
# $w_i \propto \tilde w_i^\gamma$. Reading is $r = \sum_i w_i M_i$; writing erases and adds.

# %%
memory = rng.standard_normal((8, 4), np.float32)  # N = 8 rows of width 4
key = memory[2] + 0.1 * rng.standard_normal(4).astype(np.float32)  # close to row 2
w_c = addressing.content_weights(memory, key, beta=np.float32(10.0))
w_g = addressing.interpolate(w_c, np.eye(1, 8, 5, dtype=np.float32)[0], gate=np.float32(0.9))
shift = np.array([0.0, 0.1, 0.9], np.float32)  # offsets -1, 0, +1
w_s = addressing.circular_shift(w_g, shift)
w = addressing.sharpen(w_s, gamma=np.float32(3.0))
for name, weights in [('content', w_c), ('interpolated', w_g), ('shifted', w_s), ('sharpened', w)]:
  print(f'{name:12s}', np.asarray(weights))
print('focus moved from row', int(np.argmax(w_c)), 'to row', int(np.argmax(w)))
read = addressing.read(memory, w)
new_memory = addressing.write(memory, w, erase=np.ones(4, np.float32), add=np.zeros(4, np.float32))
print('read:', np.asarray(read), ' the written row after erasing:', np.asarray(new_memory)[3])

# %% [markdown]
# ## Summary (note 002)
#
# Every application above is the same function, $A(q, K, V) = \sum_i \frac{\exp(q \cdot
# k_i)}{\sum_j \exp(q \cdot k_j)} v_i$, or for many queries $A(Q, K, V) = \text{softmax}(QK^T)V$.

# %%
Q = rng.standard_normal((3, 5), np.float32)
K = rng.standard_normal((4, 5), np.float32)
V = rng.standard_normal((4, 2), np.float32)
out, _ = attention.attention(Q, K, V, score_fn=attention.dot_scores)
scores = Q @ K.T
np.testing.assert_allclose(
  out, (np.exp(scores) / np.exp(scores).sum(1, keepdims=True)) @ V, rtol=1e-4, atol=1e-5
)

# %% [markdown]
# ## Self-Attention and Multi-head Attention (note 002)
#
# Each input $a^i$ gives $q^i = W^q a^i$, $k^i = W^k a^i$, $v^i = W^v a^i$; the output for
# position 2 is $b^2 = \sum_i \alpha'_{2,i} v^i$ with $\alpha'_{2,i}$ the softmax of
# $q^2 \cdot k^i / \sqrt{d_k}$. With $h$ heads each head has size $d_{model}/h$.

# %%
a = rng.standard_normal((4, 8), np.float32)  # a^1..a^4
W_q, W_k, W_v = (rng.standard_normal((8, 8), np.float32) / np.sqrt(8) for _ in range(3))
b = attention.scaled_dot_product_attention(a @ W_q, a @ W_k, a @ W_v)
alpha = attention.attention_weights(a @ W_q, a @ W_k)
print("α'_2 =", np.asarray(alpha)[1], ' b^2 =', np.asarray(b)[1])
heads = attention.split_heads(a @ W_q, 2)  # h = 2 heads of 8 / 2 = 4
print('heads of the queries:', heads.shape)

# %% [markdown]
# ## Sinusoidal Positional Encoding (note 002)
#
# $PE(pos, 2i) = \sin(pos / 10000^{2i/d_{model}})$ and $PE(pos, 2i+1) = \cos(pos /
# 10000^{2i/d_{model}})$. The note works out $d_{model} = 4$: position 0 is $[0, 1, 0, 1]$ and
# position 1 is $[\sin 1, \cos 1, \sin(1/100), \cos(1/100)] = [0.84147, 0.54030, 0.00999,
# 0.99995]$. `attention.sinusoidal_positions(length, d)` gives the same (sin on even features,
# cos on odd ones):

# %%
pe = np.asarray(attention.sinusoidal_positions(2, 4))
print('PE(0) =', ', '.join(f'{x:.8f}' for x in pe[0]))
print('PE(1) =', ', '.join(f'{x:.8f}' for x in pe[1]), ' (the note truncates to 5 decimals)')
np.testing.assert_allclose(pe[0], [0, 1, 0, 1], atol=1e-7)
np.testing.assert_allclose(pe[1], [0.84147, 0.54030, 0.00999, 0.99995], atol=1e-5)

# %% [markdown]
# The note's question: which properties should a good position encoding have? (1) unique for
# every position, (2) relative distances independent of the absolute position, (3) well defined
# for any length. The sinusoidal one has all three: no two of 1,000 positions coincide, the dot
# product $PE(p) \cdot PE(p + k)$ depends on the offset $k$ only, and any position can be encoded
# (`attention.sinusoidal_embedding` takes explicit positions).

# %%
pe = np.asarray(attention.sinusoidal_positions(1000, 16))
distances = np.linalg.norm(pe[:, None] - pe[None], axis=-1)
distances[np.diag_indices(1000)] = np.inf
print(f'(1) the closest two of 1,000 positions are {distances.min():.3f} apart')
assert distances.min() > 0
for offset in (1, 5):
  dots = [float(pe[p] @ pe[p + offset]) for p in (0, 100, 500)]
  print(f'(2) PE(p)·PE(p+{offset}) for p = 0, 100, 500:', np.round(dots, 4))
print('(3) PE(100000)[:4] =', np.asarray(attention.sinusoidal_embedding(np.array(100000), 16))[:4])
