#!/usr/bin/env bash
# What lookahead could make in batches on this CPU if drafting cost nothing, and whether the cost model's forward and
# token estimates hold there (every step drafting, trees sized by the profiled cost model). Run at dbcb357.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/batch-limits
python $out/costcheck.py 8 16 2>&1 | grep -v "^INFO" | tee $out/costcheck.log
for b in 4 8; do python $out/freedraft.py $b 2 16; done 2>&1 | grep -v "^INFO" | tee $out/freedraft.log
python $out/plain_steps.py 8 3 16 2>&1 | grep -v "^INFO" | tee $out/plain_steps.log
python $out/probes.py 8 16 2>&1 | grep -v "^INFO" | tee $out/probes.log
