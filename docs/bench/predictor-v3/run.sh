#!/bin/bash
# The predictor retrained with distillation on the grown corpus (44 chunks), against the one it replaces
# (OLD: the predictor directory of the commit before, e.g. a worktree of e6f3709: git worktree add /tmp/w/v2 e6f3709).
# Nothing else running, in this order.
set -e
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/predictor-v3
OLD=${OLD:-/tmp/w/v2}
# 1. Single requests: ar, lopa with the old predictor, lopa with the new one, per prompt in turn, one process.
python $out/single_ab.py $OLD/src/lopa/data/predictor src/lopa/data/predictor 3 2>&1 | grep -v "^INFO" | tee $out/single_ab.log
# 2. Spec-Bench dev, 3 prompts per category: ar, lopa (new predictor), lopa-ngram (no predictor).
lopa bench --data ../shared/data/spec_bench_dev.jsonl --limit 3 --max-new-tokens 128 \
  --methods ar,lopa,lopa-ngram --out $out/spec-bench 2>&1 | tr '\r' '\n' | grep -v "^INFO\|lopa bench:" > $out/spec-bench.log
python $out/spec_bench_ratios.py | tee $out/spec-bench-ratios.log
# 3. Batches of 8 in process (lopa / plain batched), the commit before and this one alternating.
rm -f $out/inprocess.log
for src in $OLD/src $PWD/src $OLD/src $PWD/src; do
  PYTHONPATH=$src python docs/bench/batch-pricing/inprocess_ab.py 16 8 2 2>&1 | tail -1 | tee -a $out/inprocess.log
done
# 4. Serving, lookahead against plain batching, 1 and 8 clients.
lopa bench-serve --modes lopa,plain --concurrency 1,8 --rounds 2 --max-tokens 64 --load-seconds 0 --long-prompt 0 \
  --out $out/serve 2>&1 | grep -v "^INFO" | tee $out/serve.log
