#!/bin/bash
# Qwen2.5-Coder-1.5B int4 after two changes (2026-12-06, seventh session): the int4 kernel computing panels side by
# side (c71a3d5) and the vocabulary projections in Q8_0 (bfa2706: the 1.5B's Q6_K quantized once by lopa, the 0.5B
# draft's own Q8_0). Otherwise the command and prompts of ../qwen-int4-direct/run.sh: the LoPA table's code and
# summary rows, 2 prompts each, the 0.5B drafting in int4, against llama.cpp on the same file, methods interleaved
# in one process (the bench adds hf, its baseline), nothing else running (the predictor's training stopped with
# SIGSTOP meanwhile). Wall time and peak RSS: /usr/bin/time at the end of bench.log.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/qwen-q8-vocab
/usr/bin/time -v lopa bench --model qwen2.5-coder-1.5b --draft-model qwen2.5-coder-0.5b --dtype int4 \
  --data ../shared/data/spec_bench_dev.jsonl --scenarios code,summary --limit 2 \
  --methods ar,lopa,llamacpp --no-progress --out $out 2>&1 | grep -v "^USDT" > $out/bench.log
python docs/bench/exact-low-precision/ratios.py $out/results.json | tee $out/ratios.log
