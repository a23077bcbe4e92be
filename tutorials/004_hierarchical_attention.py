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
# # Lecture 004: the Hierarchical Attention Network, then the Transformer's pieces
#
# Course note 004 ("All About Attention") reads two papers: the Hierarchical Attention Network
# for document classification (Yang et al. 2016), whose attention pools words into sentences and
# sentences into a document with a learned query, and "Attention Is All You Need". This notebook
# computes the HAN's formulas with Attend's functions, trains its word attention for a few
# seconds and draws which words it picks, then checks the Transformer pieces the note lists. Run
# it from the repository root (`python tutorials/004_hierarchical_attention.py`) or open it in
# `tutorials/`.

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
from models.attention_layer import MultiHeadAttention
from models.layers import AttentionPooling, FeedForward
from models.stack_config import AttentionConfig

np.set_printoptions(precision=3, suppress=True)
rng = np.random.default_rng(0)

# %% [markdown]
# ## Hierarchical Attention Network (note 004)
#
# A BiGRU reads the words of sentence $i$ into states $h_{it}$. Instead of keeping only the last
# state, the word attention scores every word:
#
# $$u_{it} = \tanh(W_w h_{it} + b_w), \qquad \alpha_{it} = \frac{\exp(u_{it}^\top u_w)}{\sum_t
# \exp(u_{it}^\top u_w)}, \qquad s_i = \sum_t \alpha_{it} h_{it}$$
#
# $u_w$ is one learned vector shared by every sentence: the note reads it as a query pattern,
# "does this word carry important information?". `attention.attention_pooling(h, u_w,
# keys=u)` is the softmax and the weighted sum; `models.layers.AttentionPooling` owns $W_w$,
# $b_w$ and $u_w$.

# %%
T, H, A = 6, 8, 5
h = rng.standard_normal((T, H), np.float32)  # h_i1..h_iT
W_w = rng.standard_normal((H, A), np.float32) / np.sqrt(H)
b_w = rng.standard_normal((A,), np.float32) / 10
u_w = rng.standard_normal((A,), np.float32)
u = np.tanh(h @ W_w + b_w)  # u_it: [T, A]
s, alpha = attention.attention_pooling(h, u_w, keys=u)
alpha_by_hand = np.exp(u @ u_w) / np.exp(u @ u_w).sum()
np.testing.assert_allclose(alpha, alpha_by_hand, rtol=1e-5)
np.testing.assert_allclose(s, alpha_by_hand @ h, rtol=1e-5, atol=1e-6)
print('α_i =', np.asarray(alpha), '\ns_i =', np.asarray(s))

# %% [markdown]
# The sentence level repeats the same two steps over the sentence vectors $s_i$ (a BiGRU, then a
# pooling with its own context vector $u_s$) to get the document vector, which a linear layer
# classifies. `models.HAN` is the whole network; on documents `[B, S, W]` its word weights
# `[B, S, W]` and sentence weights `[B, S]`, with exactly 0 on padding (id 0 here), are read by
# name: `interventions.capture` records every intermediate, and `HAN.attention_names` says which
# of them are the poolings' weights.

# %%
docs = rng.integers(1, 30, size=(2, 3, 5))
docs[0, 2] = 0  # document 0 has two sentences
docs[1, 1, 3:] = 0  # a short sentence


@jax.jit
def han_weights(docs):
  han = models.HAN(
    vocab_size=30, num_classes=4, pad_id=0, embed_dim=8, hidden_dim=8, rngs=nnx.Rngs(0)
  )
  logits, captured = interventions.capture(han, docs, method='classify')
  word = interventions.stack(captured, models.HAN.attention_names['word'])  # [B*S, 1, W]
  sentence = interventions.stack(captured, models.HAN.attention_names['sentence'])  # [B, 1, S]
  return logits, {'word': word.reshape(docs.shape), 'sentence': sentence[:, 0]}


logits, weights = han_weights(docs)
print(
  'logits',
  logits.shape,
  ' word weights',
  weights['word'].shape,
  ' sentence weights',
  weights['sentence'].shape,
)
print('sentence weights (document 0 has no third sentence):', np.asarray(weights['sentence']))

# %% [markdown]
# ### Trained: which words does the attention pick?
#
# A small task where we know the answer: each "sentence" has eight filler words and one topic
# word (`music`, `sport`, `food` or `science`) somewhere in it, and the label is the topic. A
# word-level attention classifier (embeddings, `AttentionPooling`, a linear layer: the HAN's word
# level without its GRU) trained for 150 steps should put its weight on the topic word. Attend's
# full HAN on generated documents (`configs/han.py`) reaches 100.0% test accuracy, with the
# highest sentence weight on a key sentence for 100.0% of the documents.

# %%
TOPICS = ['music', 'sport', 'food', 'science']
FILLER = [
  'the',
  'a',
  'of',
  'and',
  'to',
  'is',
  'in',
  'it',
  'was',
  'for',
  'on',
  'with',
  'as',
  'at',
  'by',
  'this',
  'that',
  'from',
  'or',
  'an',
  'we',
  'they',
  'be',
  'are',
]
VOCAB = ['<pad>'] + TOPICS + FILLER
LENGTH = 9


def topic_batch(n):
  """Sentences of filler word ids with one topic word at a random place; labels = the topic."""
  words = rng.integers(1 + len(TOPICS), len(VOCAB), size=(n, LENGTH))
  labels = rng.integers(0, len(TOPICS), size=n)
  words[np.arange(n), rng.integers(0, LENGTH, size=n)] = 1 + labels
  return words, labels


class WordAttentionClassifier(nnx.Module):
  """Embeddings -> HAN attention pooling -> linear layer."""

  def __init__(self, rngs: nnx.Rngs):
    self.embed = nnx.Embed(len(VOCAB), 16, rngs=rngs)
    self.pool = AttentionPooling(16, 16, rngs=rngs)
    self.output = nnx.Linear(16, len(TOPICS), rngs=rngs)

  def __call__(self, ids):
    pooled, weights = self.pool(self.embed(ids), ids != 0)  # [B, 16], [B, T]
    return self.output(pooled), weights


classifier = WordAttentionClassifier(nnx.Rngs(0))
optimizer = nnx.Optimizer(classifier, optax.adam(1e-2), wrt=nnx.Param)


@nnx.jit
def train_step(classifier, optimizer, ids, labels):
  def loss_fn(classifier):
    logits, _ = classifier(ids)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

  loss, grads = nnx.value_and_grad(loss_fn)(classifier)
  optimizer.update(classifier, grads)
  return loss


for step in range(150):
  loss = train_step(classifier, optimizer, *topic_batch(64))
  if step % 50 == 0 or step == 149:
    print(f'step {step:3d}  loss {float(loss):.4f}')

ids, labels = topic_batch(256)
logits, weights = nnx.jit(lambda c, ids: c(ids))(classifier, ids)
accuracy = float((np.asarray(logits).argmax(-1) == labels).mean())
on_topic = float((np.asarray(weights).argmax(-1) == np.argmax((ids >= 1) & (ids <= 4), -1)).mean())
print(f'accuracy {accuracy:.3f}; the strongest weight is on the topic word in {on_topic:.3f}')
assert accuracy > 0.9 and on_topic > 0.9

# %%
fig, ax = plt.subplots(figsize=(6, 2.4))
ax.imshow(np.asarray(weights[:4]), cmap='Reds', vmin=0, vmax=1)
for row in range(4):
  for col in range(LENGTH):
    ax.text(
      col,
      row,
      VOCAB[ids[row, col]],
      ha='center',
      va='center',
      fontsize=7,
      color='white' if weights[row, col] > 0.5 else 'black',
    )
ax.set_xticks([])
ax.set_yticks(range(4), [TOPICS[label] for label in labels[:4]])
ax.set_title('word attention after 150 steps')
fig.tight_layout()
fig.savefig('word_attention.png', dpi=100)
print('wrote word_attention.png')

# %% [markdown]
# ## Transformer (note 004)
#
# The note then reads the Transformer: self-attention $\text{softmax}(QK^\top/\sqrt{d_k})V$
# with Q, K and V projected from the same X (tutorials 000 and 001 compute it), multi-head
# attention $\text{Concat}(head_1, \dots, head_h)W^O$ with $h = 8$ in the paper (do not forget
# $W^O$, the note warns), and the position-wise feed-forward network
#
# $$FFN(x) = \max(0, xW_1 + b_1) W_2 + b_2$$
#
# after each of which comes $\text{LayerNorm}(x + \text{sublayer}(x))$.
# `models.layers.FeedForward` is the FFN:

# %%
ffn = FeedForward(8, 32, activation='relu', rngs=nnx.Rngs(0))
x = rng.standard_normal((3, 8), np.float32)
W1, b1 = np.asarray(ffn.w_1.kernel[...]), np.asarray(ffn.w_1.bias[...])
W2, b2 = np.asarray(ffn.w_2.kernel[...]), np.asarray(ffn.w_2.bias[...])
np.testing.assert_allclose(ffn(x), np.maximum(0, x @ W1 + b1) @ W2 + b2, rtol=1e-4, atol=1e-5)
print('FFN(x) = max(0, xW1 + b1)W2 + b2: checked')

# %% [markdown]
# In the decoder's second attention sublayer only the queries come from the decoder; keys and
# values come from the encoder's output. `MultiHeadAttention(y, context=memory)` is that
# cross-attention: one row of weights per decoder position over the encoder positions.

# %%
mha = MultiHeadAttention(AttentionConfig(d_model=16, num_heads=8), rngs=nnx.Rngs(0))  # h = 8
memory = rng.standard_normal((1, 7, 16), np.float32)  # encoder output: 7 positions
y = rng.standard_normal((1, 3, 16), np.float32)  # decoder states: 3 positions
out, captured = interventions.capture(mha, y, context=memory)  # the weights, read by name
w = captured['weights']
print('output', out.shape, ' weights [B, heads, decoder positions, encoder positions]', w.shape)

# %% [markdown]
# Finally a linear layer maps the decoder's last states to one logit per vocabulary word and a
# softmax turns them into probabilities; the most probable word is the output at that step (see
# `models.decoding` for greedy, beam and sampling search).
