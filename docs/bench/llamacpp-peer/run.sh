#!/usr/bin/env bash
# lopa against llama.cpp on the CPU (issue 37's table): Spec-Bench dev, 2 prompts per category (26), 128 new tokens,
# 2 threads, methods interleaved in one process; first the same weights at F32 (lopa writes the F32 GGUF; stock
# generate() as the reference), then the catalog's Q4_1 file as shipped. Nothing else running.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
DATA=../shared/data/spec_bench_dev.jsonl
run() {  # precision, methods
  lopa bench --data "$DATA" --limit 2 --max-new-tokens 128 --methods "$2" \
    --gguf-precision "$1" --no-progress --out "docs/bench/llamacpp-peer/$1" 2>&1 \
    | tee "docs/bench/llamacpp-peer/$1.log"
}
run f32 hf,ar,lopa,llamacpp,llamacpp-pld
run shipped ar,lopa,llamacpp,llamacpp-pld
OMP_NUM_THREADS=2 python docs/bench/cpu-step-spike/llamacpp_invariance.py \
  "$(python -c 'from lopa.models.catalog import fetch_gguf; print(fetch_gguf("smollm2-135m-instruct"))')" \
  "$(python -c 'from lopa.models.catalog import fetch_gguf; from lopa.models.gguf_precision import full_precision_gguf; print(full_precision_gguf(fetch_gguf("smollm2-135m-instruct"), "f32"))')" \
  2>&1 | tee docs/bench/cpu-step-spike/llamacpp_invariance.log
