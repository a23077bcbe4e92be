"""The kvpress side of benchmarks/press_agreement.py: NVIDIA's kvpress presses on transformers'
SmolLM2, what each keeps of a context and the greedy answer after it.

It runs in kvpress's own environment (`make kvpress`: kvpress pins transformers < 5.3) and imports
neither JAX nor Attend's packages, only the standard library, torch, transformers and kvpress:

    .venv-kvpress/bin/python -m benchmarks.kvpress_peer --job=JOB.json --out=PEER.json

(`press_agreement` writes the job and starts it.) The job names the GGUF file both sides read,
a folder to save transformers' float32 copy of it in (made once), the samples (context and
question texts, and Attend's token ids of each, to check both tokenizers agree), the presses, the
ratios and the answer length.

kvpress's protocol is its pipeline's (`KVPressTextGenerationPipeline`): `preprocess` wraps the
context in the chat template as the user's turn, whose end, the assistant's turn and the answer
prefix follow the question; the context is prefilled under the press, then the question is read
and the answer decoded greedily (`_forward`, `generate_answer`, until the generation config's
EOS). The token ids the pipeline builds are recorded, so that Attend reads exactly the same;
PyramidKV's question is read one token at a time (see `run`). What a press keeps is read from
the press itself: a score press's `score` is wrapped and its kept positions are
`scores.topk(n_kept).indices` as `ScorerPress.compress` takes them (PyramidKV's `n_kept` from its
`get_layer_budget`), checked against the keys `compress` returns; AdaKV's and KVzip's from the
`masked_key_indices` they leave on each attention module. KVzip's repeat block (its ids, and the
length of the chat template's opening it leaves out) is recorded too: Attend reads the same.
"""

import argparse
from importlib import metadata
import json
import os
import sys
import time

from kvpress import (
  AdaKVPress,
  ExpectedAttentionPress,
  KnormPress,
  KVPressTextGenerationPipeline,
  KVzipPress,
  ObservedAttentionPress,
  PyramidKVPress,
  SnapKVPress,
  StreamingLLMPress,
  TOVAPress,
)
import torch
import transformers

# Attend's press name -> (kvpress's press at a ratio, the attention implementation it needs):
# observed attention reads the weights only eager attention returns; AdaKV refuses eager (its
# masked keys are patched into the other implementations).
PRESSES = {
  'knorm': (lambda r: KnormPress(compression_ratio=r), 'sdpa'),
  'streaming_llm': (lambda r: StreamingLLMPress(compression_ratio=r), 'sdpa'),
  'snapkv': (lambda r: SnapKVPress(compression_ratio=r), 'sdpa'),
  'tova': (lambda r: TOVAPress(compression_ratio=r), 'sdpa'),
  'observed_attention': (lambda r: ObservedAttentionPress(compression_ratio=r), 'eager'),
  'expected_attention': (lambda r: ExpectedAttentionPress(compression_ratio=r), 'sdpa'),
  'pyramidkv': (lambda r: PyramidKVPress(compression_ratio=r), 'sdpa'),
  'adakv': (
    lambda r: AdaKVPress(SnapKVPress(compression_ratio=r), alpha_safeguard=0.2),
    'sdpa',
  ),
  # A budget per layer, as Attend's KVzip (kvpress's default ranks over every layer at once).
  'kvzip': (lambda r: KVzipPress(compression_ratio=r, layerwise=True), 'sdpa'),
}


def saved_model(gguf: str, folder: str) -> None:
  """transformers' float32 model and tokenizer of `gguf`, saved once as a folder."""
  if os.path.exists(os.path.join(folder, 'config.json')):
    return
  where, name = os.path.split(os.path.abspath(gguf))
  model = transformers.AutoModelForCausalLM.from_pretrained(
    where, gguf_file=name, dtype=torch.float32
  )
  tokenizer = transformers.AutoTokenizer.from_pretrained(where, gguf_file=name)
  model.save_pretrained(folder)
  tokenizer.save_pretrained(folder)


def bits(mask: torch.Tensor) -> list[str]:
  """A `[K, S]` kept mask as one '0'/'1' string per key/value head ('1' = kept)."""
  return [''.join('1' if kept else '0' for kept in row.tolist()) for row in mask]


def masked(module, keys_shape) -> list[str]:
  """The kept mask a masking press (AdaKV, KVzip) leaves on an attention module: every position
  but its `masked_key_indices` (batch 1)."""
  mask = torch.ones(keys_shape, dtype=torch.bool)
  batch, head, position = module.masked_key_indices
  mask[batch, head, position] = False
  return bits(mask[0])


def instrument_kvzip(press: KVzipPress, kept: dict[int, list[str]], repeat: dict) -> None:
  """Wraps KVzip's `prepare` (its repeat block's ids and the chat template's opening, which
  Attend then reads) and `compress_post` (the kept positions it masks, per layer)."""
  prepare, compress_post = press.prepare, press.compress_post

  def recorded_prepare(model, tokenizer, *args, **kwargs):
    pairs = prepare(model, tokenizer, *args, **kwargs)
    repeat['ids'] = [ids[0].tolist() for _, ids in pairs]
    repeat['prefix'] = press.prefix_length
    return pairs

  def recorded_compress_post(model):
    compress_post(model)
    k, s = model.config.num_key_value_heads, press.context_length
    for layer in model.model.layers:
      kept[layer.self_attn.layer_idx] = masked(layer.self_attn, (1, k, s))

  press.prepare, press.compress_post = recorded_prepare, recorded_compress_post


def instrument(press, kept: dict[int, list[str]]) -> None:
  """Wraps the press's `score` and `compress` so that every layer's kept positions land in
  `kept[layer]` (batch 1), as the press itself chose them."""
  scorer = press.press if isinstance(press, AdaKVPress) else press
  score, compress = scorer.score, press.compress
  scores = {}

  def recorded_score(module, hidden_states, keys, values, attentions, kwargs):
    result = score(module, hidden_states, keys, values, attentions, kwargs)
    scores[module.layer_idx] = result.clone()  # AdaKV overwrites its safeguarded entries
    return result

  def recorded_compress(module, hidden_states, keys, values, attentions, kwargs):
    new_keys, new_values = compress(module, hidden_states, keys, values, attentions, kwargs)
    b, k, s, _ = keys.shape
    if isinstance(press, AdaKVPress):
      kept[module.layer_idx] = masked(module, (b, k, s))
    else:
      mask = torch.zeros((b, k, s), dtype=torch.bool)
      n_kept = int(s * (1 - press.compression_ratio))
      if isinstance(press, PyramidKVPress):
        n_kept = press.get_layer_budget(module, s)
      indices = scores[module.layer_idx].topk(n_kept, dim=-1).indices  # ScorerPress.compress's
      gathered = keys.gather(2, indices.unsqueeze(-1).expand(-1, -1, -1, keys.shape[-1]))
      if not torch.equal(gathered, new_keys):
        raise RuntimeError(f'layer {module.layer_idx}: the recomputed top-k is not what was kept.')
      mask.scatter_(-1, indices, True)
      kept[module.layer_idx] = bits(mask[0])
    return new_keys, new_values

  scorer.score = recorded_score
  press.compress = recorded_compress


class RecordingPipeline(KVPressTextGenerationPipeline):
  """kvpress's pipeline, keeping the token ids of each answer (it returns only their text)."""

  answers: list[list[int]]
  one_by_one = False  # read the question one token at a time (see `run`)

  def generate_answer(self, question_ids, cache, context_length, max_new_tokens):
    if self.one_by_one:
      for i in range(question_ids.shape[1] - 1):
        position = torch.tensor([[context_length + i]])
        self.model(
          input_ids=question_ids[:, i : i + 1], past_key_values=cache, position_ids=position
        )
      context_length += question_ids.shape[1] - 1
      question_ids = question_ids[:, -1:]
    decode = self.tokenizer.decode
    captured = []
    self.tokenizer.decode = lambda ids, **options: (
      captured.append(ids.tolist()) or decode(ids, **options)
    )
    try:
      text = super().generate_answer(question_ids, cache, context_length, max_new_tokens)
    finally:
      del self.tokenizer.decode
    self.answers.append(captured[0])
    return text


def load_peer(job: dict):
  """transformers made quiet and seeded, the model folder saved once; returns its tokenizer and
  `pipeline(attention)`, kvpress's pipeline on an attention implementation, loaded once each."""
  torch.manual_seed(0)
  transformers.logging.set_verbosity_error()
  transformers.logging.disable_progress_bar()
  saved_model(job['gguf'], job['folder'])
  tokenizer = transformers.AutoTokenizer.from_pretrained(job['folder'])
  pipelines = {}

  def pipeline(attention: str) -> RecordingPipeline:
    if attention not in pipelines:
      model = transformers.AutoModelForCausalLM.from_pretrained(
        job['folder'], dtype=torch.float32, attn_implementation=attention
      ).eval()
      pipelines[attention] = RecordingPipeline(model=model, tokenizer=tokenizer, device='cpu')
    return pipelines[attention]

  return tokenizer, pipeline


def unpressed_sample(pipe: RecordingPipeline, tokenizer, sample: dict, max_new_tokens: int):
  """The pipeline's inputs of one sample, and what the sample's record holds: the token ids the
  pipeline built, whether the plain tokenizer agrees with Attend's, the answer without a press."""
  inputs = pipe.preprocess(
    sample['context'],
    questions=[sample['question']],
    answer_prefix=sample['answer_prefix'],
    max_context_length=int(1e10),
  )
  plain = [
    tokenizer.encode(sample[key], add_special_tokens=False) for key in ('context', 'question')
  ]
  pipe.answers = []
  with torch.no_grad():
    pipe._forward(inputs, max_new_tokens=max_new_tokens, press=None)
  return inputs, dict(
    context_ids=inputs['context_ids'][0].tolist(),
    question_ids=inputs['questions_ids'][0][0].tolist(),
    tokenizers_agree=plain == [sample['context_ids'], sample['question_ids']],
    answer=pipe.answers[0],
  )


def pressed_answer(pipe: RecordingPipeline, inputs: dict, press, max_new_tokens: int) -> tuple:
  """The context prefilled under `press`, then the greedy answer: `(kept, repeat, answer,
  seconds)`, the positions kept per layer, KVzip's repeat block, the answer's ids, its time."""
  kept, repeat = {}, {}
  if isinstance(press, KVzipPress):
    instrument_kvzip(press, kept, repeat)
  else:
    instrument(press, kept)
  pipe.answers = []
  # PyramidKV leaves layers of different lengths; a question of several tokens then gets
  # transformers' causal mask sized by the first layer, which the shorter layers do not
  # fit (sdpa: a size error; eager would let a question token see later ones). One token
  # at a time needs no mask: the same causal reading.
  pipe.one_by_one = isinstance(press, PyramidKVPress)
  start = time.perf_counter()
  with torch.no_grad():
    pipe._forward(inputs, max_new_tokens=max_new_tokens, press=press)
  seconds = time.perf_counter() - start
  return [kept[layer] for layer in sorted(kept)], repeat, pipe.answers[0], seconds


def run(job: dict) -> dict:
  """Every sample x press x ratio of `job` (see the module docstring) -> the peer's results."""
  tokenizer, pipeline = load_peer(job)
  samples, runs = [], []
  for index, sample in enumerate(job['samples']):
    inputs, unpressed = unpressed_sample(pipeline('sdpa'), tokenizer, sample, job['max_new_tokens'])
    samples.append(unpressed)
    for name in job['presses']:
      make, attention = PRESSES[name]
      pipe = pipeline(attention)
      for ratio in job['ratios']:
        kept, repeat, answer, seconds = pressed_answer(
          pipe, inputs, make(ratio), job['max_new_tokens']
        )
        runs.append(
          dict(
            sample=index,
            press=name,
            ratio=ratio,
            attention=attention,
            question_one_by_one=pipe.one_by_one,
            kept=kept,
            repeat=repeat,  # KVzip's: its repeat blocks' ids and the template's opening
            answer=answer,
            seconds=seconds,
          )
        )
        print(
          f'kvpress: sample {index} {name} {ratio} {runs[-1]["seconds"]:.1f} s',
          file=sys.stderr,
          flush=True,
        )
  return dict(
    versions=dict(
      kvpress=metadata.version('kvpress'),
      transformers=transformers.__version__,
      torch=torch.__version__,
    ),
    chat_template=tokenizer.chat_template is not None,
    eos_ids=pipeline('sdpa').model.generation_config.eos_token_id,
    threads=torch.get_num_threads(),
    samples=samples,
    runs=runs,
  )


def serve(run_job, argv: list[str] | None, description: str, writer: str) -> None:
  """A peer script's command line: `--job` (the JSON `writer` writes), `run_job(job)`'s result
  to `--out` (JSON)."""
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument('--job', required=True, help=f'the JSON {writer} writes')
  parser.add_argument('--out', required=True, help='where the results go (JSON)')
  args = parser.parse_args(argv)
  with open(args.job, encoding='utf-8') as f:
    job = json.load(f)
  result = run_job(job)
  with open(args.out, 'w', encoding='utf-8') as f:
    json.dump(result, f)


def main(argv: list[str] | None = None) -> None:
  serve(run, argv, __doc__.split('\n')[0], 'press_agreement')


if __name__ == '__main__':
  main()
