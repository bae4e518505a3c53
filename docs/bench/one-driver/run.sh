#!/bin/sh
# lopa bench before (commit 1d7cf50) and after the one batch driver (this tree), one after the other on a quiet
# machine: 13 Spec-Bench dev prompts (1 per category), 128 new tokens, 2 threads, hf / ar / lopa interleaved in each.
set -e
here=$(cd "$(dirname "$0")" && pwd)
data=$(cd "$here/../../../.." && pwd)/shared/data/spec_bench_dev.jsonl
git -C "$here" worktree add -f /tmp/lossy-head 1d7cf50 >/dev/null 2>&1 || true
args="bench --data $data --limit 1 --methods hf,ar,lopa --max-new-tokens 128 --no-progress"
(cd /tmp/lossy-head && OMP_NUM_THREADS=2 PYTHONPATH=src python -m lopa $args --out "$here/before") > "$here/before.log" 2>&1
(cd "$here/../../.." && OMP_NUM_THREADS=2 PYTHONPATH=src python -m lopa $args --out "$here/after") > "$here/after.log" 2>&1
