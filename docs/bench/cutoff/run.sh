#!/usr/bin/env bash
# The predictor's learned expansion cutoff: in-process A/B at batches of 1 and 8, then serving lopa against plain
# batched serving at 1/4/8/16 clients. Nothing else running; 2 threads.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/cutoff
python $out/cutoff_ab.py 1 3 12 2>&1 | grep -v "^INFO" | tee $out/single.log
python $out/cutoff_ab.py 8 2 16 2>&1 | grep -v "^INFO" | tee $out/batch8.log
lopa bench-serve --modes lopa,plain --concurrency 1,4,8,16 --rounds 2 --max-tokens 64 --load-seconds 0 \
    --long-prompt 0 --out $out/serve 2>&1 | grep -v "^INFO" | tee $out/serve.log
python $out/expansions.py 2>&1 | grep -v "^INFO" | tee $out/expansions.log  # run after the above, 2026-12-05 09:58
# Before the change (run at 9b6c59c^, 2026-12-05 ~08:50): where a lone request's step goes, and the predictor's forwards.
# python $out/step_breakdown.py 2>&1 | grep -v "^INFO" | tee $out/step_breakdown.log
# python $out/predictor_runs.py 2>&1 | grep -v "^INFO" | tee $out/predictor_runs.log
