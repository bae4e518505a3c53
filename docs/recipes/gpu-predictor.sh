#!/usr/bin/env bash
# The predictor's GPU recipe (issue 38): on one GPU, generate a large self-distillation corpus with lopa's own
# engine (bf16, many sequences in flight), then train the EAGLE-3 predictor on it with features teacher-forced per
# training batch (--online: 20M answer tokens' features would be ~110 GB, more than such a machine's disk), and write
# the predictor, the corpus and its statistics under OUT. The predictor is then measured on a CPU like any other:
#   lopa bench --predictor OUT/predictor ...
#
# Usage: docs/recipes/gpu-predictor.sh OUT [MODEL]
#   MODEL: a catalog name, or (on a machine without the package index) a local HF directory or .gguf file.
# Settings (environment): DEVICE (cuda), GEN_MINUTES (7: no corpus chunk starts after this), PROMPTS (120000),
#   BATCH (512 sequences in flight), CHUNK (4096 prompts a chunk file), NEW_TOKENS (256), EPOCHS (1),
#   TRAIN_BATCH (64 sequences an optimizer step), HELD_OUT (256), DRAFT_VOCAB (5120), WIDTH (768), THREADS (8).
# Each step is resumable: run it again with the same OUT and it goes on (the corpus from its last chunk; training
# with RESUME=1 from its last epoch).
#
# Not yet run on a GPU: no GPU was lent to this project when it was written. Its steps ran on the CPU with tiny
# settings (docs/recipes/gpu-predictor-cpu-smoke.log); whether 20M answer tokens fit in 12 minutes is unmeasured.
set -euo pipefail
OUT=${1:?usage: $0 OUT [MODEL]}
MODEL=${2:-smollm2-135m-instruct}
DEVICE=${DEVICE:-cuda}
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$OUT"
start=$(date +%s)

lopa build-corpus --out "$OUT/corpus" --model "$MODEL" --device "$DEVICE" --dtype bfloat16 \
  --prompts "${PROMPTS:-120000}" --chunk-size "${CHUNK:-4096}" --batch "${BATCH:-512}" \
  --max-new-tokens "${NEW_TOKENS:-256}" --max-minutes "${GEN_MINUTES:-7}" 2>&1 | tee -a "$OUT/build-corpus.log"
python "$here/../bench/corpus-factory/corpus_stats.py" "$OUT/corpus" | tee "$OUT/corpus-stats.log"
echo "corpus: $(( $(date +%s) - start )) s" | tee -a "$OUT/timing.log"

lopa train-heads --corpus "$OUT/corpus" --out "$OUT/predictor" --model "$MODEL" --device "$DEVICE" --online \
  --epochs "${EPOCHS:-1}" --batch-size "${TRAIN_BATCH:-64}" --held-out "${HELD_OUT:-256}" --lr 3e-3 --ttt-steps 2 \
  --draft-vocab "${DRAFT_VOCAB:-5120}" --intermediate-size "${WIDTH:-768}" --threads "${THREADS:-8}" \
  ${RESUME:+--resume} 2>&1 | tee -a "$OUT/train-heads.log"
echo "corpus + training: $(( $(date +%s) - start )) s" | tee -a "$OUT/timing.log"
