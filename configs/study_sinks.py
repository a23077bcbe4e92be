"""Study: attention sinks (Xiao et al. 2023, "StreamingLLM") on a character stream.

A GPT trained on windows of 64 characters (`configs/study_length.py`'s base, rotary positions)
reads the held-out text in windows of up to 512, eight times its training length, with a
sliding K/V window of 64: each query sees the 64 latest characters and no others. With rotary
positions every relative distance then stays within the trained ones, so what is left to go
wrong is what StreamingLLM found: once the window slides past the first tokens, the heads that
parked their weight there have lost their sink. Two runs: the window alone (which trains
exactly as full attention on 64-character windows and drops the first tokens at evaluation), and
the window with a learned sink logit per head (`model.sink`: a null key every query may attend
to). Full attention on the same windows is the rope run of `configs/study_length.py`.

Command:
  python sweep.py --config=configs/study_sinks.py --workdir=runs/study_sinks --parallel=2
  python compare.py runs/study_sinks runs/study_length/model.positions=rope --against=metrics \
      --metrics=bits_per_char@64,bits_per_char@128,bits_per_char@256,bits_per_char@512
Result: see docs/studies.md (the table, the figure and the machine).
"""

from configs import study_length


def get_config(arg: str | None = None):
  """`configs/study_length.py`'s base with rotary positions and a sliding window of 64."""
  config = study_length.get_config(arg)
  config.model.positions = 'rope'
  config.model.window = study_length.TRAIN_LENGTH
  return config


def get_sweep(arg: str | None = None):
  del arg
  return [{'model.sink': sink} for sink in (False, True)]
