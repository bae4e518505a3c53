#!/bin/bash
# Tree sizing by calibrated path probabilities, drafting priced at a plain forward for unmeasured batch sizes, no
# probe near an answer's end (commit 76cc1fe): the issue-12 benchmarks, nothing else running, in this order.
# BASE is a checkout of the commit before (git worktree add /tmp/w/base 2f47d72) for the in-process A/Bs.
set -e
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/calibrated-sizing
BASE=${BASE:-/tmp/w/base}
for i in 1 2; do for src in $BASE/src $PWD/src; do
  PYTHONPATH=$src python docs/bench/batch-pricing/inprocess_ab.py 16 8 3 2>&1 | tail -1 | tee -a $out/inprocess_ab.log
done; done
for src in $BASE/src $PWD/src $BASE/src $PWD/src; do
  PYTHONPATH=$src python $out/single_ab.py 2 2>&1 | grep -v "^\s*$" | tee -a $out/single_ab.log
done
lopa bench-serve --concurrency 1,4,8,16 --rounds 2 --max-tokens 64 --load-seconds 0 --long-prompt 0 --prompt-order categories --out $out/serve 2>&1 | grep -v "^INFO" | tee $out/serve.log
lopa bench-batch --data ../shared/data/spec_bench_dev.jsonl --prompts 16 --max-new-tokens 128 --repeats 2 --out $out/batch 2>&1 | tee $out/batch.log
lopa bench --data ../shared/data/spec_bench_dev.jsonl --limit 3 --max-new-tokens 128 --methods hf,ar,lopa --out $out/spec-bench 2>&1 | tail -40 | tee $out/spec-bench.log
