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
# # Tutorial 100: inside a pretrained decoder, as TransformerLens users work
#
# The lecture tutorials build attention up; this one takes a trained model apart. It loads
# SmolLM2-135M-Instruct once (`make test` and `make llm` install it) and runs, on a batch of
# prompts, what a researcher moving from TransformerLens does in a notebook: cache every
# activation by name, ablate and patch heads, patch a path from sender to receiver heads, and
# attribute the logit difference to heads. Everything here is `interpret/`, the room that
# `prompt.py`, `eval.py --ablate_heads` and the studies call. Run it from the repository root
# (`python tutorials/100_inside_a_pretrained_decoder.py`) or open it in `tutorials/`.

# %%
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__)) if '__file__' in globals() else os.getcwd()
sys.path.insert(0, os.path.dirname(HERE))  # the repository root is Attend's import root

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from interpret import attribution, effects, figures, patching
from models import interventions
import sources

np.set_printoptions(precision=3, suppress=True)

# %% [markdown]
# ## The model, once
#
# `sources.load_decoder` reads a checkpoint (a short name, a Hugging Face folder, a `.gguf`) or
# a workdir of Attend's (e.g. a fine-tune) straight into the model's shapes. The prompts are the
# indirect-object task of Wang et al. (2022): the model should name the person who did *not*
# repeat (IO), not the one who did (S). Each has a corrupted twin with three other names, of
# the same length, for patching.

# %%
smol = sources.load_decoder('SmolLM2-135M-Instruct')
model, tok = smol.model, smol.tokenizer
cases = [  # (prompt, IO, S, corrupted twin)
  ('When Mary and John went to the store, John gave a drink to', 'Mary', 'John',
   'When Lisa and Mark went to the store, Emma gave a drink to'),
  ('When Anna and Paul went to the park, Paul gave a ball to', 'Anna', 'Paul',
   'When Kate and Adam went to the park, Ryan gave a ball to'),
  ('When Tom and Sarah went to the school, Tom gave a book to', 'Sarah', 'Tom',
   'When Jack and Laura went to the school, Mike gave a book to'),
]  # fmt: skip
ids = jnp.asarray([tok.encode(prompt) for prompt, *_ in cases])  # [B, T]: one length
other = jnp.asarray([tok.encode(twin) for *_, twin in cases])
io = jnp.asarray([tok.encode_pieces(' ' + name)[0] for _, name, _, _ in cases])
s = jnp.asarray([tok.encode_pieces(' ' + name)[0] for _, _, name, _ in cases])
print(ids.shape, tok.tokens(ids[0])[:8])

# %% [markdown]
# ## Every activation, by name
#
# `interventions.capture` runs the model and returns every tap it passed: TransformerLens's
# `hook_embed` is `embeddings`; per block `resid_pre`, `resid_mid`, `residual` (`hook_resid_post`),
# `attn_out`, `mlp_out`; per attention layer `queries`, `keys`, `values`, `weights`
# (`hook_pattern`) and `heads` (`hook_z`, before $W_O$). SmolLM2 has 9 query heads and 3
# key/value heads: query head $i$ reads key/value head $i // 3$.

# %%
logits, cache = interventions.capture(model, ids, method='token_logits')
for name in [
  'embeddings',
  'layers/20/resid_pre',
  'layers/20/self_attn/queries',
  'layers/20/self_attn/keys',
  'layers/20/self_attn/weights',
  'layers/20/self_attn/heads',
  'layers/20/attn_out',
  'layers/20/resid_mid',
]:
  print(f'{name:30s} {cache[name].shape}')  # fmt: skip
rows = jnp.arange(len(cases))
logit_diff = logits[rows, -1, io] - logits[rows, -1, s]
print('IO - S logit difference per prompt:', np.asarray(logit_diff))

# %% [markdown]
# ## Ablation and activation patching, one head at a time
#
# A `Metric` reads the logits; here the logit difference, one target pair per prompt.
# `head_effects` replaces each head's output (zero, a mean, or the corrupted twin's) and returns
# the change, a `[layers, heads]` map, NaN where a head was not asked for. The engine runs nine
# edited passes per compiled call. We patch SmolLM2's heads of layers 19-25, where the IOI study
# (docs/llm_studies.md) found its S-inhibition heads (19.2, 20.0), name movers (layer 23) and
# negative name mover (24.4); in GPT-2 small, whose 12 layers are fewer than SmolLM2's 30, Wang
# et al. found the name movers in layers 9-10. A whole sweep is `heads=None`: 270 heads, about a
# minute here. Then we zero three heads at once with `ablated_metric`.

# %%
metric = effects.Metric('logit_diff', io, s)
upper = [(layer, head) for layer in range(19, 26) for head in range(9)]
clean, patched = effects.head_effects(
  model, ids, metric, ablation='patch', other=other, heads=upper, progress=print
)
worst = np.unravel_index(np.nanargmin(patched), patched.shape)
print(f'clean {clean:.2f}; patching head {worst[0]}.{worst[1]} costs {patched[worst]:.2f}')
three = [(int(worst[0]), int(worst[1])), (20, 0), (23, 0)]
print(f'{three} zeroed together: {effects.ablated_metric(model, ids, metric, three):.2f}')

# %% [markdown]
# ## Direct logit attribution
#
# Each head's output at the last position through its share of $W_O$, the final norm at the
# clean run's scale and the unembedding: its direct share of the logit difference.

# %%
dla = attribution.head_attributions(
  model, ids, lambda x: x[..., rows, io] - x[..., rows, s]
)  # fmt: skip
mover = np.unravel_index(np.argmax(dla), dla.shape)
print(f'largest direct share: head {mover[0]}.{mover[1]}, {dla[mover]:.2f}')

# %% [markdown]
# ## Path patching
#
# How much of a sender's effect reaches that head through its queries, and no other way? The
# sender's output comes from the corrupted run, every other head stays at its clean output, the
# receiver's queries are recorded and put into a clean run.

# %%
senders = [(layer, head) for layer in range(19, int(mover[0])) for head in range(9)]
_, through_queries = patching.path_patching(
  model, ids, other, metric, [tuple(map(int, mover))], into=('queries',), senders=senders,
  progress=print,
)  # fmt: skip
top = np.unravel_index(np.nanargmin(through_queries), through_queries.shape)
print(f'sender {top[0]}.{top[1]} through {mover[0]}.{mover[1]} queries: {through_queries[top]:.2f}')

# %% [markdown]
# ## The maps
#
# `interpret.figures` draws every layers x heads map of Attend (grey: not computed).

# %%
figure = plt.figure(figsize=(15, 5.5))
panels = [
  ('patched from the corrupted twin', patched, 'change in IO - S'),
  ('direct logit attribution', dla, 'share of IO - S'),
  (f'path patching into {mover[0]}.{mover[1]} queries', through_queries, 'change in IO - S'),
]
for index, (title, values, label) in enumerate(panels):
  axes = figure.add_subplot(1, 3, index + 1)
  figures.draw_head_map(figure, axes, values, title=title, label=label)
figure.tight_layout()
figure.savefig('inside_smollm2.png', dpi=80)
print('saved inside_smollm2.png')
