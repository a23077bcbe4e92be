"""benchmarks/decoder_bench and benchmarks/bandwidth: the memory-bandwidth bound of decoding by
hand, the bytes of weights a decoding step reads counted by hand from each architecture's shapes,
and `--checkpoint` on a tiny random checkpoint folder (the same weights on both sides)."""

import json

import pytest
from tiny_decoders import CONFIGS, write_checkpoint

from benchmarks import bandwidth, decoder_bench

pytest.importorskip('transformers', reason='the peer the benchmark times (test extra)')

# Parameters one decoding step reads, by hand from tiny_decoders.CONFIGS (D = 32, 2 layers,
# vocabulary 97). Llama: q, o D x D; k, v D x 16 (2 of 4 heads); gate, up, down 3 x D x 64;
# 2 norms; a final norm and an untied head V x D, its token embedding only gathered.
# Qwen2: the same with an FFN of 48, q/k/v biases (32 + 16 + 16), the head tied to the
# embedding. GPT-2: c_attn D x 3D + 3D, c_proj D x D + D, c_fc D x 4D + 4D, its c_proj
# 4D x D + D, two biased LayerNorms per layer and a final one, tied embedding; its learned
# positions (128 x D) only gathered.
READ = {
  'llama': 2 * (1024 + 512 + 512 + 1024 + 3 * 32 * 64 + 2 * 32) + 32 + 97 * 32,
  'qwen2': 2 * (1024 + 512 + 512 + 1024 + 3 * 32 * 48 + 2 * 32 + 64) + 32 + 97 * 32,
  'gpt2': 2 * (32 * 96 + 96 + 32 * 32 + 32 + 32 * 128 + 128 + 128 * 32 + 32 + 4 * 32)
  + 2 * 32
  + 97 * 32,
}


def test_the_bound_is_the_batch_times_the_bandwidth_over_the_weight_bytes():
  assert bandwidth.decode_bound(20.0, 500_000_000, batch=2) == pytest.approx(80.0)
  row = dict(weight_bytes=500_000_000, attend_decode_ms=4_000.0, torch_decode_ms=16_000.0)
  fields = decoder_bench.bound_fields(row, 20.0, batch=2, new_tokens=64)
  # 2 rows x 64 tokens in 4 s and in 16 s, against 2 x 20e9 / 5e8 = 80 tokens/s.
  assert fields['decode_bound_tokens_per_s'] == pytest.approx(80.0)
  assert fields['attend_decode_tokens_per_s'] == pytest.approx(32.0)
  assert fields['torch_decode_tokens_per_s'] == pytest.approx(8.0)
  assert fields['attend_fraction_of_bound'] == pytest.approx(0.4)
  assert fields['torch_fraction_of_bound'] == pytest.approx(0.1)
  assert fields['read_bandwidth_gbps'] == 20.0


@pytest.mark.parametrize('model_type', sorted(READ))
def test_weight_bytes_are_what_one_step_reads(model_type):
  import transformers

  config = transformers.AutoConfig.for_model(model_type, **CONFIGS[model_type])
  model = transformers.AutoModelForCausalLM.from_config(config)
  assert bandwidth.weight_bytes(model) == 4 * READ[model_type]


def test_the_read_bandwidth_is_a_plausible_rate():
  assert 0.1 < bandwidth.read_bandwidth(64 << 20, passes=2) < 10_000  # GB/s


def test_transformers_reads_a_folder_or_a_gguf_file(tmp_path):
  (tmp_path / 'model.gguf').write_bytes(b'GGUF')
  (tmp_path / 'model.zip').write_bytes(b'PK')
  assert decoder_bench.reference_source(str(tmp_path)) == (str(tmp_path), {})
  assert decoder_bench.reference_source(str(tmp_path / 'model.gguf')) == (
    str(tmp_path),
    {'gguf_file': 'model.gguf'},
  )
  with pytest.raises(ValueError, match='neither a packaged checkpoint, a folder nor a .gguf file'):
    decoder_bench.reference_source(str(tmp_path / 'model.zip'))
  with pytest.raises(ValueError, match='--prompt=0 must be between 1 and --tokens=16'):
    decoder_bench.main(['--prompt=0', '--tokens=16'])


def test_a_checkpoint_folder_is_timed_on_both_sides_with_its_bound(tmp_path, capsys):
  folder = write_checkpoint('llama', str(tmp_path / 'tiny-llama'))
  out = tmp_path / 'bench.json'
  flags = ['--batch=1', '--tokens=16', '--prompt=4', '--new_tokens=4', '--repeats=1', '--calls=1']
  rows = decoder_bench.main(['--checkpoint', folder, *flags, '--bandwidth_mib=64', f'--json={out}'])
  (row,) = rows
  assert row['model'] == 'tiny-llama' and row['model_type'] == 'llama'
  assert row['same_greedy_tokens'] and row['max_abs_logit_difference'] < 1e-5
  assert row['weight_bytes'] == 4 * READ['llama'] and row['batch'] == 1
  # 1 row x 4 tokens in the measured time, against the bandwidth over 86,784 bytes.
  bound = row['read_bandwidth_gbps'] * 1e9 / 86_784
  assert row['decode_bound_tokens_per_s'] == pytest.approx(bound)
  attend = 4 / (row['attend_decode_ms'] / 1e3)
  assert row['attend_fraction_of_bound'] == pytest.approx(attend / bound)
  assert json.loads(out.read_text()) == rows
  table = capsys.readouterr().out.splitlines()
  assert table[-1].startswith('| tiny-llama | 0.02 M | 0.1 MB | ') and table[-1].endswith(' |')
  assert len(table[-1].split(' | ')) == len(table[-3].split(' | ')) == 12
