#!/usr/bin/env bash
# A batch step's per-row bookkeeping before (BASE: a git worktree of f3d7a1f, the commit before) and after: acceptance
# without a one-hot copy of the logits and with one argmax for the step (decode/loop.py advance), and commits moving
# every layer's kept KV rows in one copy (models/runner.py). Nothing else running; 2 threads.
set -euo pipefail
export OMP_NUM_THREADS=2
BASE=${BASE:-/tmp/w/head}
out=docs/bench/batch-overhead
rm -f $out/step_parts.log
for round in 1 2; do
    for src in $BASE/src $PWD/src; do PYTHONPATH=$src python $out/step_parts.py 2>&1 | grep -v "^INFO" | tee -a $out/step_parts.log; done
done
# served, after the change
lopa bench-serve --modes lopa,plain --concurrency 1,8 --rounds 2 --max-tokens 64 --load-seconds 0 --long-prompt 0 \
    --out $out/serve 2>&1 | grep -v "^INFO" | tee $out/serve.log
# the first extra node in a batch of 8 (packed forwards)
python $out/first_node.py 2>&1 | grep -v "^INFO" | tee $out/first_node.log
