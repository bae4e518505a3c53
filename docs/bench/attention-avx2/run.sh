#!/usr/bin/env bash
# Issue 37: the order-fixed attention kernel with its 16-float vectors as two halves of 8 (AVX2's width), against the
# previous build (7c952d0), in one process; the 2-core AMD EPYC VM (AVX2, no AVX-512), 2 threads, the background
# feature job stopped (SIGSTOP) while it ran.
set -euo pipefail
cd "$(dirname "$0")/../../.."
OMP_NUM_THREADS=2 python docs/bench/attention-avx2/ab.py 7c952d0 2>&1 | grep -v "^USDT\|Warning" | tee docs/bench/attention-avx2/ab.log
