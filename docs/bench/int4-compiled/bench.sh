#!/usr/bin/env bash
# Issue 37, route (b) end to end on the AVX2 VM: the compiled int4 runner (--compile --dtype int4, after the token
# lookup left the graphs: 3dace1e) against the eager one and llama.cpp on the catalog's Q4_1 file. Spec-Bench dev,
# 1 prompt per category (13), 128 new tokens, 2 threads, methods interleaved in one process (the compiled engine's
# graphs, buckets 1-64, are built before any timing); the background training job stopped (SIGSTOP) throughout.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/int4-compiled
lopa bench --data ../shared/data/spec_bench_dev.jsonl --limit 1 --max-new-tokens 128 \
  --methods hf,ar,ar-compiled,lopa,lopa-compiled,llamacpp --dtype int4 --gguf-precision shipped --no-progress \
  --out "$out/bench" 2>&1 | grep -v "^USDT" | tee "$out/bench.log"
python docs/bench/exact-low-precision/ratios.py "$out/bench/results.json" | tee "$out/ratios.log"
