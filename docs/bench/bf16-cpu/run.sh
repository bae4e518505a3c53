#!/usr/bin/env bash
# bf16 on the CPU: the grouped-KV attention fold for bf16 queries (models/attention.py), before (BASE: a git worktree
# of the commit before it, e.g. `git worktree add /tmp/w/head f3d7a1f`) and after. Nothing else running; 2 threads.
set -euo pipefail
export OMP_NUM_THREADS=2
BASE=${BASE:-/tmp/w/head}
out=docs/bench/bf16-cpu
rm -f $out/shapes.log $out/ties.log
for src in $BASE/src $PWD/src; do PYTHONPATH=$src python $out/shapes.py 2>&1 | grep -v "^INFO" | tee -a $out/shapes.log; done
for src in $BASE/src $PWD/src; do PYTHONPATH=$src python docs/bench/exact-low-precision/ties.py bfloat16 2>&1 | grep -v "^INFO" | tee -a $out/ties.log; done
python $out/single_ab.py 128 2>&1 | grep -v "^INFO" | tee $out/single_ab.log
# batches of 8, lookahead against plain batched decoding, fp32 then bf16 (same script as docs/bench/batch-pricing)
for dtype in float32 bfloat16; do
    python docs/bench/batch-pricing/inprocess_ab.py 16 8 2 64 $dtype 2>&1 | tail -1 | sed "s/^/$dtype /" | tee -a $out/inprocess.log
done
python docs/bench/packed-trees/sdpa_shapes.py bfloat16 | tee $out/sdpa_bf16.log
# the same code twice more: bf16 lookahead's divergences move from run to run (tree sizes follow measured times)
for run in 2 3; do python docs/bench/exact-low-precision/ties.py bfloat16 2>&1 | grep -v "^INFO" | sed "s/^/run $run: /" | tee -a $out/ties.log; done
