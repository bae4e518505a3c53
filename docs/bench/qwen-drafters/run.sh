#!/bin/bash
# Which drafters pay on Qwen2.5-Coder-1.5B int4 once its plain step is at llama.cpp's cost (after 0caee4b): lopa with
# the 0.5B drafting (the default set plus the draft model) against lopa-ngram (prompt lookup and the n-gram pool, no
# model drafts), the prompts of ../qwen-q8-vocab/run.sh, methods interleaved in one process (the bench adds hf),
# nothing else running (the predictor's training stopped with SIGSTOP meanwhile).
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/qwen-drafters
/usr/bin/time -v lopa bench --model qwen2.5-coder-1.5b --draft-model qwen2.5-coder-0.5b --dtype int4 \
  --data ../shared/data/spec_bench_dev.jsonl --scenarios code,summary --limit 2 \
  --methods ar,lopa,lopa-ngram --no-progress --out $out 2>&1 | grep -v "^USDT" > $out/bench.log
python docs/bench/exact-low-precision/ratios.py $out/results.json | tee $out/ratios.log
