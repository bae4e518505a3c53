#!/bin/bash
# Issue 38: predictor v6 (docs/bench/predictor-v6: 2 epochs over 1,142,974 rows, 2.2x v4's) trained on for 4 more
# epochs (2026-12-07, the 2-core AMD EPYC VM without AVX-512 or AMX, 2 threads). The previous session's teacher-forced
# feature cache (/work/train-v6/features, 4 GB) survived on this machine, so no teacher forcing: `--resume` with
# `--epochs 6` continues v6's optimizer and cosine schedule stretched over 6 epochs (the learning rate back at 3/4 of
# its peak, decaying to 0 over epochs 3-6). Nothing else running, except where train-resume.log's epoch 2 says
# (unit tests of mine for ~3 of its 17 minutes).
# Then single requests with v4 (shipped until now) and v7 in one process (13 Spec-Bench dev prompts x 128 tokens).
set -e
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/predictor-v7
mkdir -p /work/train-v7 && cp -r /work/train-v6/predictor /work/train-v7/predictor
ln -sfn /work/train-v6/features /work/train-v7/features
/usr/bin/time -v lopa train-heads --corpus src/lopa/data/corpus src/lopa/data/corpus-v2 --sequences 3120 \
  --out /work/train-v7/predictor --batch-size 4 --lr 3e-3 --ttt-steps 2 --draft-vocab 5120 --intermediate-size 768 \
  --threads 2 --features-dir /work/train-v7/features --epochs 6 --resume > /work/train-v7/train-resume.log 2>&1
OLD=${OLD:-src/lopa/data/predictor}  # v4
python docs/bench/predictor-v3/single_ab.py $OLD /work/train-v7/predictor 1 2>&1 | grep -v "^INFO" | tee $out/single_ab.log
