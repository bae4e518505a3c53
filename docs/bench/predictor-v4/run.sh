#!/bin/bash
# The predictor retrained on the grown corpus (v4), against the one it replaces (v3), with v3's scripts.
# OLD: v3's predictor directory (copied before retraining: cp -r src/lopa/data/predictor /tmp/pred-v3; or
# src/lopa/data/predictor of a worktree of ddeba23).
# Nothing else running, in this order (about 35 min on the 2-core VM: 15 + 15 + 7).
set -e
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/predictor-v4
OLD=${OLD:-/tmp/pred-v3}
# 1. Single requests: ar, lopa with v3, lopa with v4, per prompt in turn, one process (13 prompts x 128 tokens).
python docs/bench/predictor-v3/single_ab.py $OLD src/lopa/data/predictor 3 2>&1 | grep -v "^INFO" | tee $out/single_ab.log
# 2. Spec-Bench dev, 3 prompts per category: ar, lopa (v4), lopa-ngram (no predictor).
lopa bench --data ../shared/data/spec_bench_dev.jsonl --limit 3 --max-new-tokens 128 \
  --methods ar,lopa,lopa-ngram --out $out/spec-bench 2>&1 | tr '\r' '\n' | grep -v "^INFO\|lopa bench:" > $out/spec-bench.log
python docs/bench/predictor-v3/spec_bench_ratios.py $out/spec-bench/results.json | tee $out/spec-bench-ratios.log
# 3. Served, one client: lookahead against plain decoding (the issue's 1-client target).
lopa bench-serve --modes lopa,plain --concurrency 1 --rounds 2 --max-tokens 64 --load-seconds 0 --long-prompt 0 \
  --out $out/serve 2>&1 | grep -v "^INFO" | tee $out/serve.log
