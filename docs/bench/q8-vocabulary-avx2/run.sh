#!/usr/bin/env bash
# Issue 37: the int4 model's Q8_0 vocabulary projection on a CPU without AMX (kernels/q8_matmul.c, portable vectors;
# before it the projection stayed a stock bf16 nn.Linear there, which rounds a tree's rows differently from a
# one-token step's, so int4 lookahead was exact only up to near-ties). The 2-core AMD EPYC VM (AVX2, no AVX-512, no
# AMX), 2 threads, nothing else running, in this order:
# 1. forwards of 1-16 tokens, the Q8_0 vocabulary against the bf16 one, interleaved in one process (ab.py);
# 2. memory after load at each precision (one process each);
# 3. lopa bench, int4, 1 Spec-Bench dev prompt per category x 128 tokens: hf (fp32 generate()), ar and lopa
#    interleaved, and whether lopa's tokens equal ar's.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/q8-vocabulary-avx2
python docs/bench/q8-vocabulary/ab.py 2>&1 | grep -v "^USDT" | tee $out/ab.log
python docs/bench/exact-low-precision/memory.py 2>&1 | tee $out/memory.log
lopa bench --data ../shared/data/spec_bench_dev.jsonl --limit 1 --max-new-tokens 128 --methods hf,ar,lopa \
  --dtype int4 --no-progress --out $out/int4 2>&1 | grep -v "^USDT" | tee $out/int4.log
python docs/bench/exact-low-precision/ratios.py $out/int4/results.json | tee $out/ratios.log
# 4. The vocabulary product alone, the kernel against a stock bf16 Linear (SmolLM2's shape, random weights):
python docs/bench/q8-vocabulary-avx2/kernel.py | tee $out/kernel.log
# 5. Where an int4 forward's time goes on this CPU (after the CI run; torch's int4 kernel counts as other_kernels, lopa's
#    C kernels as dispatch):
lopa profile --dtype int4 --out $out/profile-int4 2>&1 | grep -v "^USDT\|^INFO" | tee $out/profile-int4.log
