"""Study: grouped-query attention (Ainslie et al. 2023), quality against the decoding cache.

Every query head keeps its own projection while groups of heads share one key/value head:
`model.num_kv_heads` = 4 (multi-head attention), 2 (grouped) and 1 (multi-query), on the
default translation task (`:translation`, 1000 steps) and on `configs/gpt_text.py`'s
character-level GPT (`:gpt_text`, 1500 steps). The K/V cache of cached decoding shrinks in
proportion to the key/value heads; what decoding gains in speed is measured by the decode
section of `benchmarks/variants_bench.py`.

Command:
  python sweep.py --config=configs/study_gqa.py:translation --workdir=runs/study_gqa_translation \
      --parallel=2
  python compare.py runs/study_gqa_translation --metrics=exact_match,token_accuracy,loss
  python sweep.py --config=configs/study_gqa.py:gpt_text --workdir=runs/study_gqa_text --parallel=2
  python compare.py runs/study_gqa_text --metrics=bits_per_char,accuracy
Result (translation; 2 cores of an AMD EPYC, CPU, shared; 3 runs in 13.6 min): exact match 99.2%
(4 key/value heads), 100.0% (2), 99.6% (1), BLEU 99.97 / 100.00 / 99.95: quality holds with a
quarter of the K/V cache and 22% fewer parameters. `:gpt_text` (3 runs in 4.6 min on one
NVIDIA H200 shared with other runs; about 7 min a run on 2 CPU cores): validation bits per
character at step 1500 1.257 (4), 1.263 (2), 1.277 (1): each key/value head removed costs a
little, 0.5% and 1.6%, for half and a quarter of the cache. docs/studies.md.
"""

from configs import gpt_text, study_scores

TASKS = ('translation', 'gpt_text')
KV_HEADS = (4, 2, 1)  # both tasks' models have 4 query heads


def get_config(arg: str | None = None):
  """`arg` picks the task: 'translation' (default) or 'gpt_text'."""
  task = arg or 'translation'
  if task not in TASKS:
    raise ValueError(f'configs/study_gqa.py:{task} is not a task of the study; valid: {TASKS}.')
  if task == 'translation':
    return study_scores.get_config()  # the default experiment for 1000 steps
  config = gpt_text.get_config()
  config.num_train_steps = 1500
  config.eval_every_steps = 500
  config.checkpoint_every_steps = 500
  config.num_eval_decode = 4
  return config


def get_sweep(arg: str | None = None):
  del arg
  return [{'model.num_kv_heads': heads} for heads in KV_HEADS]
