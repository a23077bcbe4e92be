#!/usr/bin/env bash
# The GPU measurements of the README's "On a GPU" section, in the order they were taken.
#   bash benchmarks/gpu_checklist.sh tests OUT_DIR   # the test suite on the GPU (tests/test_gpu.py too)
#   bash benchmarks/gpu_checklist.sh attention OUT_DIR   # kernels: speed (B*N fixed) and memory
#   bash benchmarks/gpu_checklist.sh variants OUT_DIR    # every variant via the dispatcher vs cuDNN
#   bash benchmarks/gpu_checklist.sh models OUT_DIR      # train step (MFU) and decoding
# Needs a CUDA jax, Attend's dependencies with the `gpu` extra (tokamax) and (for the torch rows) a
# CUDA torch; PYTHON picks the interpreter. Tables go to stdout, logs and JSON to OUT_DIR (default runs/gpu).
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:?usage: gpu_checklist.sh tests|attention|variants|models [OUT_DIR]}
out=${2:-runs/gpu}
py=${PYTHON:-python3}
mkdir -p "$out"

case "$stage" in
  tests)
    # tests/conftest.py pins the CPU unless JAX_PLATFORMS is set; no preallocation, so that the
    # parallel workers share the GPU.
    JAX_PLATFORMS=cuda XLA_PYTHON_CLIENT_PREALLOCATE=false \
      "$py" -m pytest -q -p no:cacheprovider -n "${WORKERS:-10}" -rfEs 2>&1 | tee "$out/tests.log"
    ;;
  attention)
    "$py" -m benchmarks.attention_bench --dtype=bfloat16 --sizes=512,2048,8192,16384 --batch=4 \
      --long_batch=4 --memory_lengths= --json="$out/attention.json" 2>&1 | tee "$out/attention.log"
    # No preallocation here: the parent must leave the device to the measured child processes.
    XLA_PYTHON_CLIENT_PREALLOCATE=false \
      "$py" -m benchmarks.attention_bench --dtype=bfloat16 --sizes= --memory_lengths=4096,16384 \
      --cases="attend default,attend reference,attend chunked,jax.nn cudnn,torch scaled_dot_product_attention" \
      --json="$out/attention_memory.json" 2>&1 | tee "$out/attention_memory.log"
    ;;
  variants)
    # The Pallas kernel's bfloat16 error against float32 for each variant, and its block shapes.
    XLA_PYTHON_CLIENT_PREALLOCATE=false \
      "$py" -m benchmarks.pallas_check --json="$out/pallas_check.json" 2>&1 | tee "$out/pallas_check.log"
    # The kernel each variant gets (cuDNN, Attend's Pallas kernel, 'fused' or 'chunked'), S=8192, 16384.
    XLA_PYTHON_CLIENT_PREALLOCATE=false \
      "$py" -m benchmarks.fused_bench --json="$out/fused.json" 2>&1 | tee "$out/fused.log"
    # The Pallas kernel named for every variant, cuDNN's rows included (where cuDNN would win).
    XLA_PYTHON_CLIENT_PREALLOCATE=false "$py" -m benchmarks.fused_bench --implementation=pallas \
      --json="$out/pallas.json" 2>&1 | tee "$out/pallas.log"
    ;;
  models)
    "$py" -m benchmarks.train_bench --sizes=default,base --models=attend,linen --dtype=bfloat16 \
      --peak_tflops="${PEAK_TFLOPS:-989}" --steps=20 --repeats=3 --json="$out/train.json" \
      2>&1 | tee "$out/train.log"
    "$py" -m benchmarks.decode_bench --models=transformer,transformer_base --batch=32 --length=64 \
      --json="$out/decode.json" 2>&1 | tee "$out/decode.log"
    ;;
  *) echo "gpu_checklist.sh: stage must be tests, attention, variants or models; got '$stage'." >&2; exit 2 ;;
esac
