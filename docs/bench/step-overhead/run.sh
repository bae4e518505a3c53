#!/usr/bin/env bash
# Per-call cost of the C kernels' Python wrappers before (commit 8f8931b) and after this change, alternating 3 times.
# Usage: bash docs/bench/step-overhead/run.sh | tee docs/bench/step-overhead/calls.log   (nothing else running)
set -euo pipefail
cd "$(dirname "$0")/../../.."
before=$(mktemp -d)
git worktree add -q --detach "$before" 8f8931b
trap 'git worktree remove --force "$before"' EXIT
for round in 1 2 3; do
  for side in before after; do
    src=src; [ $side = before ] && src=$before/src
    echo "== $side (round $round)"
    OMP_NUM_THREADS=2 PYTHONPATH=$src python docs/bench/step-overhead/calls.py 2>&1 | grep -v "^USDT"
  done
done
