"""Attend's KV-cache presses against NVIDIA's kvpress: the same weights, the same contexts, which
positions each keeps and whether the greedy answers after them are the same.

    make llm kvpress   # SmolLM2's GGUF for Attend; kvpress 0.5 in its own environment
    python -m benchmarks.press_agreement --lengths=512 --out=runs/press_agreement.json

Contexts are RULER's retrieval prompts (`data.retrieval_tasks`, `--tasks`, one sample each per
length and seed), sized in SmolLM2's tokens. kvpress's side (benchmarks/kvpress_peer.py, started
in `.venv-kvpress` with transformers reading the same GGUF file, float32) runs its pipeline's
protocol: chat template, context prefilled under the press, question, greedy answer; it records
the token ids it built, and Attend reads exactly those: `models.compression.kept_positions` for
what each press keeps, then prefill -> layer_scores -> kept_entries -> compress -> answer.

Per press x ratio the result gives, over samples and layers: the share of `(head, position)`
kept flags that agree (mean and min over layers), the share of layers kept identically, the
first heads that differ (the positions only Attend keeps, those only kvpress keeps), the heads
whose scores tie at their budget's boundary on Attend's side (where the tie rules may differ:
Attend keeps the lower position, `jax.lax.top_k`; torch.topk's order among equal scores is
unspecified) and the share of answers identical up to EOS. `random` is left out: the two draw
from different generators, so no agreement is expected.

Measured (kvpress 0.5.5, transformers 5.2.0, torch 2.13.0; a 2-core CPU; needle_book at 502
tokens, ratios 0.25/0.5/0.75, and 1,014 at 0.5; needle_noise at 500): every answer is the same,
and every press keeps the same positions in every layer and head but where scores tie: Knorm's
first layer, where the keys of one token at different positions differ by their rotation alone
(norms equal or one float32 ulp apart; the sides keep different copies of the same token), and
on needle_noise expected attention at 0.25 in one head, whose softmax underflows to exactly 0 for
177 of 500 positions, the budget's cut falling among them. KVzip (`KVzipPress(layerwise=True)`,
reading the repeat block kvpress recorded): identical kept sets and answers on both prompts.
"""

import argparse
import json
import os
from pathlib import Path
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from attention.presses import get_press, kept_count, pyramid_budget
from benchmarks import machine
from benchmarks.kept_agreement import bits, boundary_ties, same_answer, summarise
from data import retrieval_tasks
from data.pretrained_tokenizer import PretrainedTokenizer
from models import compression, pretrained

REPO = Path(__file__).resolve().parent.parent
KVPRESS_PYTHON = REPO / '.venv-kvpress' / 'bin' / 'python'
CHECKPOINT = 'SmolLM2-135M-Instruct'
PRESSES = (
  'knorm',
  'streaming_llm',
  'snapkv',
  'tova',
  'observed_attention',
  'expected_attention',
  'pyramidkv',
  'adakv',
  'kvzip',
)
RATIOS = (0.25, 0.5, 0.75)
FOLDER = '~/.cache/attend/kvpress/SmolLM2-135M-Instruct-float32'  # transformers' copy of the GGUF


def make_samples(tokenizer, lengths: list[int], tasks: list[str], seed: int, book: str) -> list:
  """RULER prompts of each task and length, with Attend's ids of their context and question."""
  count = lambda text: len(tokenizer.encode(text))
  samples = []
  for length in lengths:
    for task in tasks:
      (sample,) = retrieval_tasks.samples(task, count, length, n=1, seed=seed, book_path=book)
      samples.append(
        dict(
          task=task,
          length=length,
          context=sample.context,
          question=sample.question,
          answer_prefix=sample.answer_prefix,
          answers=list(sample.answers),
          context_ids=tokenizer.encode(sample.context),
          question_ids=tokenizer.encode(sample.question),
        )
      )
  return samples


def kvpress_run(module: str, job: dict) -> dict:
  """Runs the script `module` (a dotted name) with `--job=JOB --out=OUT` in kvpress's
  environment (`make kvpress`) on `job`, and returns the JSON it writes to OUT."""
  if not KVPRESS_PYTHON.exists():
    raise SystemExit(f'{KVPRESS_PYTHON} is missing: make kvpress')
  with tempfile.TemporaryDirectory() as folder:
    job_path, out_path = os.path.join(folder, 'job.json'), os.path.join(folder, 'peer.json')
    with open(job_path, 'w', encoding='utf-8') as f:
      json.dump(job, f)
    command = [str(KVPRESS_PYTHON), '-m', module, '--job', job_path, '--out', out_path]
    subprocess.run(command, cwd=REPO, check=True)
    with open(out_path, encoding='utf-8') as f:
      return json.load(f)


def run_peer(job: dict, saved: str) -> tuple[dict, float]:
  """kvpress's side in its own environment, its results and its wall time; saved to `saved`,
  and read back from there instead when it holds the results of the same job."""
  if os.path.exists(saved):
    with open(saved, encoding='utf-8') as f:
      peer = json.load(f)
    if peer.get('job') == job:
      return peer, peer['seconds']
  start = time.perf_counter()
  peer = {**kvpress_run('benchmarks.kvpress_peer', job), 'job': job}
  peer['seconds'] = time.perf_counter() - start
  with open(saved, 'w', encoding='utf-8') as f:
    json.dump(peer, f)
  return peer, peer['seconds']


def kvzip_block(runs: list[dict]) -> dict:
  """KVzip's repeat block as kvpress read it for one context (any ratio's run): `repeat` ids
  `[1, R]` and the chat template's `prefix` it leaves out, for `kept_positions`."""
  block = next(run['repeat'] for run in runs if run['press'] == 'kvzip')
  if len(block['ids']) != 1:
    raise SystemExit(
      f'kvpress repeated this context in {len(block["ids"])} chunks of 2,048 tokens; Attend '
      'reads one repeat block: compare contexts up to 2,048 tokens.'
    )
  return dict(repeat=jnp.asarray(block['ids'], jnp.int32), prefix=block['prefix'])


def attend_side(
  model, context_ids, question_ids, presses, ratios, max_new, eos_id, kvzip=None
) -> list:
  """Attend's kept sets, boundary ties and answers for one context, per press (`attention.Press`)
  x ratio; `kvzip`: the repeat block KVzip reads (`kvzip_block`)."""
  context = jnp.asarray([context_ids], jnp.int32)
  question = jnp.asarray([question_ids], jnp.int32)
  s, room = context.shape[1], question.shape[1] + max_new
  read = max(room, kvzip['repeat'].shape[1]) if kvzip else room  # room for the repeat block
  cache, queries = compression.prefill(model, jnp.pad(context, ((0, 0), (0, 1))), read)
  if kvzip:
    repeat_queries, repeat_cache = compression.repeated(model, cache, kvzip['repeat'])
  rows = []
  for press in presses:
    for ratio in ratios:
      start = time.perf_counter()
      if press.repeat:
        masks = compression.kept_positions(model, context, press, ratio, **kvzip)
        scores = compression.layer_scores(
          model, repeat_cache, repeat_queries, press, ratio, context=s, prefix=kvzip['prefix']
        )
      else:
        masks = compression.kept_positions(model, context, press, ratio)
        scores = compression.layer_scores(model, cache, queries, press, ratio)
      entries = compression.kept_entries(scores, press, ratio)
      pressed = compression.compress(cache, entries, s, room)
      answer = compression.answer(model, pressed, question, max_length=max_new, eos_id=eos_id)
      ties = 0
      for layer, layer_scores in enumerate(scores):
        if press.budget in ('adaptive', 'layer'):
          continue  # one ranking over a layer's heads: no per-head boundary
        count = kept_count(s, ratio)
        if press.budget == 'pyramid':
          count = pyramid_budget(s, ratio, layer, len(scores))
        layer_scores = np.asarray(layer_scores[0])
        ties += boundary_ties(layer_scores, [count] * layer_scores.shape[0])
      rows.append(
        dict(
          press=press.name,
          ratio=ratio,
          ours=[bits(mask[0]) for mask in masks],
          answer=np.asarray(answer[0]).tolist(),
          boundary_ties=ties,
          seconds=time.perf_counter() - start,
        )
      )
      print(f'attend: {press.name} {ratio}', file=sys.stderr, flush=True)
  return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--lengths', default='512', help='prompt lengths in tokens, comma-separated')
  parser.add_argument('--tasks', default='needle_book,needle_noise', help='retrieval_tasks names')
  parser.add_argument('--presses', default=','.join(PRESSES))
  parser.add_argument('--ratios', default=','.join(map(str, RATIOS)))
  parser.add_argument('--max_new_tokens', type=int, default=16)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument(
    '--book', default=str(REPO.parent / 'shared/data/books/pride_and_prejudice.txt')
  )
  parser.add_argument(
    '--folder',
    default=FOLDER,
    help="transformers' float32 copy of the GGUF (made once)",
  )
  parser.add_argument(
    '--out',
    default='runs/press_agreement.json',
    help="the table; kvpress's side is kept beside it (OUT.kvpress.json), reused for one job",
  )
  return parser.parse_args(argv)


def unpressed_baseline(model, tokenizer, sample: dict, theirs: dict, max_new: int, eos_ids) -> dict:
  """One sample's greedy answer without a press on Attend's side, read from the token ids
  kvpress built: whether it is kvpress's, and kvpress's as text."""
  context, question = theirs['context_ids'], theirs['question_ids']
  full = compression.answer(
    model,
    compression.prefill(model, jnp.asarray([context + question[:1]]), len(question) + max_new)[0],
    jnp.asarray([question]),
    max_length=max_new,
    eos_id=eos_ids[0],
  )
  return dict(
    task=sample['task'],
    length=len(context),
    tokenizers_agree=theirs['tokenizers_agree'],
    answers_identical=same_answer(np.asarray(full[0]).tolist(), theirs['answer'], eos_ids),
    answer=tokenizer.decode([t for t in theirs['answer'] if t not in eos_ids]),
  )


def print_table(table: dict) -> None:
  """One line per press x ratio of `summarise`'s table."""
  for entry in table.values():
    print(
      f'{entry["press"]:>20} {entry["ratio"]:.2f}  equal {entry["equal_share_mean"]:.4f} '
      f'(min {entry["equal_share_min"]:.4f})  layers identical {entry["layers_identical"]:.3f}  '
      f'ties {entry["boundary_ties"]:3d}  answers {entry["answers_identical"]:.2f}'
    )


def main(argv: list[str] | None = None) -> dict:
  args = parse_args(argv)
  presses, ratios = args.presses.split(','), [float(r) for r in args.ratios.split(',')]
  lengths = [int(n) for n in args.lengths.split(',')]
  resolved = [get_press(name) for name in presses]  # the names and settings, before any work
  for press in resolved:
    for ratio in ratios:
      compression.check_settings(press, ratio, min(lengths), repeat=True)
  checkpoint = pretrained.read(CHECKPOINT)
  tokenizer = PretrainedTokenizer(checkpoint.tokenizer_json)
  samples = make_samples(
    tokenizer,
    lengths,
    args.tasks.split(','),
    args.seed,
    args.book,
  )
  job = dict(
    gguf=pretrained.locate(CHECKPOINT),
    folder=os.path.expanduser(args.folder),
    samples=samples,
    presses=presses,
    ratios=ratios,
    max_new_tokens=args.max_new_tokens,
  )
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  peer, peer_seconds = run_peer(job, os.path.splitext(args.out)[0] + '.kvpress.json')
  eos_ids = peer['eos_ids'] if isinstance(peer['eos_ids'], list) else [peer['eos_ids']]
  model, _ = pretrained.load_decoder(checkpoint)
  start, results, baselines = time.perf_counter(), [], []
  for index, (sample, theirs) in enumerate(zip(samples, peer['samples'])):
    context, question = theirs['context_ids'], theirs['question_ids']
    baselines.append(
      unpressed_baseline(model, tokenizer, sample, theirs, args.max_new_tokens, eos_ids)
    )
    # Each sample's shapes differ, so its programs serve no other; dropped, as thousands of
    # small ones (Attend's side runs op by op) exhausted the process's memory maps (LLVM: 'Cannot
    # allocate memory', then a crash, in the second sample's 25th press x ratio of 27).
    jax.clear_caches()
    mine = [r for r in peer['runs'] if r['sample'] == index]
    peer_runs = {(r['press'], r['ratio']): r for r in mine}
    kvzip = kvzip_block(mine) if 'kvzip' in presses else None
    for row in attend_side(
      model, context, question, resolved, ratios, args.max_new_tokens, eos_ids[0], kvzip
    ):
      their = peer_runs[(row['press'], row['ratio'])]
      results.append(
        {**row, 'sample': index, 'theirs': their['kept'], 'peer_answer': their['answer']}
      )
  attend_seconds = time.perf_counter() - start
  table = summarise(results, eos_ids)
  print_table(table)
  result = dict(
    checkpoint=CHECKPOINT,
    samples=baselines,
    presses=table,
    tie_rule=(
      'Attend keeps the lower position among equal scores (jax.lax.top_k); kvpress keeps what '
      "torch.topk returns, whose order among equal scores is unspecified; 'random' is not "
      'compared: the sides draw from different generators.'
    ),
    peer=dict(versions=peer['versions'], chat_template=peer['chat_template'], seconds=peer_seconds),
    attend_seconds=attend_seconds,
    machine=machine.facts('float32'),
  )
  with open(args.out, 'w', encoding='utf-8') as f:
    json.dump(result, f, indent=1)
  return result


if __name__ == '__main__':
  main()
