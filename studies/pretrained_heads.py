"""Where the pretrained encoder's heads look, per layer and head, over the TREC questions.

    python -m studies.pretrained_heads                          # all-MiniLM-L6-v2, TREC test
    python -m studies.pretrained_heads --checkpoint=FOLDER --text=questions.tsv --json=h.json

Each question (the text before the tab of each line of `--text`) is encoded alone by the
checkpoint's tokenizer (`[CLS] pieces [SEP]`) and the checkpoint's encoder (models.pretrained),
in batches padded to a common length. For every layer and head, the attention weight that a real
query token gives to:

- previous: the token just before it (queries after [CLS]);
- next: the token just after it (queries before [SEP]);
- [CLS] and [SEP]: the sequence's [CLS] and [SEP] tokens;
- same word: the other WordPiece pieces of its own word (queries in words of two or more pieces);

averaged over those queries of all questions. Each measure prints as a table of layers x heads
(percent; a uniform head over a 12-token question would give about 8), and `--json` writes them.
Clark et al. (2019, "What Does BERT Look At?") found heads for each of these in BERT-base.
"""

import argparse
import json

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from data.pretrained_tokenizer import PretrainedTokenizer
from models import interventions, pretrained
from training import failures

MEASURES = ('previous', 'next', '[CLS]', '[SEP]', 'same word')


def read_texts(path: str, limit: int) -> list[str]:
  """The first `limit` texts of a `text<TAB>label` (or plain text) file."""
  with open(path, encoding='utf-8') as f:
    return [line.split('\t')[0].strip() for line in f if line.strip()][:limit]


def key_masks(word_ids: list[int | None], length: int) -> dict[str, np.ndarray]:
  """Per measure, `[T, T]` bool: the keys (columns) that count for each query (row) of one text
  of `length` real tokens, padded to `len(word_ids)` (the tokenizer's word of each token, None
  for specials and padding); a query the measure does not apply to has an all-False row."""
  size = len(word_ids)
  q, k = np.meshgrid(np.arange(size), np.arange(size), indexing='ij')
  real = (q < length) & (k < length)
  words = np.array([-1 if w is None else w for w in word_ids])
  same = (words[q] == words[k]) & (words[q] >= 0) & (q != k)
  return {
    'previous': real & (k == q - 1) & (q >= 1),
    'next': real & (k == q + 1),
    '[CLS]': real & (k == 0),
    '[SEP]': real & (k == length - 1),
    'same word': real & same,
  }


def head_table(checkpoint: str, texts: list[str], batch_size: int = 64) -> dict[str, np.ndarray]:
  """Per measure, `[L, N]` mean attention weight over the queries the measure applies to."""
  read = pretrained.read(checkpoint)
  model, _ = pretrained.load_encoder(read)
  tokenizer = PretrainedTokenizer(read.tokenizer_json)
  graphdef, state = nnx.split(model)
  self_attention = jax.jit(
    lambda s, ids: interventions.attention(nnx.merge(graphdef, s), 'self', ids, method='encode')
  )  # [B, L, N, T, T], captured inside the jit
  sums = {name: 0.0 for name in MEASURES}
  counts = {name: 0.0 for name in MEASURES}
  for start in range(0, len(texts), batch_size):
    encodings = tokenizer.encodings(texts[start : start + batch_size])
    width = -(-max(len(e.ids) for e in encodings) // 8) * 8  # few compiled shapes
    ids = np.full((len(encodings), width), tokenizer.pad_id, np.int32)
    for row, e in enumerate(encodings):
      ids[row, : len(e.ids)] = e.ids
    weights = np.asarray(self_attention(state, jnp.asarray(ids)))  # [B, L, N, T, T]
    for row, e in enumerate(encodings):
      word_ids = list(e.word_ids) + [None] * (width - len(e.ids))
      for name, mask in key_masks(word_ids, len(e.ids)).items():
        # Weight each applicable query gives to its counted keys, summed: [L, N].
        per_query = np.einsum('lnqk,qk->lnq', weights[row], mask)
        queries = mask.any(axis=1)
        sums[name] = sums[name] + per_query[..., queries].sum(-1)
        counts[name] += queries.sum()
  return {name: sums[name] / max(counts[name], 1) for name in MEASURES}


def markdown(table: dict[str, np.ndarray]) -> str:
  """One layers x heads table (percent) per measure."""
  out = []
  for name, grid in table.items():
    heads = grid.shape[1]
    out += [
      f"\n{name} (% of each query's attention)\n",
      '| layer | ' + ' | '.join(f'h{h}' for h in range(heads)) + ' |',
      '|---' * (heads + 1) + '|',
    ]
    out += [
      f'| {layer} | ' + ' | '.join(f'{100 * v:.0f}' for v in row) + ' |'
      for layer, row in enumerate(grid)
    ]
  return '\n'.join(out)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--checkpoint', default=pretrained.DEFAULT)
  parser.add_argument('--text', default='../shared/data/trec/test.tsv')
  parser.add_argument('--limit', type=int, default=500)
  parser.add_argument('--json', default='')
  args = parser.parse_args()
  table = head_table(args.checkpoint, read_texts(args.text, args.limit))
  print(markdown(table))
  if args.json:
    with open(args.json, 'w') as f:
      json.dump({name: grid.tolist() for name, grid in table.items()}, f, indent=1)


if __name__ == '__main__':
  failures.run('python -m studies.pretrained_heads', main)  # a user's error: one sentence
