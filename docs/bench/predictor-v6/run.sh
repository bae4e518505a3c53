#!/bin/bash
# Issue 38: the predictor retrained on the first corpus plus part of corpus-v2 (2026-12-07, the 2-core Xeon VM, 2
# threads, nothing else running except where train.log says). Sequences 3,120 of 7,328: the first 48 held out (the
# same held-out sequences as v4), 3,072 train (1,142,974 rows, 2.2x v4's 516,168). Teacher forcing ran at roughly
# 300 rows/s here (those rows in about an hour, part of it beside unit tests of mine) and an epoch took 23 min: all
# 7,328 sequences (3.26M rows) would take ~3 h of teacher forcing and ~65 min an epoch, more than a session.
# 1. One epoch (the schedule annealed over it), teacher forcing included; 2. resumed for a second epoch (the
# schedule then spans two: the learning rate restarts at half its peak and decays to 0).
set -e
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
args="--corpus src/lopa/data/corpus src/lopa/data/corpus-v2 --sequences 3120 --out /work/train-v6/predictor
  --batch-size 4 --lr 3e-3 --ttt-steps 2 --draft-vocab 5120 --intermediate-size 768 --threads 2
  --features-dir /work/train-v6/features"
/usr/bin/time -v lopa train-heads $args --epochs 1 > /work/train-v6/train.log 2>&1
cp -r /work/train-v6/predictor /work/train-v6/predictor-epoch1
/usr/bin/time -v lopa train-heads $args --epochs 2 --resume > /work/train-v6/train-resume.log 2>&1
