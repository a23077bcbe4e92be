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
# # Lecture 003: from Bahdanau attention to the Transformer, ViT, BERT and GPT
#
# Course note 003 ("注意力机制长文") traces attention from Bahdanau's additive score in an RNN
# encoder–decoder, through its general form and its variants, to the Transformer and its
# applications: the Vision Transformer and pretrained language models (BERT, GPT, T5). This
# notebook computes each step with Attend's functions, in the note's order. Run it from the
# repository root (`python tutorials/003_transformer_bert_gpt_vit.py`) or open it in
# `tutorials/`.

# %%
import functools
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__)) if '__file__' in globals() else os.getcwd()
sys.path.insert(0, os.path.dirname(HERE))  # the repository root is Attend's import root

from flax import nnx
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits

import attention
import models
from models import interventions
from models.blocks import EncoderLayer
from models.stack_config import StackConfig
from models.vision import patchify
from tasks.language import bert_mask

np.set_printoptions(precision=3, suppress=True)
rng = np.random.default_rng(0)

# %% [markdown]
# ## Bahdanau attention (note 003, "解释")
#
# The context for output $i$ is $C_i = \sum_j \alpha_{ij} h_j$ with
# $\alpha_{ij} = \text{softmax}_j(e_{ij})$ and the alignment model
# $e_{ij} = a(s_{i-1}, h_j) = v^\top \tanh(W s_{i-1} + U h_j)$, with $W \in \mathbb{R}^{n \times
# n}$, $U \in \mathbb{R}^{n \times 2n}$ (the encoder is bidirectional: $h_j$ has $2n$ features)
# and $v \in \mathbb{R}^n$. In `attention.additive_scores(q, k, w_q, w_k, v)` the projections are
# stored transposed (`w_q` is $W^\top$, `w_k` is $U^\top$), so that queries and keys are rows.

# %%
n, T_x = 4, 5
s_prev = rng.standard_normal((1, n), np.float32)  # s_{i-1}
h = rng.standard_normal((T_x, 2 * n), np.float32)  # h_1..h_Tx, bidirectional
W = rng.standard_normal((n, n), np.float32) / 2
U = rng.standard_normal((n, 2 * n), np.float32) / 2
v = rng.standard_normal((n,), np.float32)
e = attention.additive_scores(s_prev, h, W.T, U.T, v)  # [1, T_x]
e_by_hand = np.array([v @ np.tanh(W @ s_prev[0] + U @ h_j) for h_j in h])
np.testing.assert_allclose(e[0], e_by_hand, rtol=1e-5)
alpha = attention.masked_softmax(e)
print('e_ij =', np.asarray(e)[0], '\nα_ij =', np.asarray(alpha)[0])
print('C_i =', np.asarray(attention.attend(alpha, h))[0])

# %% [markdown]
# Projecting the keys costs as much as everything else, and the keys do not change while the
# decoder runs: `attention.project_keys(h, U.T)` does it once, and every step passes the result
# as `k_proj` (this is what `models.Seq2Seq` does).

# %%
k_proj = attention.project_keys(h, U.T)
np.testing.assert_allclose(
  attention.additive_scores(s_prev, None, W.T, None, v, k_proj=k_proj), e, rtol=1e-5
)

# %% [markdown]
# ## The general form (note 003, "注意力机制的一般化形式")
#
# $\text{Attention}(\text{Query}, \text{Source}) = \sum_i \text{Similarity}(\text{Query},
# \text{Key}_i) \cdot \text{Value}_i$, computed in three stages: 1.1 a raw score of the query
# against each key (a dot product as in Luong, a cosine, or an MLP as in Bahdanau), 1.2 a
# normalisation (softmax), 2 a weighted sum of the values. In Attend each stage is a function:
# a score from `attention.SCORES`, `attention.masked_softmax`, `attention.attend`; and
# `attention.attention(q, k, v, score_fn=...)` chains them. Every registered score on the same
# query and keys:

# %%
d = 6
q = rng.standard_normal((1, d), np.float32)
keys = rng.standard_normal((4, d), np.float32)
values = rng.standard_normal((4, 2), np.float32)
params = {
  'dot': {},
  'scaled_dot': {},
  'general': {'w': rng.standard_normal((d, d), np.float32) / np.sqrt(d)},
  'additive': {
    'w_q': rng.standard_normal((d, d), np.float32) / np.sqrt(d),
    'w_k': rng.standard_normal((d, d), np.float32) / np.sqrt(d),
    'v': rng.standard_normal((d,), np.float32),
  },
  'cosine': {'scale': 4.0},
}
assert sorted(params) == sorted(attention.SCORES)
for name, kwargs in params.items():
  score_fn = functools.partial(attention.get_score_fn(name), **kwargs)
  out, weights = attention.attention(q, keys, values, score_fn=score_fn)
  print(f'{name:10s} scores {np.asarray(score_fn(q, keys))[0]}  weights {np.asarray(weights)[0]}')

# %% [markdown]
# ### Scaled dot-product (note 003, "简单的 Scaled Dot-Product Attention")
#
# $\text{score}_i = h_i^\top V / \lambda$ with a hyperparameter $\lambda$, usually $\sqrt{d}$:
# `attention.scaled_dot_scores(q, k)` uses $\sqrt{d}$, `temperature=λ` any other value. A larger
# λ gives smoother weights:

# %%
for lam in (0.5, np.sqrt(d), 10.0):
  w = attention.masked_softmax(attention.scaled_dot_scores(q, keys, temperature=float(lam)))
  entropy = float(attention.attention_entropy(w)[0])
  print(f'λ = {lam:5.2f}: weights {np.asarray(w)[0]}  entropy {entropy:.3f}')

# %% [markdown]
# ### Self-attention, as the note writes it (note 003, "Self-Attention 中的注意力机制实现")
#
# With inputs as columns, $Q = W^q I$, $K = W^k I$, $V = W^v I$, $A = K^\top Q$, $\hat A$ its
# column-wise softmax and $O = V \hat A$. Attend writes the same with inputs as rows
# (`[T, D]`): $\text{softmax}(QK^\top) V$, the transpose of the note's $O$.

# %%
I = rng.standard_normal((d, 5), np.float32)  # 5 inputs as columns
Wq, Wk, Wv = (rng.standard_normal((d, d), np.float32) / np.sqrt(d) for _ in range(3))
Qc, Kc, Vc = Wq @ I, Wk @ I, Wv @ I
A = Kc.T @ Qc  # [keys, queries]
A_hat = np.exp(A) / np.exp(A).sum(0, keepdims=True)  # softmax over the keys
O = Vc @ A_hat  # [d, queries]
rows, _ = attention.attention(Qc.T, Kc.T, Vc.T, score_fn=attention.dot_scores)
np.testing.assert_allclose(rows, O.T, rtol=1e-4, atol=1e-5)
print('V · softmax(KᵀQ) == (softmax(Q Kᵀ) V)ᵀ: checked')

# %% [markdown]
# ## Transformer (note 003, "Transformer")
#
# Each encoder layer is multi-head self-attention and a feed-forward network, each sublayer
# returning `LayerNorm(x + Sublayer(x))`. The note calls PyTorch's
# `nn.TransformerEncoderLayer(d_model=32, nhead=8)` on `x` of shape (2, 16, 32); Attend's
# `models.blocks.EncoderLayer` with the same sizes (a smaller feed-forward width here) keeps the
# shape. The note also observes that attention alone ignores order: shuffle the sequence and the
# outputs shuffle with it, which is why positional encodings are added to the embeddings.

# %%
stack = StackConfig(d_model=32, num_heads=8, d_ff=64, num_layers=1, dropout_rate=0.0)
x = rng.standard_normal((2, 16, 32), np.float32)
perm = rng.permutation(16)


@jax.jit
def encoder_layer(x):
  layer = EncoderLayer(stack, rngs=nnx.Rngs(0))  # the same parameters at every call
  return layer(x, None)


output = encoder_layer(x)
print(output.shape)  # (2, 16, 32)
np.testing.assert_allclose(encoder_layer(x[:, perm]), output[:, perm], rtol=1e-4, atol=1e-4)
print('shuffled input -> equally shuffled output: checked')

# %% [markdown]
# The decoder's first sublayer is masked self-attention (position $i$ sees positions up to $i$:
# `attention.causal_mask`), its second attends from the decoder (Q) to the encoder's output (K
# and V). The positional encodings $PE_{(pos, 2i)} = \sin(pos/10000^{2i/d})$,
# $PE_{(pos, 2i+1)} = \cos(pos/10000^{2i/d})$ give every feature its own wavelength:

# %%
pe = np.asarray(attention.sinusoidal_positions(64, 32))
fig, ax = plt.subplots(figsize=(5, 3))
ax.imshow(pe.T, cmap='RdBu', aspect='auto')
ax.set_xlabel('position')
ax.set_ylabel('feature')
ax.set_title('Sinusoidal positional encodings')
fig.tight_layout()
fig.savefig('positional_encodings.png', dpi=80)
print('wrote positional_encodings.png')

# %% [markdown]
# ## Vision Transformer (note 003, "Vision Transformer")
#
# ViT (1) cuts the image into fixed-size patches and flattens each, (2) projects them linearly
# into patch embeddings, (3) puts a learned class token in front, (4) adds position embeddings
# and runs Transformer encoders, (5) classifies the class token's final state. On an 8×8 digit
# with 2×2 patches: 16 patches of 4 pixels, 17 tokens with the class token.

# %%
digits = load_digits()
images = (digits.images[:4, :, :, None] / 16.0).astype(np.float32)  # [B, 8, 8, 1]
patches = patchify(images, 2)
print('patches:', patches.shape)  # [4, 16, 4]


@jax.jit
def vit_forward(images):
  """A 2-layer ViT, built and run in one compiled call (one compilation, not one per op), and
  its self-attention read by name: the taps its `attention_names` lists under `'self'`."""
  vit = models.ViT(
    image_shape=(8, 8, 1),
    num_classes=10,
    patch_size=2,
    stack=StackConfig(
      num_layers=2,
      d_model=16,
      num_heads=2,
      d_ff=32,
      norm='pre',
      activation='gelu',
      positions='learned',
      dropout_rate=0.0,
    ),
    rngs=nnx.Rngs(0),
  )
  logits, captured = interventions.capture(vit, images, method='classify_image')
  return logits, interventions.stack(captured, models.ViT.attention_names['self'])


logits, weights = vit_forward(images)
print(
  'logits:',
  logits.shape,
  ' self-attention [B, layers, heads, tokens, tokens]:',
  weights.shape,
)

# %% [markdown]
# Which patches does the class token draw on? Attention rollout (Abnar & Zuidema 2020,
# `attention.attention_rollout`) averages each layer's heads, adds the residual path and
# multiplies the layers. This model is untrained, so the map is close to uniform: trained on
# the digits (`configs/vit_digits.py`, 98.9% test accuracy), `eval.py` draws the same map over
# every example, and it follows the strokes.

# %%
rollout = attention.attention_rollout(weights)  # [B, 17, 17]
cls_map = np.asarray(rollout[0, 0, 1:]).reshape(4, 4)  # class token -> 16 patches
print('class-token rollout over the 4×4 patches (rows sum with the class token to 1):\n', cls_map)

# %% [markdown]
# ## Pretrained language models (note 003, "预训练语言模型和大型语言模型")
#
# ### Autoencoding: BERT
#
# BERT fills in blanks: 15% of the tokens are picked to be predicted; of those 80% become
# `[MASK]`, 10% a random token and 10% stay unchanged, and the model reads the whole sequence in
# both directions. `tasks.language.bert_mask` does the corruption:

# %%
ids = rng.integers(4, 100, size=(200, 50))  # ids 0-3 are the special tokens
mask = jax.jit(functools.partial(bert_mask, mask_id=4, vocab_size=100))  # one compilation
corrupted, picked = mask(jax.random.PRNGKey(0), jnp.asarray(ids))
corrupted, picked = np.asarray(corrupted), np.asarray(picked)
print(
  f'picked {picked.mean():.3f} of the tokens; of those {(corrupted[picked] == 4).mean():.2f} '
  f'masked, {(corrupted[picked] == ids[picked]).mean():.2f} kept, the rest random'
)

# %% [markdown]
# ### Autoregressive: GPT
#
# GPT factorises $p(T) = \prod_i p(x_i \mid x_{<i})$: causal self-attention lets position $i$
# see only tokens before it. `models.DecoderLM` returns next-token logits at every position;
# changing a later token leaves the earlier predictions untouched.


# %%
@jax.jit
def gpt_logits(tokens):
  """Next-token logits of a 1-layer GPT (the same parameters at every call)."""
  gpt = models.DecoderLM(
    vocab_size=20,
    pad_id=0,
    stack=StackConfig(
      num_layers=1, d_model=16, num_heads=2, d_ff=32, norm='pre', positions='rope', dropout_rate=0.0
    ),
    rngs=nnx.Rngs(0),
  )
  return gpt.token_logits(tokens)


tokens = rng.integers(4, 20, size=(1, 8))
changed = tokens.copy()
changed[0, 5] = (changed[0, 5] + 1 - 4) % 16 + 4
a, b = np.asarray(gpt_logits(tokens)), np.asarray(gpt_logits(changed))
print('positions whose logits changed:', np.nonzero(np.abs(a - b).max(-1)[0] > 1e-6)[0])
log_probs = jax.nn.log_softmax(a[0, :-1])  # p(x_{i+1} | x_{<=i})
print('log p(x_2..x_8 | x_1) =', float(log_probs[np.arange(7), tokens[0, 1:]].sum()))

# %% [markdown]
# ### Encoder–decoder: T5
#
# T5 casts every task as text to text with an encoder–decoder, and replaces absolute positions
# by a learned bias per bucket of the key–query offset: exact for small offsets, log-spaced for
# larger ones (`attention.t5_buckets`; `--config.model.positions=t5` in every Transformer-family
# model).

# %%
offsets = np.array([-100, -20, -8, -3, -1, 0, 1, 3, 8, 20, 100])
print('offset:', offsets)
print('bucket:', np.asarray(attention.t5_buckets(offsets, bidirectional=True)))
