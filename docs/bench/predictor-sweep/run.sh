#!/bin/bash
# Issue 38, item 4: the recipe sweep on the corpus's held-out split (2026-12-07, the 2-core AMD EPYC VM without
# AVX-512 or AMX, 2 threads, one run at a time). Each run trains a predictor from scratch on the first 1,024 training
# sequences (the first corpus's; the same 48 held out as every shipped predictor) for 2 epochs (a whole cosine
# schedule), changing one setting of v6/v7's recipe (draft vocabulary 5,120, MLP width 768, 2 unrolled steps, peak
# learning rate 3e-3, batches of 4). The features come from v6's teacher-forced cache (`/work/train-v6/features`, its
# first 4 blocks of 256 sequences and the held-out block), so no teacher forcing runs. A short schedule on a quarter
# of the data: it ranks settings, it does not predict a shipped predictor's figures.
set -e
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
out=docs/bench/predictor-sweep
runs=/work/sweep
mkdir -p $runs
run() {  # name, then the settings that differ (--epochs 2 unless given)
  local name=$1; shift
  [ -f $runs/$name/held_out.json ] && return 0
  lopa train-heads --corpus src/lopa/data/corpus src/lopa/data/corpus-v2 --sequences 1072 --out $runs/$name \
    --batch-size 4 --draft-vocab 5120 --threads 2 --features-dir /work/train-v6/features --epochs 2 "$@" \
    > $runs/$name.log 2>&1
  mkdir -p $out/$name && cp $runs/$name/{train_log.jsonl,held_out.json} $out/$name/
}
run base --intermediate-size 768 --ttt-steps 2 --lr 3e-3
run width-1536 --intermediate-size 1536 --ttt-steps 2 --lr 3e-3
run ttt-3 --intermediate-size 768 --ttt-steps 3 --lr 3e-3
run lr-6e-3 --intermediate-size 768 --ttt-steps 2 --lr 6e-3
run lr-1e-3 --intermediate-size 768 --ttt-steps 2 --lr 1e-3
run width-384 --intermediate-size 384 --ttt-steps 2 --lr 3e-3
run ttt-1 --intermediate-size 768 --ttt-steps 1 --lr 3e-3
run lr-5e-4 --intermediate-size 768 --ttt-steps 2 --lr 5e-4
# the best learning rate against the recipe's over a longer schedule (4 epochs, the same data)
run base-4-epochs --intermediate-size 768 --ttt-steps 2 --lr 3e-3 --epochs 4
run lr-1e-3-4-epochs --intermediate-size 768 --ttt-steps 2 --lr 1e-3 --epochs 4
python docs/bench/predictor-sweep/table.py $runs > $out/sweep.log
# every run, and the shipped v4 and last session's v7, scored at depths 1-3 alike
python docs/bench/predictor-sweep/depths.py /work/train-v6/features src/lopa/data/predictor /work/train-v7/predictor \
  $(ls -d $runs/*/ | sort) 2>&1 | grep -v "^INFO" > $out/depths.log
