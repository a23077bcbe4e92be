"""How far two sides' KV-cache presses agree (benchmarks/press_agreement.py): which `(head,
position)` entries each keeps, where scores tie at a budget's boundary, whether the greedy answers
after them are the same; and the table of it per press x ratio."""

import numpy as np

SHOWN = 6  # differing heads listed per press x ratio


def bits(mask: np.ndarray) -> list[str]:
  """A `[K, S]` kept mask as one '0'/'1' string per head, as the peer writes them."""
  return [''.join('1' if kept else '0' for kept in row) for row in np.asarray(mask, bool)]


def compare_kept(ours: list[list[str]], theirs: list[list[str]]) -> dict:
  """Two sides' kept sets of one context (per layer, per head a '0'/'1' string): per layer the
  share of `(head, position)` flags that agree, and per differing layer and head the positions
  only Attend keeps and those only kvpress keeps."""
  if len(ours) != len(theirs):
    raise ValueError(f'The sides pressed {len(ours)} and {len(theirs)} layers.')
  shares, differ = [], {}
  for layer, (a, b) in enumerate(zip(ours, theirs)):
    a, b = np.array([list(h) for h in a]) == '1', np.array([list(h) for h in b]) == '1'
    if a.shape != b.shape:
      raise ValueError(f'layer {layer}: kept masks of shapes {a.shape} and {b.shape}.')
    shares.append(float(np.mean(a == b)))
    for head in np.flatnonzero((a != b).any(axis=1)):
      differ.setdefault(layer, {})[int(head)] = (
        np.flatnonzero(a[head] & ~b[head]).tolist(),
        np.flatnonzero(b[head] & ~a[head]).tolist(),
      )
  return dict(shares=shares, differ=differ)


def same_answer(ours: list[int], theirs: list[int], eos_ids: list[int]) -> bool:
  """Whether two greedy answers are the same tokens up to the first EOS (included); Attend's
  answer is padded after its EOS, kvpress's stops there."""

  def cut(ids: list[int]) -> list[int]:
    for i, token in enumerate(ids):
      if token in eos_ids:
        return ids[: i + 1]
    return ids

  return cut(list(ours)) == cut(list(theirs))


def boundary_ties(scores: np.ndarray, counts: list[int]) -> int:
  """Heads of one layer `[K, S]` whose `count`-th and `count+1`-th best scores are equal: where
  which position is kept depends on the tie rule. `counts` per head."""
  ordered = -np.sort(-scores, axis=-1)
  return int(sum(c < s.size and s[c - 1] == s[c] for s, c in zip(ordered, counts)))


def summarise(results: list[dict], eos_ids: list[int]) -> dict:
  """`results` (one per sample x press x ratio: ours, theirs, answers, ties) -> the table."""
  table = {}
  for row in results:
    key = f'{row["press"]}@{row["ratio"]}'
    entry = table.setdefault(key, dict(press=row['press'], ratio=row['ratio'], rows=[]))
    entry['rows'].append(row)
  out = {}
  for key, entry in table.items():
    shares, identical, differ, ties, answers = [], [], [], 0, []
    for row in entry['rows']:
      kept = compare_kept(row['ours'], row['theirs'])
      shares += kept['shares']
      identical += [share == 1.0 for share in kept['shares']]
      differ += [
        f'sample {row["sample"]} layer {layer} head {head}: only Attend keeps {mine[:4]}, '
        f'only kvpress {yours[:4]}'
        for layer, heads in kept['differ'].items()
        for head, (mine, yours) in heads.items()
      ]
      ties += row.get('boundary_ties', 0)
      answers.append(same_answer(row['answer'], row['peer_answer'], eos_ids))
    out[key] = dict(
      press=entry['press'],
      ratio=entry['ratio'],
      equal_share_mean=float(np.mean(shares)),
      equal_share_min=float(np.min(shares)),
      layers_identical=float(np.mean(identical)),
      differ=differ[:SHOWN],
      differing_heads=len(differ),
      boundary_ties=ties,
      answers_identical=float(np.mean(answers)),
    )
  return out
