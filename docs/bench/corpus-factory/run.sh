#!/usr/bin/env bash
# The corpus factory's answer rate on this CPU (issue 38), 2 threads, nothing else running, one chunk each:
# the old factory (stock generate(), commit 5961029 checked out at $BEFORE; its documented chunk of 32 in
# batches of 16) against lopa's engine (a chunk of 128 prompts, 32 in flight) in fp32 and bf16, before and after
# generate_many took the longest prompts first (that change is the checkout; the "unsorted" figures came from
# the same commands run on the code before it), then plain steps against the lookahead gate on 64 of those prompts.
set -euo pipefail
cd "$(dirname "$0")/../../.."
BEFORE=${BEFORE:-/work/snap}
export OMP_NUM_THREADS=2
common="--prompts 256 --chunks 1 --threads 2"
PYTHONPATH="$BEFORE/src" python -m lopa build-corpus --out /tmp/rate-old $common --chunk-size 32 --batch 16
python -m lopa build-corpus --out /tmp/rate-fp32 $common --chunk-size 128 --batch 32
python -m lopa build-corpus --out /tmp/rate-bf16 $common --chunk-size 128 --batch 32 --dtype bfloat16
python docs/bench/corpus-factory/plain_vs_lookahead.py bfloat16   # reads /tmp/rate-fp32/prompts.jsonl.gz
