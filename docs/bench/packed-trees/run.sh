#!/bin/bash
# Per-row tree sizes and packed batch trees (commit 26cd48f) against the commit before (BASE: a worktree of
# a713874: git worktree add /tmp/w/head a713874). Nothing else running, in this order.
set -e
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/packed-trees
BASE=${BASE:-/tmp/w/head}
rm -f $out/verify_shapes.log $out/inprocess.log $out/single.log
for src in $BASE/src $PWD/src; do PYTHONPATH=$src python $out/verify_shapes.py 2>&1 | grep -v "^INFO" | tee -a $out/verify_shapes.log; done
for batch in 8 4 16; do
  for src in $BASE/src $PWD/src $BASE/src $PWD/src; do
    PYTHONPATH=$src python docs/bench/batch-pricing/inprocess_ab.py 16 $batch 2 2>&1 | tail -1 | tee -a $out/inprocess.log
  done
done
for src in $BASE/src $PWD/src; do
  PYTHONPATH=$src python docs/bench/calibrated-sizing/single_ab.py 2 2>&1 | grep -v "^\s*$" | tail -1 | tee -a $out/single.log
done
lopa bench-serve --concurrency 1,4,8,16 --rounds 2 --max-tokens 64 --load-seconds 0 --long-prompt 0 \
  --out $out/serve 2>&1 | grep -v "^INFO" | tee $out/serve.log
python $out/sdpa_shapes.py 2>&1 | tee $out/sdpa_shapes.log
# The servers at 8 clients, the commit before and this one alternating (bench-serve starts its servers with this
# Python and environment, so PYTHONPATH picks the code):
rm -f $out/serve8_ab.log
for src in $BASE/src $PWD/src $BASE/src $PWD/src; do
  PYTHONPATH=$src python -m lopa bench-serve --modes lopa,plain --concurrency 8 --rounds 2 --max-tokens 64 \
    --load-seconds 0 --long-prompt 0 --out /tmp/serve8 2>&1 | grep "clients" | sed "s|^|$src |" | tee -a $out/serve8_ab.log
done
python $out/where_time_goes.py 2>&1 | grep -v "^INFO" | tee $out/where_time_goes.log
