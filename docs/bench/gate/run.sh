#!/usr/bin/env bash
# The lookahead gate (decode/gate.py): in-process A/B at batches of 1, 8 and 16 (ar / gated lopa / lopa with the gate
# held open), then serving at 1/4/8/16 clients. Nothing else running; 2 threads.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/gate
python $out/gate_ab.py 8 3 16 2>&1 | grep -v "^INFO" | tee $out/batch8.log
python $out/gate_ab.py 16 3 16 2>&1 | grep -v "^INFO" | tee $out/batch16.log
python $out/gate_ab.py 1 3 8 2>&1 | grep -v "^INFO" | tee $out/single.log
lopa bench-serve --modes lopa,plain,serial --concurrency 1,4,8,16 --rounds 2 --max-tokens 64 --load-seconds 0 \
    --long-prompt 0 --out $out/serve 2>&1 | grep -v "^INFO" | tee $out/serve.log
