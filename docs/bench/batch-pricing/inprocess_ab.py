"""In-process A/B of lookahead against plain batched decoding: 16 Spec-Bench dev prompts (one per category in
turn), decoded `batch` at a time by engine.generate([...]), `tokens` new tokens (64 unless given), `ar` and `lopa`
alternating; prints both tokens/s of each round, then the lopa / ar ratios and their median. Run it with
PYTHONPATH pointing at one checkout or another (a git worktree of an older commit) to compare code versions on
the same machine:

    OMP_NUM_THREADS=2 PYTHONPATH=/path/to/checkout/src python docs/bench/batch-pricing/inprocess_ab.py 16 8 3
    OMP_NUM_THREADS=2 PYTHONPATH=/path/to/checkout/src python docs/bench/batch-pricing/inprocess_ab.py 16 16 2 128

A fifth argument loads the model in that dtype ("bfloat16"; default: the engine's).
"""

import statistics
import sys
import time

import torch

import lopa
from lopa.api import Engine
from lopa.bench.data import load_questions, spread

count, batch, rounds = (int(a) for a in sys.argv[1:4])
tokens = int(sys.argv[4]) if len(sys.argv) > 4 else 64
questions = spread(load_questions("../shared/data/spec_bench_dev.jsonl"), count)
prompts = [[{"role": "user", "content": q.turns[0]}] for q in questions]
engine = Engine.from_pretrained(dtype=getattr(torch, sys.argv[5]) if len(sys.argv) > 5 else None)


def tokens_per_s(method: str) -> float:
    start = time.perf_counter()
    results = engine.generate_many(prompts, max_new_tokens=tokens, method=method, max_batch=batch, progress=False)
    return sum(r.stats.new_tokens for r in results) / (time.perf_counter() - start)


tokens_per_s("ar"), tokens_per_s("lopa")  # warm-up
ratios = []
for _ in range(rounds):
    plain, lookahead = tokens_per_s("ar"), tokens_per_s("lopa")
    print(round(plain, 1), round(lookahead, 1), end=" ", flush=True)
    ratios.append(lookahead / plain)
print(lopa.__file__, "batch", batch, "ratios", [round(r, 2) for r in ratios], "median", round(statistics.median(ratios), 3))
