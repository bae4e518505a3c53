#!/bin/bash
# Qwen2.5-Coder-1.5B in int4 built from its Q4_K_M file itself (no fp32 conversion), the 0.5B drafting in int4 from
# its own file (the new default under an int4 target), against llama.cpp on the same file: the LoPA table's code and
# summary rows, 2 prompts each, methods interleaved in one process, nothing else running. The same prompts and
# command as ../qwen-int4/run.sh but for the methods (llamacpp-pld left out to save time; the bench adds hf, its
# baseline). results.json's draft_dtype null is the default, int4 under an int4 target since 22da560 (the config now
# records the precision that ran). 9:41 wall, peak RSS 6.8 GB (/usr/bin/time at the end of bench.log), 2026-12-06.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/qwen-int4-direct
/usr/bin/time -v lopa bench --model qwen2.5-coder-1.5b --draft-model qwen2.5-coder-0.5b --dtype int4 \
  --data ../shared/data/spec_bench_dev.jsonl --scenarios code,summary --limit 2 \
  --methods ar,lopa,llamacpp --no-progress --out $out 2>&1 | grep -v "^USDT" > $out/bench.log
python docs/bench/exact-low-precision/ratios.py $out/results.json | tee $out/ratios.log
