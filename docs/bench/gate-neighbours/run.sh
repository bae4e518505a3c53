#!/bin/bash
# Tried and dropped (2026-12-05): a new batch size starts with the leader of the nearest judged size
# (gate-neighbours.patch, on 62a208d; applied to this checkout for the run). Served A/B against 62a208d, processes
# alternating, nothing else running. BASE is a checkout of it (git worktree add /tmp/w/base 62a208d).
# Result (serve_ab.log): lookahead / plain at 8 / 16 clients base 0.932 / 0.985, 0.957 / 0.966; patched 0.962 / 0.948,
# 0.996 / 0.903: within run-to-run noise (better at 8, worse at 16), so the patch is not in the repository.
set -e
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/gate-neighbours
BASE=${BASE:-/tmp/w/base}
for i in 1 2; do for src in $BASE/src $PWD/src; do
  name=$([ $src = $PWD/src ] && echo new || echo base)
  echo "# $name, run $i" | tee -a $out/serve_ab.log
  PYTHONPATH=$src lopa bench-serve --modes lopa,plain --concurrency 8,16 --rounds 2 --max-tokens 64 --load-seconds 0 \
    --long-prompt 0 --prompt-order categories --out $out/serve-$name-$i 2>&1 | grep -v "^INFO" | tee -a $out/serve_ab.log
done; done
