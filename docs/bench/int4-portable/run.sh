#!/usr/bin/env bash
# Issue 37: int4 decoder layers on lopa's portable row-invariant kernel (kernels/panel_matmul.c; before it, CPUs
# without AMX ran torch's _weight_int4pack_mm_for_cpu). The 2-core AMD EPYC VM (AVX2, no AVX-512, no AMX), 2 threads,
# the background corpus job stopped (SIGSTOP) while each step ran, in this order:
# 1. forwards of 1-16 tokens, the portable kernel against torch's, interleaved in one process (ab.py);
#    and the 210 products alone (layers.py: SmolLM2's shapes, random weights, the two kernels interleaved);
# 2. lopa bench, int4, 1 Spec-Bench dev prompt per category x 128 tokens: hf (fp32 generate()), ar and lopa
#    interleaved, and whether lopa's tokens equal ar's (the run docs/bench/q8-vocabulary-avx2/ made on torch's kernel).
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/int4-portable
python docs/bench/int4-portable/ab.py 2>&1 | grep -v "^USDT\|Warning" | tee $out/ab.log
python docs/bench/int4-portable/layers.py 2>&1 | grep -v "^USDT\|Warning" | tee $out/layers.log
lopa bench --data ../shared/data/spec_bench_dev.jsonl --limit 1 --max-new-tokens 128 --methods hf,ar,lopa \
  --dtype int4 --no-progress --out $out/int4 2>&1 | grep -v "^USDT" | tee $out/int4.log
python docs/bench/exact-low-precision/ratios.py $out/int4/results.json | tee $out/ratios.log
# 3. The Q8_0 vocabulary product alone: the previous portable kernel (q8_matmul.c at 6d48d66) against this one, one
#    process; then against a stock bf16 Linear (the script of docs/bench/q8-vocabulary-avx2/).
python docs/bench/int4-portable/q8_ab.py 6d48d66 2>&1 | grep -v "^USDT\|Warning" | tee $out/q8_ab.log
python docs/bench/q8-vocabulary-avx2/kernel.py 2>&1 | grep -v "^USDT\|Warning" | tee $out/q8-kernel.log
