#!/bin/bash
# One OpenMP team per server process (`lopa serve` loads its model and allocates its batch cache in a passing
# thread, so the scheduler's thread is the only one that runs torch's OpenMP), and `lopa bench-serve` levels as
# closed loops of 32 requests. Nothing else running, in this order. BASE is a checkout of the commit before
# (git worktree add /tmp/w/base 61a70e8).
set -e
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/one-omp-team
BASE=${BASE:-/tmp/w/base}
rm -f $out/threads_ab.log
for mode in main passing; do python $out/threads_ab.py $mode 2>&1 | grep -v "^INFO" | tee -a $out/threads_ab.log; done
python $out/serve_ab.py $BASE/src $PWD/src 2>&1 | grep -v "^INFO" | tee $out/serve_ab.log
lopa bench-serve --concurrency 1,4,8,16 --rounds 2 --requests 1 --max-tokens 64 --load-seconds 0 --long-prompt 0 \
  --out $out/serve-waves 2>&1 | grep -v "^INFO" | tee $out/serve-waves.log
lopa bench-serve --concurrency 1,4,8,16 --rounds 2 --max-tokens 64 --load-seconds 0 --long-prompt 0 \
  --out $out/serve 2>&1 | grep -v "^INFO" | tee $out/serve.log
lopa bench-serve --modes lopa --concurrency 1 --rounds 1 --requests 1 --max-tokens 32 --load-seconds 60 \
  --load-clients 16 --long-prompt 4000 --probes 5 --out $out/soak-prefill 2>&1 | grep -v "^INFO" | tee $out/soak-prefill.log
# The soak again, on its own with 1 thread, the commit before (which has no --requests) and this one:
for src in $BASE/src $PWD/src; do
  name=$([ $src = $PWD/src ] && echo this || echo before); requests=$([ $name = this ] && echo "--requests 1")
  PYTHONPATH=$src OMP_NUM_THREADS=1 python -m lopa bench-serve --modes lopa --concurrency 1 --rounds 1 $requests \
    --max-tokens 32 --load-seconds 60 --load-clients 16 --long-prompt 0 --out $out/soak-repeat/$name
done
# A dear drafter's first proposal in a batch priced at what earlier sequences measured (decode/pricing.py _doubted):
# the commit before (BASE2: git worktree add /tmp/w/base2 b3d983c) and this one, single requests then batch 8.
BASE2=${BASE2:-/tmp/w/base2}
for src in $BASE2/src $PWD/src; do
  PYTHONPATH=$src python docs/bench/calibrated-sizing/single_ab.py 2 2>&1 | grep -v "^\s*$" | tail -1 | tee -a $out/doubted_ab.log
done
for src in $BASE2/src $PWD/src; do
  PYTHONPATH=$src python docs/bench/batch-pricing/inprocess_ab.py 16 8 3 2>&1 | tail -1 | tee -a $out/doubted_ab.log
done
