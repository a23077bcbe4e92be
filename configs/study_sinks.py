"""Study: attention sinks (Xiao et al. 2023, "StreamingLLM") on a character stream.

A GPT trained on windows of 64 characters (`configs/study_length.py`'s base, ALiBi positions)
reads the held-out text in windows of up to 512, eight times its training length, with a
sliding K/V window of 64: each query sees the 64 latest characters. StreamingLLM found that a
window alone fails once it slides past the first tokens, where the heads park the weight they
do not need (the "attention sink"), and that keeping the first 4 tokens, at positions inside the
cache, or training with a sink, repairs it. Three runs: the window alone, the window keeping the
first 4 tokens (`model.sink_tokens=4`, placed right before the window: ALiBi reads that
offset), and the window with a learned sink logit per head (`model.sink`, a null key every query
may attend to). On 64-character training windows the first two train alike (every key is in
the window) and differ only past 64. Full attention on the same windows is the alibi run of
`configs/study_length.py`.

Command:
  python sweep.py --config=configs/study_sinks.py --workdir=runs/study_sinks --parallel=2
  python compare.py runs/study_sinks runs/study_length/model.positions=alibi --against=metrics \
      --metrics=bits_per_char@64,bits_per_char@128,bits_per_char@256,bits_per_char@512
Result (2 cores of an AMD EPYC, CPU, shared; the first two runs measured on the length study's
ALiBi checkpoint with `eval.py --config`, since on 64-character rows they train exactly as full
attention; the learned sink trained in 9 min (21 min on a busier machine, the same numbers);
bits per character at 64 / 128 / 256 / 512): window alone 1.350 / 1.321 / 1.316 / 1.310, first
4 kept 1.350 / 1.321 / 1.315 / 1.308, learned sink 1.346 / 1.329 / 1.335 / 1.336, full attention
1.350 / 1.317 / 1.315 / 1.323. StreamingLLM's effect does not appear: dropping the first tokens
costs nothing, so there is nothing to repair (docs/studies.md shows why).
"""

from configs import study_length

KEPT_FIRST = 4  # StreamingLLM keeps 4 initial tokens


def get_config(arg: str | None = None):
  """`configs/study_length.py`'s base with ALiBi and a sliding window of 64."""
  config = study_length.get_config(arg)
  config.model.positions = 'alibi'
  config.model.window = study_length.TRAIN_LENGTH
  return config


def get_sweep(arg: str | None = None):
  del arg
  return [{'model.sink_tokens': 0}, {'model.sink_tokens': KEPT_FIRST}, {'model.sink': True}]
