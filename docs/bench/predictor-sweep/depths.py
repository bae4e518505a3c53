"""Held-out top-1 at depths 1-3 of every predictor named, each scored the same way whatever depth it was trained to
(a run with --ttt-steps 1 reports depth 1 only; a tree drafts deeper), and the expected accepted length of a single
chain of 3 drafted tokens, a1 + a1 a2 + a1 a2 a3 (depth s's top-1 is conditional on the tokens before it). The
held-out split is the first 48 corpus sequences, teacher-forced once (read from the feature cache when it is there).

Usage: python docs/bench/predictor-sweep/depths.py FEATURES_DIR PREDICTOR_DIR..."""

import math
import sys
from pathlib import Path

import torch

from lopa.draft.predictor import default_aux_layers
from lopa.draft.predictor_io import load_predictor
from lopa.models.loading import load_model
from lopa.train.corpus import load_corpus
from lopa.train.predictor import accuracy, teacher_force

DEPTHS, HELD_OUT = 3, 48


def main(features: Path, predictors: list[Path]) -> None:
    torch.set_num_threads(2)
    model = load_model("smollm2-135m-instruct", fast=False, dtype=torch.float32).model
    sequences = [(p, a) for p, a, _ in load_corpus(Path("src/lopa/data/corpus"))][:HELD_OUT]
    aux = default_aux_layers(model.config.num_hidden_layers)
    held_out = teacher_force(model, sequences, aux, cache_dir=features)
    print(
        f"held-out top-1 at depth 1 / 2 / 3 ({HELD_OUT} sequences, {sum(map(held_out.length, range(HELD_OUT)))} rows)"
    )
    for path in predictors:
        top1 = accuracy(load_predictor(path, model).eval(), held_out, DEPTHS)
        chain = sum(math.prod(top1[: d + 1]) for d in range(DEPTHS))  # expected accepted length of one chain
        print(f"{path}: " + " / ".join(f"{t:.3f}" for t in top1) + f", chain {chain:.3f}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
