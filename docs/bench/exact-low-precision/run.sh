#!/usr/bin/env bash
# bf16 and int4 on the CPU with the order-fixed attention kernel (issue 37): is lookahead plain decoding bit for bit,
# and how fast against llama.cpp at the same precision? Spec-Bench dev, 2 prompts per category (26), 128 new tokens,
# 2 threads, methods interleaved in one process. int4 (the Q4_1 file's own blocks) against llama.cpp on that file;
# bf16 against llama.cpp on the BF16 GGUF lopa writes from the same weights. Then ties.py (13 prompts x 64 tokens,
# greedy ar against lopa, bf16 and int4). Nothing else running.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/exact-low-precision
DATA=../shared/data/spec_bench_dev.jsonl
run() {  # name, lopa dtype, llama.cpp precision
  lopa bench --data "$DATA" --limit 2 --max-new-tokens 128 --methods hf,ar,lopa,llamacpp,llamacpp-pld \
    --dtype "$2" --gguf-precision "$3" --no-progress --out "$out/$1" 2>&1 | grep -v "^USDT" | tee "$out/$1.log"
}
run int4-q4_1 int4 shipped
run bf16 bfloat16 bf16
for dtype in bfloat16 int4; do python $out/ties.py $dtype 2>&1 | grep -v "^USDT" | tee -a $out/ties.log; done
# After the AMX int4 kernel (kernels/int4_matmul.c) and OpenMP threads in the attention kernel (2026-12-06, later):
#   lopa profile --dtype int4 --out $out/profile-int4-tiles | tee $out/profile-int4-tiles.log
#   run int4-tiles int4 shipped
#   python $out/ratios.py $out/int4-tiles/results.json | tee $out/ratios-tiles.log
#   python $out/memory.py | tee $out/memory-tiles.log
# After the attention kernel's blocks of 4 queries and register lane sums:
#   run int4-tiles-block4 int4 shipped
#   python $out/ratios.py $out/int4-tiles-block4/results.json | tee $out/ratios-tiles-block4.log
# After 1-4 rows in registers, leaner kernel calls and the Q8_0 vocabulary (a later session):
#   run int4-vector-q8 int4 shipped
#   python $out/ratios.py $out/int4-vector-q8/results.json | tee $out/ratios-vector-q8.log
#   python docs/bench/int4-vector-rows/ab.py | tee docs/bench/int4-vector-rows/ab.log
#   bash docs/bench/step-overhead/run.sh | tee docs/bench/step-overhead/calls.log
#   python docs/bench/q8-vocabulary/ab.py | tee docs/bench/q8-vocabulary/ab.log
#   python $out/memory.py | tee docs/bench/q8-vocabulary/memory.log
# After the register path's panels side by side (c71a3d5; 2026-12-06, seventh session; the predictor's training stopped
# with SIGSTOP meanwhile):
#   run int4-panels int4 shipped
#   python $out/ratios.py $out/int4-panels/results.json | tee $out/ratios-panels.log
