#!/bin/sh
# Lossy int8 verification (DraftConfig.lossy_int8_verify, removed after this run) against fp32 lookahead, on the
# first 8 prompts of tests/data/prompts.json, 96 new tokens past EOS, 2 threads, methods interleaved.
set -e
here=$(cd "$(dirname "$0")" && pwd)
git worktree add -f /tmp/lossy-head 1d7cf50 >/dev/null 2>&1 || true
cd /tmp/lossy-head && OMP_NUM_THREADS=2 PYTHONPATH=src python "$here/compare.py" "$here/results.json" 2>&1 | grep -v Warning
