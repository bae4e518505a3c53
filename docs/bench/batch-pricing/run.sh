#!/bin/bash
# Pricing at the rate without drafting, probes scaled by the batch (commit 43d9af1): the issue-12 benchmarks again,
# nothing else running, in this order (of the in-process A/B in inprocess_ab.log, the 8-row runs came before all of these,
# the 16-row runs between the Spec-Bench run and the file-order serve run).
set -e
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/batch-pricing
lopa bench-serve --concurrency 1,4,8,16 --rounds 2 --max-tokens 64 --load-seconds 0 --long-prompt 0 --prompt-order categories --out $out/serve 2>&1 | grep -v "^INFO" | tee $out/serve.log
lopa bench-batch --data ../shared/data/spec_bench_dev.jsonl --prompts 16 --max-new-tokens 128 --repeats 2 --out $out/batch 2>&1 | tee $out/batch.log
lopa bench --data ../shared/data/spec_bench_dev.jsonl --limit 3 --max-new-tokens 128 --methods hf,ar,lopa --out $out/spec-bench 2>&1 | tail -40 | tee $out/spec-bench.log
lopa bench-serve --concurrency 1,4,8,16 --rounds 2 --max-tokens 64 --load-seconds 0 --long-prompt 0 --prompt-order file --out $out/serve-file-order 2>&1 | grep -v "^INFO" | tee $out/serve-file-order.log
lopa bench-batch --data ../shared/data/spec_bench_dev.jsonl --prompts 16 --max-new-tokens 128 --repeats 2 --out $out/batch-rerun 2>&1 | tee $out/batch-rerun.log  # run again after the rest: the first run looked slow
