#!/usr/bin/env bash
# lopa against llama.cpp on the CPU (issue 37's table): Spec-Bench dev, 2 prompts per category (26), 128 new tokens,
# 2 threads, methods interleaved in one process; first the same weights at F32 (lopa writes the F32 GGUF), then the
# catalog's Q4_1 file as shipped. Nothing else running.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
DATA=../shared/data/spec_bench_dev.jsonl
for precision in f32 shipped; do
  lopa bench --data "$DATA" --limit 2 --max-new-tokens 128 --methods ar,lopa,llamacpp,llamacpp-pld \
    --gguf-precision "$precision" --no-progress --out "docs/bench/llamacpp-peer/$precision" 2>&1 \
    | tee "docs/bench/llamacpp-peer/$precision.log"
done
