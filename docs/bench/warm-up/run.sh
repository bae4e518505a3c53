#!/usr/bin/env bash
# The predictor's warm-up at load: fresh processes with it off and on, alternating, 3 each. Nothing else running.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/warm-up
# python $out/first_shape.py 2>&1 | grep -v "^INFO" | tee $out/first_shape.log   # run at dbcb357, before the warm-up
for i in 1 2 3; do for w in off on; do python $out/cold_ab.py $w; done; done 2>&1 | grep -v "^INFO" | tee $out/cold_ab.log
