#!/usr/bin/env bash
# Issue 37 on a CPU without AVX-512 or AMX (the 2-core AMD EPYC VM, AVX2, the kind of machine the issue's own table
# came from), after the portable int4 kernel and the attention kernel's AVX2 vectors (commits 0b5f4ba..c30f8e1):
# lopa against llama.cpp (llama-cpp-python 0.3.36 built from source by pip on this VM), Spec-Bench dev, 2 prompts per
# category (26), 128 new tokens, 2 threads, methods interleaved in one process; the background feature job stopped
# (SIGSTOP) meanwhile. First int4 (the Q4_1 file's own blocks) against llama.cpp on that file, then the fp32 default
# against llama.cpp on the F32 GGUF lopa writes from the same weights.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/llamacpp-avx2
DATA=../shared/data/spec_bench_dev.jsonl
run() {  # name, lopa dtype, llama.cpp precision
  lopa bench --data "$DATA" --limit 2 --max-new-tokens 128 --methods hf,ar,lopa,llamacpp,llamacpp-pld \
    --dtype "$2" --gguf-precision "$3" --no-progress --out "$out/$1" 2>&1 | grep -v "^USDT" | tee "$out/$1.log"
  python docs/bench/exact-low-precision/ratios.py "$out/$1/results.json" | tee "$out/ratios-$1.log"
}
run int4-q4_1 int4 shipped
run f32 float32 f32
