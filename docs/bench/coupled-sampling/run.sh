#!/usr/bin/env bash
# Tokens per forward of seeded sampling: recursive rejection (the code before the coupled sampler, commit 5961029,
# checked out at $BEFORE) against the coupled sampler (this tree), same 26 Spec-Bench dev prompts (2 per category),
# same seeds, 128 new tokens, temperatures 0.7 (top-p 0.9) and 1.0; 2 threads, nothing else running.
set -euo pipefail
cd "$(dirname "$0")/../../.."
BEFORE=${BEFORE:-/work/snap}
export OMP_NUM_THREADS=2
PYTHONPATH="$BEFORE/src" python docs/bench/coupled-sampling/tpf.py docs/bench/coupled-sampling/before.json 2>&1 | tee docs/bench/coupled-sampling/before.log
python docs/bench/coupled-sampling/tpf.py docs/bench/coupled-sampling/after.json 2>&1 | tee docs/bench/coupled-sampling/after.log
