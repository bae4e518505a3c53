#!/bin/bash
# Qwen2.5-Coder-1.5B from its Q4_K_M file in int4 (issue 37's real-size target), the 0.5B drafting, against llama.cpp on
# the same file: the LoPA table's code and summary rows, 2 prompts each, methods interleaved in one process, nothing
# else running (12:43 on the 2-core Xeon VM, peak RSS 11.8 GB, 2026-12-06). report.md's header line was written
# before the report learnt to print the model options and the int4 precision: this is the command that ran.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/qwen-int4
lopa bench --model qwen2.5-coder-1.5b --draft-model qwen2.5-coder-0.5b --dtype int4 \
  --data ../shared/data/spec_bench_dev.jsonl --scenarios code,summary --limit 2 \
  --methods hf,ar,lopa,llamacpp,llamacpp-pld --no-progress --out $out 2>&1 | grep -v "^USDT" > $out/bench.log
python docs/bench/exact-low-precision/ratios.py $out/results.json | tee $out/ratios.log
python $out/step_parts.py 2>&1 | grep -v "^USDT" | tee $out/step_parts.log
